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
# Llama 3.1's RoPE scaling (rope_scaling of rope_type "llama3", factor 8).
ARCH["llama31"] = ARCH["llama"] + ["--use-rope-scaling"]
ARCH["qwen3moe_mixed"] = [("([0]+[1]*3)" if v == "([1]*4)" else v) for v in ARCH["qwen3moe"]]
assert ARCH["qwen3moe_mixed"] != ARCH["qwen3moe"]
# Qwen3-MoE with norm_topk_prob false: Megatron's --moe-router-pre-softmax.
ARCH["qwen3moe_pre_softmax"] = ARCH["qwen3moe_mixed"] + ["--moe-router-pre-softmax"]
# Hugging Face's DeepSeek-V3: the mla arch's attention (with its latent norms) and a dense first
# layer, then 8 experts top-2 in 4 groups of which 1 is chosen (a group scored by its top 2),
# sigmoid scores with the expert bias, scaling factor 2.5, a shared expert, one MTP depth (its
# layer MoE, exported as layer N), YaRN RoPE (rope_scaling: factor 40, mscale 0.9, mscale_all_dim
# 0.7, so that both YaRN factors differ from 1).
ARCH["deepseek_v3"] = ARCH["mla"] + (
    "--rotary-scaling-factor 40 --mscale 0.9 --mscale-all-dim 0.7 "
    "--num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 32 --moe-layer-freq ([0]+[1]*3) "
    "--moe-router-score-function sigmoid --moe-router-enable-expert-bias "
    "--moe-router-bias-update-rate 1e-2 --moe-router-num-groups 4 --moe-router-group-topk 1 "
    "--moe-router-topk-scaling-factor 2.5 --moe-shared-expert-intermediate-size 32 "
    "--moe-router-load-balancing-type seq_aux_loss --moe-aux-loss-coeff 1e-3 "
    "--mtp-num-layers 1").split()

# What an MoE run logs besides the LM loss: auxiliary losses, the routing checksum and the
# expert biases' checksum.
MOE_KEYS = ("load_balancing_loss", "seq_load_balancing_loss", "z_loss", "moe_routing_hash",
            "moe_expert_bias_hash")


def device_flags(device):
    """mtron train's flags for `device` (None: mtron's default, the CPU)."""
    if device is None:
        return []
    return ["--device", device]
