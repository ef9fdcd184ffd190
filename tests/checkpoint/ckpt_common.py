"""Shared pieces of the checkpoint test drivers: the tiny models, running `mtron train` (under
mpirun for np > 1) and reading its metrics (scripts/mtron_run.py)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from mtron_run import env, mpi_prefix, read_metrics, train  # noqa: E402,F401

COMMON = ("--num-layers 4 --hidden-size 64 --seq-length 32 --micro-batch-size 2 "
          "--global-batch-size 16 --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine "
          "--lr-warmup-iters 2 --mock-data --vocab-size 500 --seed 1234 --log-interval 1 "
          "--eval-iters 0").split()
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
