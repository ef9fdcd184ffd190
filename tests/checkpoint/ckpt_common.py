"""Shared pieces of the checkpoint test drivers: the tiny models, running `mtron train` (under
mpirun for np > 1), reading its metrics."""
import json
import os
import subprocess
import sys

COMMON = ("--num-layers 4 --hidden-size 64 --seq-length 32 --micro-batch-size 2 "
          "--global-batch-size 16 --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine "
          "--lr-warmup-iters 2 --mock-data --vocab-size 500 --seed 1234 --log-interval 1").split()
ARCH = {
    "gpt2": "--num-attention-heads 4".split(),
    "llama": ("--num-attention-heads 8 --group-query-attention --num-query-groups 4 --swiglu "
              "--normalization RMSNorm --position-embedding-type rope "
              "--untie-embeddings-and-output-weights --disable-bias-linear").split(),
}
# Mixtral-like: llama with 8 experts per layer, top-2 softmax routing, dropless, aux loss and
# z-loss (as tests/parallel/layout_invariance.py's moe model).
ARCH["moe"] = ARCH["llama"] + (
    "--num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 96 --moe-aux-loss-coeff 1e-2 "
    "--moe-z-loss-coeff 1e-3").split()
# What an MoE run logs besides the LM loss: auxiliary losses and the routing checksum.
MOE_KEYS = ("load_balancing_loss", "z_loss", "moe_routing_hash")


def mpi_prefix(np_):
    if np_ <= 1:
        return []
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np",
            str(np_)]


def env():
    # One OpenMP thread per process: tests run side by side on few cores, where spinning
    # OpenMP teams of several processes slow each other down by orders of magnitude.
    return dict(os.environ, OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1")


def train(mtron, np_, args, metrics, expect_rc=0, timeout=300):
    """Runs mtron train; returns (metrics rows, combined output)."""
    cmd = mpi_prefix(np_) + [mtron, "train"] + args + ["--metrics-file", metrics]
    p = subprocess.run(cmd, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=timeout)
    if p.returncode != expect_rc:
        print(p.stdout)
        sys.exit("exit %d (expected %d): %s" % (p.returncode, expect_rc, " ".join(cmd)))
    return read_metrics(metrics), p.stdout


def read_metrics(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
