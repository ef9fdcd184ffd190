#!/usr/bin/python3
"""Layout invariance (design.md's correctness contract), checked end to end with `mtron train`.

  layout_invariance.py baseline MTRON ARCH OUT.jsonl
      trains ARCH for 10 iterations in one process and keeps its metrics
  layout_invariance.py check MTRON ARCH BASELINE.jsonl NP FLAGS...
      trains the same model under `mpirun -np NP` with the layout FLAGS and requires every
      iteration's loss and gradient norm to match the baseline (rel <= 1e-5); for MoE models
      also the logged auxiliary losses (rel <= 1e-5), the routed and the dropped (token, expert)
      pairs (exactly: counts and checksums), and rank 0's expert weight bytes = the 1-process
      bytes x (its stage's share of the MoE layers) / (EP x expert TP)
  layout_invariance.py seeds MTRON ARCH BASELINE.jsonl
      (a dropout model) trains the 1-process run again: the same losses, bit for bit; with
      another --seed, and without dropout: different losses

MTRON_EMULATOR (in the environment; a cross build's tests set it): a command line put in front of
MTRON to run it, e.g. qemu-aarch64 and its options.

ARCH: gpt2 (LayerNorm, GELU, learned positions, tied embeddings, biases) or llama (RMSNorm,
SwiGLU, RoPE, GQA with 4 query groups for 8 heads, untied, no biases); mla (llama's norms, MLP
and embeddings with multi-latent attention: 4 heads, q and kv latents); moe (llama with 8 experts
per layer, top-2 softmax routing, dropless, aux loss and z-loss: Mixtral-like) or moe_cap (llama
with MoE every 2nd layer, sigmoid top-2 routing, a shared expert, capacity factor 1 dropping
by weight, seq_aux_loss and z-loss) or moe_sinkhorn (llama with 8 experts, Sinkhorn top-1
routing and z-loss); qwen3moe (llama with --qk-layernorm, head dim 16, 8 experts
top-2 in every layer (--moe-layer-freq "([1]*4)"), no shared expert, aux loss: Qwen3-MoE-like) or
dsmoe (DeepSeek-V3-like: a dense first layer by --moe-layer-freq "[0,1,1,1]", 16 experts top-4
in 4 groups of which 2 are chosen, sigmoid scores with the aux-loss-free expert bias, top-k
scaling factor 2.5, a shared expert, seq_aux_loss), whose expert biases after every iteration
must equal the 1-process run's (moe_expert_bias_hash), or dsv3 (DeepSeek-V3-shaped: multi-latent
attention, a dense first layer, 8 experts top-2 in 4 groups of which 2 are chosen, sigmoid scores
with the expert bias, a shared expert, seq_aux_loss and one MTP depth, an MoE layer); mtp (llama with two multi-token
prediction depths, whose logged losses must match too) and mtp_tied (with tied embeddings).
qwen2: llama with a bias on the QKV projection alone (--add-qkv-bias). llama_eod and mtp_eod:
llama and mtp with --eod-mask-loss on a corpus of short documents (tests/data/eod_corpus.py, made
by the baseline run in the current folder), so every rank's micro-batches mask a different number
of tokens while the loss stays the mean over the global batch's unmasked ones; gpt2_reset: gpt2
with --eod-mask-loss and --reset-position-ids (its learned positions from 0 after each
end-of-document token, which CP ranks must find in their chunks' samples). These run without dropout; gpt2_dropout and llama_dropout
are gpt2 and llama with --hidden-dropout 0.1 --attention-dropout 0.1 (Megatron's default), whose
masks every layout must reproduce; mla_fp8: mla with llama_fp8's FP8 recipe (the latent
projections' GEMMs in FP8 too). fp32, same seed and data; gpt2_fp16: gpt2 in fp16 with
dynamic loss scaling (the same iterations must be skipped with the same loss scales); llama_fp8:
llama in bf16 with FP8 GEMMs (hybrid format, delayed scaling, amax history 16, algorithm max;
the amaxes are reduced over TP and DP x CP, so every layout quantises with the same scales):
the loss within rel 1e-4, the gradient norm within 5e-3 (the layouts' different fp32
summation orders move a few values across FP8 rounding boundaries, each by a whole FP8 step;
plain bf16 already differs by 1.3e-4 in the gradient norm after 10 iterations), and the loss of
the first 3 iterations within 1e-6, before those differences accumulate (with scales that
differ between layouts, amaxes not reduced, iteration 2 already differs by 1e-5); llama_fp8_fp32:
the same FP8 recipe without --bf16 (quantised from fp32), the same tolerances. llama_bf16:
llama in bf16 (tolerance 5e-4 over 10 iterations: bf16's rounding boundaries), and the loss and
gradient norm of the first 2 iterations within 1e-6 and 2e-6: under context parallelism q, k, v,
the attention output and its gradient must be rounded where the 1-process run's bf16 attention
rounds them (CP2 without that rounding: iteration 2's loss 2.0e-6 off, iteration 1's gradient
norm 7.5e-6). gpt2_muon, llama_muon (Nesterov) and moe_muon: --optimizer muon; gpt2_muon's
Newton-Schulz runs in bf16 (Megatron's default), whose rounding (X = a X + B X cancels most of its
terms, so an element of B rounded the other way is a large difference) turns the layouts' fp32
differences of 1e-8 into 2.5e-4 within 10 iterations: tolerance 1e-3; llama_muon and moe_muon's
in fp32 (--muon-fp32-matmul-prec high).
"""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import mtron_run  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data"))
import eod_corpus  # noqa: E402

COMMON = mtron_run.TINY + ["--train-iters", "10"]
ARCH = dict(mtron_run.TINY_ARCH)
ARCH["moe_cap"] = ARCH["llama"] + (
    "--num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 96 --moe-layer-freq 2 "
    "--moe-router-score-function sigmoid --moe-shared-expert-intermediate-size 64 "
    "--moe-expert-capacity-factor 1.0 --moe-router-load-balancing-type seq_aux_loss "
    "--moe-aux-loss-coeff 1e-2 --moe-z-loss-coeff 1e-3").split()
# Sinkhorn routing, top-1 (sigmoid weights) with the z-loss: every layout balances the whole
# micro-batch's logits, so the routed pairs are the 1-process run's.
ARCH["moe_sinkhorn"] = ARCH["llama"] + (
    "--num-experts 8 --moe-router-topk 1 --moe-ffn-hidden-size 96 "
    "--moe-router-load-balancing-type sinkhorn --moe-z-loss-coeff 1e-3").split()
# fp16 with dynamic loss scaling, from a scale low enough to take steps within 10 iterations and
# a window of 2 so that it grows into overflows again: every layout must skip the same
# iterations with the same scales. fp32 rounding differences between layouts move values across
# fp16 rounding boundaries, hence its looser tolerance.
ARCH["gpt2_fp16"] = ARCH["gpt2"] + "--fp16 --initial-loss-scale 1048576 --loss-scale-window 2".split()
# Qwen2's biases: the QKV projection's alone (--add-qkv-bias), sharded over TP with its weight.
ARCH["qwen2"] = ARCH["llama"] + ["--add-qkv-bias"]
ARCH["llama_fp8"] = ARCH["llama"] + (
    "--bf16 --fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 16 "
    "--fp8-amax-compute-algo max").split()
ARCH["llama_bf16"] = ARCH["llama"] + ["--bf16"]
# FP8 without --bf16: the GEMM operands quantised from fp32, the rest of the model fp32.
ARCH["llama_fp8_fp32"] = ARCH["llama"] + ARCH["llama_fp8"][len(ARCH["llama"]) + 1:]
# Multi-latent attention in FP8: its down and up projections' GEMMs quantised too.
ARCH["mla_fp8"] = ARCH["mla"] + ARCH["llama_fp8"][len(ARCH["llama"]):]
EOD = ["--eod-mask-loss", "--tokenizer-type", "NullTokenizer", "--data-path", "@CORPUS@"]
ARCH["llama_eod"] = ARCH["llama"] + EOD
ARCH["gpt2_reset"] = ARCH["gpt2"] + EOD + ["--reset-position-ids"]
ARCH["mtp_eod"] = ARCH["mtp"] + EOD
# Muon: every layout orthogonalises the same whole matrices (gathered over TP and expert TP in
# their global order; the fused QKV weight's q, k and v rows apart; SwiGLU's fc1 gate over up):
# in fp32 on llama and moe, in bf16 (Megatron's default precision) on gpt2.
MUON = ["--optimizer", "muon"]
ARCH["gpt2_muon"] = ARCH["gpt2"] + MUON
ARCH["llama_muon"] = ARCH["llama"] + MUON + ["--muon-nesterov", "--muon-fp32-matmul-prec", "high"]
ARCH["moe_muon"] = ARCH["moe"] + MUON + ["--muon-fp32-matmul-prec", "high"]
NO_DROPOUT = "--hidden-dropout 0 --attention-dropout 0".split()
DROPOUT = "--hidden-dropout 0.1 --attention-dropout 0.1".split()
for a in list(ARCH):
    ARCH[a + "_dropout"] = ARCH[a] + DROPOUT
    ARCH[a] = ARCH[a] + NO_DROPOUT
TOL = 1e-5
ARCH_TOL = {"gpt2_fp16": 3e-4, "llama_fp8": 1e-4, "llama_fp8_fp32": 1e-4, "mla_fp8": 1e-4,
            "llama_bf16": 5e-4,
            "gpt2_muon": 1e-3}
GRAD_TOL = {"llama_fp8": 5e-3, "llama_fp8_fp32": 5e-3, "mla_fp8": 5e-3}  # the gradient norm's, where it differs
# The loss of the first N iterations within rel. FP8: iteration 2 is the first whose scales come
# from an amax history, so it tells an amax reduction that is missing (1.5e-5 off). Later ones may
# move more: on AVX512_BF16 GEMMs (vdpbf16ps rounds per pair of products and flushes denormals) the
# layouts' different GEMM shapes put iteration 3 1.2e-5 apart under TP2 + SP.
# bf16: the gradient norm of the first N iterations too (the third figure), where the layouts
# differ only by fp32 summation orders before bf16's rounding boundaries amplify them.
EARLY = {"llama_fp8": (2, 1e-6), "llama_fp8_fp32": (2, 1e-6), "mla_fp8": (2, 1e-6),
         "llama_bf16": (2, 1e-6, 2e-6)}
AUX = ("load_balancing_loss", "seq_load_balancing_loss", "z_loss", "mtp_1 loss", "mtp_2 loss")
EXPERT_BYTES = re.compile(r"\[mtron r0/\d+\] .*expert weights on this rank: (\d+) bytes")


def flag(flags, name, default):
    return int(flags[flags.index(name) + 1]) if name in flags else default


def moe_layers(args):
    """Which layers of a run with `args` are MoE layers (--moe-layer-freq: k, or a list), then
    the --mtp-num-layers depths' (of the last layer's kind)."""
    n = flag(args, "--num-layers", 1)
    f = args[args.index("--moe-layer-freq") + 1] if "--moe-layer-freq" in args else "1"
    if f.isdigit():
        layers = [int(i % int(f) == 0) for i in range(n)]
    else:
        layers = list(eval(f))  # the test models' own list expressions (scripts/mtron_run.py)
    return layers + layers[-1:] * flag(args, "--mtp-num-layers", 0)


def corpus(arch):
    """The path of an --eod-mask-loss arch's corpus (made by its baseline run)."""
    return os.path.abspath("eod_corpus_%s_text_document" % arch)


def train(mtron, arch, np_, flags, metrics):
    args = COMMON + ARCH[arch] + flags
    if "@CORPUS@" in args:
        args = [corpus(arch) if a == "@CORPUS@" else a for a in args if a != "--mock-data"]
    return mtron_run.train(mtron, np_, args, metrics, timeout=600)


def seeds(mtron, arch, base):
    """The dropout run is deterministic for a seed and changes with the seed and with p."""
    losses = [r["lm_loss"] for r in base]
    with tempfile.TemporaryDirectory() as d:
        again = [r["lm_loss"] for r in train(mtron, arch, 1, [], os.path.join(d, "a.jsonl"))[0]]
        other = [r["lm_loss"] for r in
                 train(mtron, arch, 1, ["--seed", "4321"], os.path.join(d, "b.jsonl"))[0]]
        flags = ARCH[arch][:-len(DROPOUT)] + NO_DROPOUT
        off = [r["lm_loss"] for r in
               mtron_run.train(mtron, 1, COMMON + flags, os.path.join(d, "c.jsonl"), timeout=600)[0]]
    print("seed 1234 twice: %s" % ("identical" if again == losses else "DIFFERENT"))
    print("seed 4321:       %s" % " ".join("%.6f" % x for x in other))
    print("no dropout:      %s" % " ".join("%.6f" % x for x in off))
    ok = again == losses and other != losses and off != losses
    print("%s seeds: %s" % (arch, "ok" if ok else "FAILED"))
    return 0 if ok else 1


def main():
    mode, mtron, arch = sys.argv[1], sys.argv[2], sys.argv[3]
    if mode == "baseline":
        if "@CORPUS@" in ARCH[arch]:
            eod_corpus.make(mtron, corpus(arch)[:-len("_text_document")], mtron_run.emulator())
        rows, out = train(mtron, arch, 1, [], sys.argv[4])
        with open(sys.argv[4] + ".log", "w") as f:
            f.write(out)
        print("baseline %s: %s" % (arch, " ".join("%.6f" % r["lm_loss"] for r in rows)))
        if arch == "moe_cap":  # the capacity test needs drops to compare
            dropped = sum(r["moe_dropped_pairs"] for r in rows)
            print("dropped (token, expert) pairs over 10 iterations: %d" % dropped)
            return 0 if dropped > 0 else 1
        return 0
    base = mtron_run.read_metrics(sys.argv[4])
    if mode == "seeds":
        return seeds(mtron, arch, base)
    np_ = int(sys.argv[5])
    flags = sys.argv[6:]
    with tempfile.TemporaryDirectory() as d:
        rows, out = train(mtron, arch, np_, flags, os.path.join(d, "m.jsonl"))
    assert len(rows) == len(base) == 10, "expected 10 logged iterations"
    if arch.startswith("mtp"):  # the two depths' losses are logged
        assert all("mtp_1 loss" in r and "mtp_2 loss" in r for r in base + rows), "no mtp losses"
    worst, failed = 0.0, False
    tol = ARCH_TOL.get(arch, TOL)
    gtol = GRAD_TOL.get(arch, tol)
    for b, r in zip(base, rows):
        rel = abs(r["lm_loss"] - b["lm_loss"]) / abs(b["lm_loss"])
        worst = max(worst, rel)
        if arch in EARLY and r["iteration"] <= EARLY[arch][0] and rel > EARLY[arch][1]:
            failed = True
            print("iteration %d: loss rel %.2e above %.0e" % (r["iteration"], rel, EARLY[arch][1]))
        # a skipped iteration (loss scaler's found-inf) has no grad norm: both or neither
        same_skip = (r["grad_norm"] is None) == (b["grad_norm"] is None) and \
            r.get("loss_scale") == b.get("loss_scale")
        failed |= not same_skip
        grel = 0.0 if b["grad_norm"] is None or r["grad_norm"] is None else \
            abs(r["grad_norm"] - b["grad_norm"]) / abs(b["grad_norm"])
        if arch in EARLY and len(EARLY[arch]) > 2 and r["iteration"] <= EARLY[arch][0] and \
                grel > EARLY[arch][2]:
            failed = True
            print("iteration %d: gradient norm rel %.2e above %.0e" % (r["iteration"], grel,
                                                                      EARLY[arch][2]))
        worst = max(worst, grel * tol / gtol)  # in units of the loss tolerance
        line = "iteration %2d  1 process %.9f  np %d %.9f  rel %.2e  grad norm rel %.2e" % (
            r["iteration"], b["lm_loss"], np_, r["lm_loss"], rel, grel)
        if b.get("loss_scale", 1.0) != 1.0 or b["grad_norm"] is None:
            line += "  loss scale %g%s%s" % (r.get("loss_scale"), "  skipped" if r["grad_norm"]
                                             is None else "", "" if same_skip else " DIFFERENT")
        for key in AUX:
            if key in b:
                arel = abs(r[key] - b[key]) / abs(b[key])
                worst = max(worst, arel)
                line += "  %s %.9f rel %.2e" % (key, r[key], arel)
        if "moe_routing_hash" in b:  # the same (token, expert) pairs routed
            same = r["moe_routing_hash"] == b["moe_routing_hash"]
            failed |= not same
            line += "  routing %s" % ("same" if same else "DIFFERENT")
        if "moe_expert_bias_hash" in b:  # the same expert biases after the step
            same = r["moe_expert_bias_hash"] == b["moe_expert_bias_hash"]
            failed |= not same
            line += "  expert bias %s" % ("same" if same else "DIFFERENT")
        if "moe_dropped_pairs" in b:
            same = (r["moe_dropped_pairs"], r["moe_dropped_hash"]) == (
                b["moe_dropped_pairs"], b["moe_dropped_hash"])
            failed |= not same
            line += "  dropped %d (1 process %d)%s" % (
                r["moe_dropped_pairs"], b["moe_dropped_pairs"], "" if same else " DIFFERENT PAIRS")
        print(line)
    if arch.startswith("moe") or arch in ("qwen3moe", "dsmoe", "dsv3"):
        with open(sys.argv[4] + ".log") as f:
            one = int(EXPERT_BYTES.search(f.read()).group(1))
        here = int(EXPERT_BYTES.search(out).group(1))
        ep = flag(flags, "--expert-model-parallel-size", 1)
        pp = flag(flags, "--pipeline-model-parallel-size", 1)
        etp = flag(flags, "--expert-tensor-parallel-size",
                   flag(flags, "--tensor-model-parallel-size", 1))
        args = COMMON + ARCH[arch] + flags
        layers = moe_layers(args)
        # rank 0's pipeline stage: the first 1/PP of the decoder; the MTP depths on the last
        stage0 = sum(layers[:flag(args, "--num-layers", 1) // pp]) if pp > 1 else sum(layers)
        ok = here * ep * etp * sum(layers) == one * stage0
        failed |= not ok
        print("expert weight bytes on rank 0: %d = 1-process %d x %d/%d MoE layers / (EP %d x "
              "expert TP %d)%s" % (here, one, stage0, sum(layers), ep, etp, "" if ok else "  WRONG"))
    print("%s np %d %s: worst rel %.2e (tol %.0e; gradient norm tol %.0e)" %
          (arch, np_, " ".join(flags), worst, tol, gtol))
    return 0 if worst <= tol and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
