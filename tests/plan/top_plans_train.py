#!/usr/bin/python3
"""The plan `mtron plan` ranks first on H100 runs, for every catalog model.

  top_plans_train.py MTRON MTRON_CUDASIM

For each of the 25 catalog models at a GPU count where it fits (GPUS below: 8 GPUs up to 16B,
64 for the 70B class and both Mixtrals, 256 for GPT-3 175B, Megatron's 175B, Narayanan's 145B,
Nemotron-4 340B and DeepSeek-V3, 384 for Llama 3.1 405B, whose 126 layers leave 512 GPUs only
PP2, which does not fit), and for three FP8 plans (FP8_PLANS: Llama 3 8B hybrid with an amax
history of 16, Mixtral 8x7B e4m3, DeepSeek-V3 hybrid on 512 GPUs, whose multi-latent attention's
projections run in FP8 too), `mtron plan --hardware h100-sxm --emit mpirun` writes the top
plan's script, and then:
  (a) the script runs with the stand-in mpirun of tests/e2e/launchers, so `mtron train
      --print-layout --world-size N` parses every flag at the plan's world size; the script must
      select --device cuda;
  (b) a scaled-down copy of its `mtron train` line trains for 2 iterations under mpirun on
      MTRON_CUDASIM --device cuda (the CUDA code path on the CPU emulation); it must exit 0 and
      log a finite loss for both iterations.
The scaled copy keeps every flag of the script except these, which it replaces: 2 layers per
pipeline stage, hidden 64, FFN 128, 4 heads (2 query groups with GQA, kv channels 16), seq and max
positions 32, vocab 500; multi-latent attention at q rank 24, kv rank 16, head dims 12 + 8 and 10;
4 experts (8 with router groups: 4 groups, 2 chosen) with top-k at most 2, expert FFN 48, shared
expert 64, --moe-layer-freq lists sampled at evenly spaced layers (DeepSeek-V3 at PP1: [0,1]). Each
parallel size (TP, PP, CP, EP, ETP, DP) is capped at 2 (DP raised to 2 where the expert grid needs
it), virtual pipeline stages become 2 where PP stays 2 (one layer per virtual stage); an uneven
split stays uneven at PP2 (v layers first, 2v last, 3v in all, v the virtual stages per rank;
dropped at PP1), a layout string becomes `Et|tt|tt|mL` (PP2 x VPP2, 5 layers; the m's as many as
the MTP depths); sequence parallelism, the distributed optimizer and its overlaps,
--tp-comm-overlap, recompute (and its modules), precision and FP8 flags, dropout, normalization,
activation, positions, MTP and routing are kept. The batch is 2 x PP micro-batches of 1 sequence
per DP rank; --train-iters 2, --lr-warmup-iters 1, --eval-iters 0, --log-interval 1. The top plans
scale to DP2 (2 ranks), TP2 SP DP2 (4), TP2 SP PP2 VPP2 DP2 (8), TP2 SP PP2 DP2 with full recompute
(8; Llama 3.1 405B), PP2 VPP2 EP2 DP2 (4; Mixtral 8x7B), TP2 SP PP2 VPP2 EP2 DP2 (8; Mixtral 8x22B)
and TP2 SP PP2 EP2 DP2 over a layout string with full recompute (8; DeepSeek-V3, whose plan
splits its 61 layers, the embedding, the MTP depth and the loss by `Et|(tt|)*30mL` over PP16 x
VPP2), all with the distributed optimizer and bf16. Copies that differ only in constants that
select no code path (rotary base, norm epsilon, init std, the aux-loss coefficient, max positions)
train once: the 28 plans come down to 20 runs, listed in the output (about 90 CPU-seconds);
DeepSeek-V3's FP8 plan trains the same way with its multi-latent attention's projections in FP8.
"""
import glob
import json
import math
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import mtron_run  # noqa: E402

GPUS = [("gpt2-124m", 8), ("gpt2-350m", 8), ("gpt3-1.3b", 8), ("gpt3-2.7b", 8), ("gpt3-6.7b", 8),
        ("gpt3-13b", 8), ("gpt3-175b", 256), ("megatron-gpt-1.7b", 8), ("megatron-gpt-16b", 8),
        ("megatron-gpt-70b", 64), ("megatron-gpt-175b", 256), ("narayanan-1.7b", 8),
        ("narayanan-145b", 256), ("llama2-7b", 8), ("llama2-13b", 8), ("llama2-70b", 64),
        ("llama3-8b", 8), ("llama3-70b", 64), ("llama3.1-8b", 8), ("llama3.1-70b", 64),
        ("llama3.1-405b", 384), ("mixtral-8x7b", 64), ("mixtral-8x22b", 64),
        ("deepseek-v3", 256), ("nemotron4-340b", 256)]
FP8_PLANS = [("llama3-8b", 8, ["--fp8-format", "hybrid", "--fp8-amax-history-len", "16"]),
             ("mixtral-8x7b", 64, ["--fp8-format", "e4m3"]),
             ("deepseek-v3", 512, ["--fp8-format", "hybrid"])]

TINY = {"--hidden-size": "64", "--ffn-hidden-size": "128",
        "--num-attention-heads": "4", "--seq-length": "32", "--max-position-embeddings": "32",
        "--vocab-size": "500"}
TINY_IF_SET = {"--num-query-groups": "2", "--kv-channels": "16", "--q-lora-rank": "24",
               "--kv-lora-rank": "16", "--qk-head-dim": "12", "--qk-pos-emb-head-dim": "8",
               "--v-head-dim": "10", "--moe-ffn-hidden-size": "48",
               "--moe-shared-expert-intermediate-size": "64"}
SCHEDULE = {"--train-iters": "2", "--lr-warmup-iters": "1", "--eval-iters": "0",
            "--eval-interval": "2", "--log-interval": "1"}
# Values that select no code path: copies differing only in them are one run.
CONSTANTS = {"--rotary-base", "--norm-epsilon", "--init-method-std", "--moe-aux-loss-coeff",
             "--max-position-embeddings"}
UNEVEN = ["--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"]
LAYOUT = "--pipeline-model-parallel-layout"
PARALLEL = ["--tensor-model-parallel-size", "--pipeline-model-parallel-size",
            "--context-parallel-size", "--expert-model-parallel-size",
            "--expert-tensor-parallel-size"]


def fail(msg):
    sys.exit("FAIL: " + msg)


class Flags:
    """An argv as ordered [flag, values] pairs; values are the words up to the next --word."""

    def __init__(self, argv):
        self.items = []
        for w in argv:
            if w.startswith("--") or not self.items:
                self.items.append([w, []])
            else:
                self.items[-1][1].append(w)

    def get(self, flag, default=None):
        """The flag's value (several: joined by spaces); None for a flag without one."""
        return next((" ".join(v) if v else None for f, v in self.items if f == flag), default)

    def has(self, flag):
        return any(f == flag for f, _ in self.items)

    def set(self, flag, value):
        for item in self.items:
            if item[0] == flag:
                item[1] = [value]
                return
        self.items.append([flag, [value]])

    def drop(self, flag):
        self.items = [i for i in self.items if i[0] != flag]

    def argv(self):
        return [w for f, v in self.items for w in [f] + v]


def script_args(script):
    """The ARGS array of an emitted script, as bash reads it."""
    out = subprocess.run(
        ["bash", "-c", 'eval "$(sed -n "/^ARGS=(/,/^)/p" "$1")"; printf "%s\\0" "${ARGS[@]}"',
         "_", script], check=True, stdout=subprocess.PIPE, text=True).stdout
    return out.split("\0")[:-1]


def sampled_layer_freq(value, layers):
    """A --moe-layer-freq list ("[0,0,1,...]") sampled at `layers` evenly spaced layers."""
    if not value.startswith("["):
        return value
    full = [w.strip() for w in value.strip("[]").split(",")]
    return "[" + ",".join(full[round(i * (len(full) - 1) / (layers - 1))]
                          for i in range(layers)) + "]"


def scale(argv, world):
    """The scaled-down copy of a plan's `mtron train` flags; returns (ranks, flags)."""
    a = Flags(argv)
    tp, pp, cp, ep, etp = (int(a.get(f, "1")) for f in PARALLEL)
    dp = world // (tp * pp * cp)
    tp_s, pp_s, cp_s, ep_s, etp_s, dp_s = (min(x, 2) for x in (tp, pp, cp, ep, etp, dp))
    while (tp_s * cp_s * dp_s) % (ep_s * etp_s):  # the expert grid: TP x CP x DP = ETP x EP x EDP
        dp_s *= 2
    for flag, v in zip(PARALLEL, (tp_s, pp_s, cp_s, ep_s, etp_s)):
        if a.has(flag):
            a.set(flag, str(v))
    if a.has("--num-virtual-stages-per-pipeline-rank"):
        if pp_s > 1:
            a.set("--num-virtual-stages-per-pipeline-rank", "2")
        else:
            a.drop("--num-virtual-stages-per-pipeline-rank")
    for flag, v in TINY.items():
        a.set(flag, v)
    for flag, v in TINY_IF_SET.items():
        if a.has(flag):
            a.set(flag, v)
    if a.has("--num-experts"):
        grouped = a.has("--moe-router-num-groups")
        a.set("--num-experts", "8" if grouped else "4")
        a.set("--moe-router-topk", str(min(int(a.get("--moe-router-topk", "2")), 2)))
        if grouped:
            a.set("--moe-router-num-groups", "4")
            a.set("--moe-router-group-topk", "2")
    layers = 2 * pp_s
    uneven = [f for f in UNEVEN if a.has(f)]
    if uneven and pp_s == 1:
        for f in uneven:
            a.drop(f)
    elif uneven:
        # PP2 keeps an uneven split: v layers first, 2v last (v virtual stages per rank).
        v = int(a.get("--num-virtual-stages-per-pipeline-rank", "1"))
        layers = 3 * v
        for f in uneven:
            a.set(f, str(v if f == UNEVEN[0] else 2 * v))
    if a.has(LAYOUT):
        # A plan's layout string (the embedding, MTP depths and loss counted as layers) keeps its
        # form over PP2 x VPP2: the embedding and a layer, two stages of two, the MTP depths and
        # the loss.
        layers = 5
        a.set(LAYOUT, "Et|tt|tt|" + "m" * int(a.get("--mtp-num-layers", "0")) + "L")
    if a.has("--moe-layer-freq"):
        a.set("--moe-layer-freq", sampled_layer_freq(a.get("--moe-layer-freq"), layers))
    a.set("--num-layers", str(layers))
    a.set("--micro-batch-size", "1")
    a.set("--global-batch-size", str(dp_s * 2 * pp_s))
    for flag, v in SCHEDULE.items():
        a.set(flag, v)
    return tp_s * pp_s * cp_s * dp_s, a.argv()


def layout(ranks, argv):
    """A scaled copy's layout in words: "TP2 SP PP2 VPP2 EP2 ETP1 DP2 distopt full bf16"."""
    a = Flags(argv)
    tp, pp, cp, ep, etp = (int(a.get(f, "1")) for f in PARALLEL)
    words = ["TP%d" % tp]
    if a.has("--sequence-parallel"):
        words.append("SP")
    words.append("PP%d" % pp)
    if a.has("--num-virtual-stages-per-pipeline-rank"):
        words.append("VPP" + a.get("--num-virtual-stages-per-pipeline-rank"))
    if any(a.has(f) for f in UNEVEN):
        words.append("(stages %s/%s)" % tuple(a.get(f, "-") for f in UNEVEN))
    if a.has(LAYOUT):
        words.append("layout " + a.get(LAYOUT))
    if cp > 1:
        words.append("CP%d" % cp)
    if ep > 1:
        words.append("EP%d ETP%d" % (ep, etp))
    words.append("DP%d" % (ranks // (tp * pp * cp)))
    if a.has("--use-distributed-optimizer"):
        words.append("distopt")
    if a.has("--recompute-granularity"):
        words.append(a.get("--recompute-granularity"))
    if a.has("--recompute-modules"):
        words[-1] += "(%s)" % a.get("--recompute-modules", "")
    words.append("bf16" if a.has("--bf16") else "fp32")
    if a.has("--fp8-format"):
        words.append("fp8 " + a.get("--fp8-format"))
    return " ".join(words)


def run_key(ranks, argv):
    """What makes two copies the same run: the ranks and the flags (in any order) but CONSTANTS."""
    return (ranks, tuple(sorted((f, " ".join(v)) for f, v in Flags(argv).items
                                if f not in CONSTANTS)))


def emit(mtron, tmp, name, gpus, extra, n):
    script = os.path.join(tmp, "%d.sh" % n)
    cmd = [mtron, "plan", "--model", name, "--hardware", "h100-sxm", "--gpus", str(gpus),
           "--emit", "mpirun", "--mtron", mtron, "-o", script] + extra
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return script, p


def check_parses(script, label):
    env = dict(os.environ, PATH=os.path.join(ROOT, "tests", "e2e", "launchers") + os.pathsep +
               os.environ["PATH"], HOSTFILE="/dev/null")
    p = subprocess.run(["bash", script], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0 or "Theoretical memory footprints" not in p.stdout:
        fail("%s: the script does not parse in mtron train:\n%s" % (label, p.stdout[-2000:]))


def main():
    mtron, cudasim = sys.argv[1], sys.argv[2]
    os.environ["OMPI_MCA_btl_vader_single_copy_mechanism"] = "none"
    start = time.time()
    catalog = {m["name"] for path in glob.glob(os.path.join(ROOT, "catalog", "models", "*.json"))
               for m in json.load(open(path))["models"]}
    if catalog != {name for name, _ in GPUS}:
        fail("GPUS does not list the catalog's models: missing %s, not in the catalog %s" % (
            sorted(catalog - {n for n, _ in GPUS}), sorted({n for n, _ in GPUS} - catalog)))
    runs = {}  # run_key -> (ranks, flags, [plan labels])
    with tempfile.TemporaryDirectory() as tmp:
        plans = [(n, g, []) for n, g in GPUS] + FP8_PLANS
        for i, (name, gpus, extra) in enumerate(plans):
            label = " ".join([name, "--gpus", str(gpus)] + extra)
            script, p = emit(mtron, tmp, name, gpus, extra, i)
            if p.returncode != 0:
                fail("%s: no launch script: %s" % (label, p.stdout.strip()))
            argv = script_args(script)
            if Flags(argv).get("--device") != "cuda":
                fail("%s: the script does not select --device cuda" % label)
            check_parses(script, label)
            ranks, flags = scale(argv, gpus)
            runs.setdefault(run_key(ranks, flags), (ranks, flags, []))[2].append(label)

        print("%d plans emitted and parsed (%.1f s); %d scaled-down runs" % (
            len(plans), time.time() - start, len(runs)))
        for n, (ranks, flags, labels) in enumerate(runs.values()):
            t0 = time.time()
            rows, out = mtron_run.train(cudasim, ranks, flags,
                                        os.path.join(tmp, "run%d.jsonl" % n), timeout=300)
            losses = [r["lm_loss"] for r in rows]
            if len(losses) != 2 or not all(isinstance(x, float) and math.isfinite(x)
                                           for x in losses):
                print(out[-3000:])
                fail("scaled copy of %s: losses %s" % (", ".join(labels), losses))
            print("run %d: %d ranks, %s, loss %.4f %.4f (%.1f s): %s" % (
                n + 1, ranks, layout(ranks, flags), losses[0], losses[1], time.time() - t0,
                "; ".join(labels)))
    print("top_plans_train: %d plans, %d runs, %.1f s" % (len(plans), len(runs),
                                                          time.time() - start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
