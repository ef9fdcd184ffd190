#!/usr/bin/python3
"""FSDP's sharded parameters against sharded optimizer state alone, at DP 2.

  fsdp_shards.py MTRON

--use-megatron-fsdp with optim_grads_params (each rank holds its shard of the parameters and
gathers a layer's for its forward and again for its backward) computes what the optim strategy
(the distributed optimizer's sharding, on the same per-layer buckets) computes from the same
shards, so in fp32 and in bf16 every iteration's loss and gradient norm must be equal bit for
bit; against --use-distributed-optimizer (one bucket: the gradient norm's partial sums split
elsewhere) the losses must be equal and the gradient norms within 1e-7. A checkpoint the FSDP run
saves (each rank writes the master weights it holds) must resume a distributed-optimizer run as
that run's own checkpoint would. The peak memory per rank (the logging rank's peak resident set)
must be lower than optim's by at least half of the shards it no longer holds: half of the fp32
master weights (and of the bf16 compute copy in bf16) at DP 2.
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import mtron_run  # noqa: E402

# 4 layers of hidden 768 (7.1M parameters each) and untied embeddings of a 1024-token vocabulary:
# 30M parameters, big enough for their shards to show in the resident set.
LAYERS, HIDDEN, VOCAB, SEQ = 4, 768, 1024, 64
MODEL = ("--num-layers %d --hidden-size %d --num-attention-heads 12 --seq-length %d "
         "--max-position-embeddings %d --micro-batch-size 2 --global-batch-size 8 --lr 1e-4 "
         "--lr-decay-iters 4 "
         "--mock-data --vocab-size %d --seed 1234 --log-interval 1 --eval-iters 0 "
         "--untie-embeddings-and-output-weights --hidden-dropout 0 --attention-dropout 0"
         % (LAYERS, HIDDEN, SEQ, SEQ, VOCAB)).split()
DISTOPT = ["--use-distributed-optimizer"]
FSDP = ["--use-megatron-fsdp", "--ckpt-format", "fsdp_dtensor"]
OPTIM = FSDP + ["--data-parallel-sharding-strategy", "optim"]


def params():
    layer = 12 * HIDDEN * HIDDEN + 13 * HIDDEN  # QKV, projection, MLP (4h), their biases, 2 norms
    return LAYERS * layer + 2 * VOCAB * HIDDEN + SEQ * HIDDEN + 2 * HIDDEN


def run(mtron, d, name, flags):
    rows, _ = mtron_run.train(mtron, 2, MODEL + flags, os.path.join(d, name + ".jsonl"),
                              timeout=600)
    return rows


def same(a, b, what, grad_rel=0.0):
    ok = len(a) == len(b) and all(
        x["lm_loss"] == y["lm_loss"] and
        abs(x["grad_norm"] - y["grad_norm"]) <= grad_rel * abs(x["grad_norm"])
        for x, y in zip(a, b))
    for x, y in zip(a, b):
        print("  iteration %d  loss %.9f %.9f  grad norm %.9f %.9f" % (
            x["iteration"], x["lm_loss"], y["lm_loss"], x["grad_norm"], y["grad_norm"]))
    print("%s: %s" % (what, ("bit for bit" if grad_rel == 0 else "the same losses, gradient "
                             "norms within %.0e" % grad_rel) if ok else "DIFFERENT"))
    return ok


def main():
    mtron = sys.argv[1]
    ok = True
    with tempfile.TemporaryDirectory() as d:
        for precision, extra, bytes_per_param in (("fp32", [], 4), ("bf16", ["--bf16"], 6)):
            iters = ["--train-iters", "4"]
            ref = run(mtron, d, precision + "_optim", OPTIM + extra + iters)
            fsdp = run(mtron, d, precision + "_fsdp", FSDP + extra + iters)
            ok &= same(ref, fsdp, "%s: optim_grads_params against optim" % precision)
            distopt = run(mtron, d, precision + "_distopt", DISTOPT + extra + iters)
            ok &= same(distopt, fsdp, "%s: optim_grads_params against --use-distributed-optimizer"
                       % precision, 1e-7)
            # Peak memory of the logging rank: the fp32 master's other half (and the compute
            # copy's in bf16) is not held, less one gathered layer at a time.
            saved = ref[-1]["peak_memory_mb"] - fsdp[-1]["peak_memory_mb"]
            shards_mb = bytes_per_param * params() / 2 / 2**20
            mem_ok = saved >= shards_mb / 2
            ok &= mem_ok
            print("%s: peak memory %.1f MB (optim) against %.1f MB (optim_grads_params): %.1f MB "
                  "less; the shards not held: %.1f MB, at least half required: %s" % (
                      precision, ref[-1]["peak_memory_mb"], fsdp[-1]["peak_memory_mb"], saved,
                      shards_mb, "ok" if mem_ok else "FAILED"))
        # bf16: the FSDP run saves after 2 iterations, the distributed optimizer resumes from it.
        ckpt = os.path.join(d, "ckpt")
        run(mtron, d, "save", FSDP + ["--bf16", "--train-iters", "2", "--save", ckpt,
                                      "--save-interval", "2"])
        resumed = run(mtron, d, "resume", DISTOPT + ["--bf16", "--train-iters", "4", "--load",
                                                     ckpt])
        ok &= same(distopt[2:], resumed, "bf16: resumed from FSDP's checkpoint, iterations 3-4")
    print("fsdp shards: %s" % ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
