#!/usr/bin/python3
"""FSDP's sharded gradients and parameters against sharded optimizer state alone, at DP 2.

  fsdp_shards.py MTRON [--device cuda]

--use-megatron-fsdp's strategies on the same per-layer buckets: optim (the distributed
optimizer's sharding), optim_grads (every micro-batch's gradients reduce-scattered as backward
completes them, summed into the rank's shard) and optim_grads_params (each rank holds its shard
of the parameters too, gathering a layer's for its forward and again for its backward).
optim_grads_params must give optim_grads' losses and gradient norms bit for bit (the gathers copy
exactly), and so with --overlap-grad-reduce --overlap-param-gather (each part's gather started
before it, its reduce-scatters completed after the next part's backward), in fp32 and bf16
(with bf16 reduction too), and optim's within 1e-6 in fp32 and 1e-4 in bf16 (the micro-batches'
gradients are summed after the reduction instead of before it). A checkpoint the optim_grads_params run saves (each
rank writes the master weights and moments it holds) must resume it bit for bit. The peak memory
per rank (the logging rank's peak resident set) must fall by at least half of what each strategy
stops holding at DP 2: half of the fp32 gradients (optim_grads against optim), half of the fp32
master weights and, in bf16, of their compute copy (optim_grads_params against optim_grads).
With gradients reduced in bf16, optim_grads_params must stay within 1e-3 of optim.

--device cuda (MTRON: mtron_cudasim, the CPU emulation of a GPU): the same in bf16 on a model
sized for the emulation's 2 MiB granules (4 layers of hidden 768, a 4096-token vocabulary),
where the peak is the device memory the tensors hold (FSDP's buffers mapped granule by granule,
kernels/cuda/vmm.cpp on a GPU), and the optim_grads_params run must match the CPU's within 3e-4
and resume from its checkpoint bit for bit.
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import mtron_run  # noqa: E402

# On the CPU: 4 layers of hidden 512 (3.2M parameters each) and untied embeddings of a
# 1024-token vocabulary: 13.7M parameters, big enough for their shards to show in the resident
# set. On the emulated GPU: 4 layers of hidden 768 (7.1M parameters, 28 MB of fp32 each, so that
# a rank's half of a layer spans several 2 MiB granules) and a 4096-token vocabulary (the
# embeddings' and the output layer's halves span granules too: the output layer's gradient is
# written in the forward pass, with the loss) on short sequences, which the emulation runs in
# seconds.
LAYERS = 4
CPU = dict(hidden=512, vocab=1024, seq=64, mbs=2, gbs=8)
CUDA = dict(hidden=768, vocab=4096, seq=32, mbs=1, gbs=4)


def model(shape):
    return ("--num-layers %d --hidden-size %d --num-attention-heads 8 --seq-length %d "
            "--max-position-embeddings %d --micro-batch-size %d --global-batch-size %d --lr 1e-4 "
            "--lr-decay-iters 4 "
            "--mock-data --vocab-size %d --seed 1234 --log-interval 1 --eval-iters 0 "
            "--untie-embeddings-and-output-weights --hidden-dropout 0 --attention-dropout 0"
            % (LAYERS, shape["hidden"], shape["seq"], shape["seq"], shape["mbs"], shape["gbs"],
               shape["vocab"])).split()

FSDP = ["--use-megatron-fsdp", "--ckpt-format", "fsdp_dtensor"]
STRATEGY = "--data-parallel-sharding-strategy"


def params(shape):
    h, v, seq = shape["hidden"], shape["vocab"], shape["seq"]
    layer = 12 * h * h + 13 * h  # QKV, projection, MLP (4h), their biases, 2 norms
    return LAYERS * layer + 2 * v * h + seq * h + 2 * h


def runner(mtron, d, shape, device):
    def run(name, flags):
        rows, _ = mtron_run.train(mtron, 2, model(shape) + flags + ["--device", device],
                                  os.path.join(d, device + "_" + name + ".jsonl"), timeout=600)
        return rows
    return run


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


def strategies(run, precision, extra, iters, param_bytes, rel, n):
    """The three strategies' runs, compared; returns (ok, the runs by strategy)."""
    runs = {}
    for strategy in ("optim", "optim_grads", "optim_grads_params"):
        runs[strategy] = run(precision + "_" + strategy, FSDP + [STRATEGY, strategy] + extra + iters)
    ok = same(runs["optim_grads"], runs["optim_grads_params"],
              precision + ": optim_grads_params against optim_grads")
    # Overlapped gathers and reduce-scatters (the same values).
    overlap = run(precision + "_overlap", FSDP + ["--overlap-grad-reduce", "--overlap-param-gather"] + extra + iters)
    ok &= same(runs["optim_grads_params"], overlap,
               precision + ": optim_grads_params overlapped")
    ok &= same(runs["optim"], runs["optim_grads_params"],
               precision + ": optim_grads_params against optim", rel)
    ok &= less_memory(runs["optim"], runs["optim_grads"], precision + ": optim_grads", 4 * n / 2)
    ok &= less_memory(runs["optim_grads"], runs["optim_grads_params"],
                      precision + ": optim_grads_params", param_bytes * n / 2)
    return ok, runs


def resumes(run, d, ran, iters):
    """bf16: an optim_grads_params run saved after `iters` iterations resumes as `ran` ran on."""
    ckpt = os.path.join(d, "ckpt")
    run("save", FSDP + ["--bf16", "--train-iters", str(iters), "--save", ckpt,
                        "--save-interval", str(iters)])
    resumed = run("resume", FSDP + ["--bf16", "--train-iters", str(len(ran)), "--load", ckpt])
    return same(ran[iters:], resumed,
                "bf16: resumed from its checkpoint, iterations %d-%d" % (iters + 1, len(ran)))


def main_cuda(mtron, d):
    run = runner(mtron, d, CUDA, "cuda")
    iters = ["--train-iters", "2"]
    ok, runs = strategies(run, "bf16", ["--bf16"], iters, 6, 1e-4, params(CUDA))
    cpu = runner(mtron, d, CUDA, "cpu")("bf16_optim_grads_params",
                                         FSDP + ["--bf16"] + iters)
    ok &= same(cpu, runs["optim_grads_params"], "bf16: the emulated GPU against the CPU", 3e-4)
    ok &= resumes(run, d, runs["optim_grads_params"], 1)
    return ok


def main_cpu(mtron, d):
    run = runner(mtron, d, CPU, "cpu")
    iters = ["--train-iters", "4"]
    ok = True
    runs = {}
    # The summation order's differences: in fp32 a few ulp; in bf16 they move values across
    # bf16 rounding boundaries (as the layouts of layout_llama_bf16 do).
    for precision, extra, param_bytes, rel in (("fp32", [], 4, 1e-6),
                                               ("bf16", ["--bf16"], 6, 1e-4)):
        good, runs = strategies(run, precision, extra, iters, param_bytes, rel, params(CPU))
        ok &= good
    # bf16 on the wire (--megatron-fsdp-grad-comm-dtype bf16, Megatron-FSDP's name for it):
    # each micro-batch's gradients rounded to bf16 for the reduction, summed in fp32; close
    # to optim's --grad-reduce-in-bf16, which rounds the step's sum once.
    comm16 = run("comm16", FSDP + ["--bf16", "--megatron-fsdp-grad-comm-dtype", "bf16"] + iters)
    reduce16 = run("reduce16", FSDP + [STRATEGY, "optim", "--bf16", "--grad-reduce-in-bf16"] + iters)
    ok &= same(reduce16, comm16, "bf16 gradient reduction: optim_grads_params against optim", 1e-3)
    overlap16 = run("comm16_overlap", FSDP + ["--bf16", "--megatron-fsdp-grad-comm-dtype", "bf16",
                                              "--overlap-grad-reduce", "--overlap-param-gather"]
                    + iters)
    ok &= same(comm16, overlap16, "bf16 gradient reduction: overlapped")
    ok &= resumes(run, d, runs["optim_grads_params"], 2)
    return ok


def main():
    mtron = sys.argv[1]
    cuda = sys.argv[2:] == ["--device", "cuda"]
    with tempfile.TemporaryDirectory() as d:
        ok = main_cuda(mtron, d) if cuda else main_cpu(mtron, d)
    print("fsdp shards: %s" % ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
