"""Shared pieces of the checkpoint test drivers: the tiny models (gpt2, llama, moe), running
`mtron train` (under mpirun for np > 1) and reading its metrics, all from scripts/mtron_run.py."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from mtron_run import TINY as COMMON, TINY_ARCH as ARCH  # noqa: E402,F401
from mtron_run import env, mpi_prefix, read_metrics, train  # noqa: E402,F401

# Hugging Face's Qwen3 (hf_reference.py): llama with --qk-layernorm; Qwen3-MoE with a dense first
# layer (its config's mlp_only_layers).
ARCH["qwen3"] = ARCH["llama"] + ["--qk-layernorm"]
ARCH["qwen3moe_mixed"] = [("([0]+[1]*3)" if v == "([1]*4)" else v) for v in ARCH["qwen3moe"]]
assert ARCH["qwen3moe_mixed"] != ARCH["qwen3moe"]

# What an MoE run logs besides the LM loss: auxiliary losses, the routing checksum and the
# expert biases' checksum.
MOE_KEYS = ("load_balancing_loss", "seq_load_balancing_loss", "z_loss", "moe_routing_hash",
            "moe_expert_bias_hash")


def device_flags(device):
    """mtron train's flags for `device` (None: mtron's default, the CPU)."""
    if device is None:
        return []
    return ["--device", device]
