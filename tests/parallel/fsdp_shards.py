#!/usr/bin/python3
"""FSDP's sharded gradients and parameters against sharded optimizer state alone, at DP 2.

  fsdp_shards.py MTRON

--use-megatron-fsdp's strategies on the same per-layer buckets: optim (the distributed
optimizer's sharding), optim_grads (every micro-batch's gradients reduce-scattered as backward
completes them, summed into the rank's shard) and optim_grads_params (each rank holds its shard
of the parameters too, gathering a layer's for its forward and again for its backward).
optim_grads_params must give optim_grads' losses and gradient norms bit for bit (the gathers copy
exactly), in fp32 and bf16, and optim's within 1e-6 in fp32 and 1e-4 in bf16 (the micro-batches'
gradients are summed after the reduction instead of before it). A checkpoint the optim_grads_params run saves (each
rank writes the master weights and moments it holds) must resume it bit for bit. The peak memory
per rank (the logging rank's peak resident set) must fall by at least half of what each strategy
stops holding at DP 2: half of the fp32 gradients (optim_grads against optim), half of the fp32
master weights and, in bf16, of their compute copy (optim_grads_params against optim_grads).
With gradients reduced in bf16, optim_grads_params must stay within 1e-3 of optim.
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import mtron_run  # noqa: E402

# 4 layers of hidden 512 (3.2M parameters each) and untied embeddings of a 1024-token vocabulary:
# 13.7M parameters, big enough for their shards to show in the resident set.
LAYERS, HIDDEN, VOCAB, SEQ = 4, 512, 1024, 64
MODEL = ("--num-layers %d --hidden-size %d --num-attention-heads 8 --seq-length %d "
         "--max-position-embeddings %d --micro-batch-size 2 --global-batch-size 8 --lr 1e-4 "
         "--lr-decay-iters 4 "
         "--mock-data --vocab-size %d --seed 1234 --log-interval 1 --eval-iters 0 "
         "--untie-embeddings-and-output-weights --hidden-dropout 0 --attention-dropout 0"
         % (LAYERS, HIDDEN, SEQ, SEQ, VOCAB)).split()
FSDP = ["--use-megatron-fsdp", "--ckpt-format", "fsdp_dtensor"]
STRATEGY = "--data-parallel-sharding-strategy"


def params():
    layer = 12 * HIDDEN * HIDDEN + 13 * HIDDEN  # QKV, projection, MLP (4h), their biases, 2 norms
    return LAYERS * layer + 2 * VOCAB * HIDDEN + SEQ * HIDDEN + 2 * HIDDEN


def run(mtron, d, name, flags):
    rows, _ = mtron_run.train(mtron, 2, MODEL + flags, os.path.join(d, name + ".jsonl"),
                              timeout=600)
    return rows


def same(a, b, what, rel=0.0):
    def close(x, y):
        return abs(x - y) <= rel * abs(x)
    ok = len(a) == len(b) and all(
        close(x["lm_loss"], y["lm_loss"]) and close(x["grad_norm"], y["grad_norm"])
        for x, y in zip(a, b))
    for x, y in zip(a, b):
        print("  iteration %d  loss %.9f %.9f  grad norm %.9f %.9f" % (
            x["iteration"], x["lm_loss"], y["lm_loss"], x["grad_norm"], y["grad_norm"]))
    print("%s: %s" % (what, ("bit for bit" if rel == 0 else "within %.0e" % rel) if ok
                      else "DIFFERENT"))
    return ok


def less_memory(a, b, what, shard_bytes):
    """b's peak memory at least half of shard_bytes below a's."""
    saved = a[-1]["peak_memory_mb"] - b[-1]["peak_memory_mb"]
    need = shard_bytes / 2**20 / 2
    ok = saved >= need
    print("%s: peak memory %.1f MB -> %.1f MB: %.1f MB less, at least %.1f required (half of "
          "%.1f MB not held): %s" % (what, a[-1]["peak_memory_mb"], b[-1]["peak_memory_mb"], saved,
                                     need, 2 * need, "ok" if ok else "FAILED"))
    return ok


def main():
    mtron = sys.argv[1]
    ok = True
    with tempfile.TemporaryDirectory() as d:
        iters = ["--train-iters", "4"]
        # The summation order's differences: in fp32 a few ulp; in bf16 they move values across
        # bf16 rounding boundaries (as the layouts of layout_llama_bf16 do).
        for precision, extra, param_bytes, rel in (("fp32", [], 4, 1e-6),
                                                   ("bf16", ["--bf16"], 6, 1e-4)):
            runs = {}
            for strategy in ("optim", "optim_grads", "optim_grads_params"):
                runs[strategy] = run(mtron, d, precision + "_" + strategy,
                                     FSDP + [STRATEGY, strategy] + extra + iters)
            ok &= same(runs["optim_grads"], runs["optim_grads_params"],
                       precision + ": optim_grads_params against optim_grads")
            ok &= same(runs["optim"], runs["optim_grads_params"],
                       precision + ": optim_grads_params against optim", rel)
            ok &= less_memory(runs["optim"], runs["optim_grads"], precision + ": optim_grads",
                              4 * params() / 2)
            ok &= less_memory(runs["optim_grads"], runs["optim_grads_params"],
                              precision + ": optim_grads_params", param_bytes * params() / 2)
        # bf16 on the wire (--megatron-fsdp-grad-comm-dtype bf16, Megatron-FSDP's name for it):
        # each micro-batch's gradients rounded to bf16 for the reduction, summed in fp32; close
        # to optim's --grad-reduce-in-bf16, which rounds the step's sum once.
        comm16 = run(mtron, d, "comm16", FSDP + ["--bf16", "--megatron-fsdp-grad-comm-dtype", "bf16"]
                     + iters)
        reduce16 = run(mtron, d, "reduce16", FSDP + [STRATEGY, "optim", "--bf16",
                                                     "--grad-reduce-in-bf16"] + iters)
        ok &= same(reduce16, comm16, "bf16 gradient reduction: optim_grads_params against optim",
                   1e-3)
        # bf16: the optim_grads_params run saved after 2 iterations resumes as it ran on.
        ckpt = os.path.join(d, "ckpt")
        run(mtron, d, "save", FSDP + ["--bf16", "--train-iters", "2", "--save", ckpt,
                                      "--save-interval", "2"])
        resumed = run(mtron, d, "resume", FSDP + ["--bf16", "--train-iters", "4", "--load", ckpt])
        ok &= same(runs["optim_grads_params"][2:], resumed,
                   "bf16: resumed from its checkpoint, iterations 3-4")
    print("fsdp shards: %s" % ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
