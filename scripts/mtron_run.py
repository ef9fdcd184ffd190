"""Running `mtron train` from the Python test drivers and benchmarks: the mpirun prefix (one
process without it), the environment, the metrics JSONL it writes, and the tiny models the
layout-invariance and checkpoint tests train. Import it with

    sys.path.insert(0, os.path.join(<path to the repository>, "scripts"))
    import mtron_run
"""
import json
import os
import shlex
import subprocess
import sys

# The tiny models of the test drivers (tests/parallel/layout_invariance.py, tests/checkpoint):
# TINY the shared shape, data and schedule (no iteration count), TINY_ARCH[arch] the rest.
# gpt2: LayerNorm, GELU, learned positions, tied embeddings, biases; llama: RMSNorm, SwiGLU, RoPE,
# GQA with 4 query groups for 8 heads, untied, no biases; moe: llama with 8 experts per layer,
# top-2 softmax routing, dropless, aux loss and z-loss (Mixtral-like).
TINY = ("--num-layers 4 --hidden-size 64 --seq-length 32 --micro-batch-size 2 "
        "--global-batch-size 16 --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine "
        "--lr-warmup-iters 2 --mock-data --vocab-size 500 --seed 1234 --log-interval 1 "
        "--eval-iters 0").split()
TINY_ARCH = {
    "gpt2": "--num-attention-heads 4".split(),
    "llama": ("--num-attention-heads 8 --group-query-attention --num-query-groups 4 --swiglu "
              "--normalization RMSNorm --position-embedding-type rope "
              "--untie-embeddings-and-output-weights --disable-bias-linear").split(),
}
# mla: llama's norms, MLP and embeddings with multi-latent attention (DeepSeek's MLA): 4 heads,
# q through a rank-24 latent, keys and values from a rank-16 latent plus a shared RoPE key,
# value head dim 10 != query/key head dim 12 + 8.
TINY_ARCH["mla"] = ("--num-attention-heads 4 --multi-latent-attention --q-lora-rank 24 "
                    "--kv-lora-rank 16 --qk-head-dim 12 --qk-pos-emb-head-dim 8 --v-head-dim 10 --qk-layernorm "
                    "--swiglu --normalization RMSNorm --position-embedding-type rope "
                    "--untie-embeddings-and-output-weights --disable-bias-linear").split()
TINY_ARCH["moe"] = TINY_ARCH["llama"] + (
    "--num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 96 --moe-aux-loss-coeff 1e-2 "
    "--moe-z-loss-coeff 1e-3").split()
# qwen3moe: llama with --qk-layernorm, head dim 16, 8 experts top-2 in every layer, no shared
# expert, aux loss (Qwen3-MoE-like); dsmoe: a dense first layer (--moe-layer-freq list), 16
# experts top-4 in 4 groups of which 2 are chosen, sigmoid scores with the aux-loss-free expert
# bias, top-k scaling factor 2.5, a shared expert, seq_aux_loss (DeepSeek-V3-like). mtp: llama
# with two multi-token prediction depths; mtp_tied: the same with tied embeddings.
TINY_ARCH["qwen3moe"] = TINY_ARCH["llama"] + (
    "--qk-layernorm --kv-channels 16 --norm-epsilon 1e-6 --num-experts 8 --moe-router-topk 2 "
    "--moe-ffn-hidden-size 96 --moe-layer-freq ([1]*4) --moe-aux-loss-coeff 1e-2").split()
TINY_ARCH["dsmoe"] = TINY_ARCH["llama"] + (
    "--num-experts 16 --moe-router-topk 4 --moe-ffn-hidden-size 48 --moe-layer-freq [0,1,1,1] "
    "--moe-router-score-function sigmoid --moe-router-enable-expert-bias "
    "--moe-router-bias-update-rate 1e-2 --moe-router-num-groups 4 --moe-router-group-topk 2 "
    "--moe-router-topk-scaling-factor 2.5 --moe-shared-expert-intermediate-size 64 "
    "--moe-router-load-balancing-type seq_aux_loss --moe-aux-loss-coeff 1e-3").split()
# dsv3: DeepSeek-V3-shaped: mla's attention, a dense first layer, 8 experts top-2 in 4 groups of
# which 2 are chosen, sigmoid scores with the expert bias, a shared expert, seq_aux_loss, one
# multi-token prediction depth (an MoE layer: the last layer's kind) and DeepSeek-V3's YaRN RoPE
# (factor 40, mscale and mscale_all_dim 1).
TINY_ARCH["dsv3"] = TINY_ARCH["mla"] + (
    "--rotary-scaling-factor 40 --mscale 1.0 --mscale-all-dim 1.0 "
    "--num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 48 --moe-layer-freq [0,1,1,1] "
    "--moe-router-score-function sigmoid --moe-router-enable-expert-bias "
    "--moe-router-bias-update-rate 1e-2 --moe-router-num-groups 4 --moe-router-group-topk 2 "
    "--moe-router-topk-scaling-factor 2.5 --moe-shared-expert-intermediate-size 64 "
    "--moe-router-load-balancing-type seq_aux_loss --moe-aux-loss-coeff 1e-3 "
    "--mtp-num-layers 1").split()
TINY_ARCH["mtp"] = TINY_ARCH["llama"] + "--mtp-num-layers 2".split()
TINY_ARCH["mtp_tied"] = [f for f in TINY_ARCH["mtp"] if f != "--untie-embeddings-and-output-weights"]


def mpi_prefix(np_):
    """`mpirun ... -np NP` for np > 1 (unbound, oversubscribed: tests share a few cores)."""
    if np_ <= 1:
        return []
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np",
            str(np_)]


def env(omp_threads="1"):
    """The environment of a run: Open MPI may oversubscribe; one OpenMP thread per process by
    default (runs side by side on few cores, where spinning OpenMP teams of several processes
    slow each other down by orders of magnitude); omp_threads=None keeps OpenMP's default."""
    e = dict(os.environ, OMPI_MCA_rmaps_base_oversubscribe="1")
    if omp_threads is not None:
        e["OMP_NUM_THREADS"] = omp_threads
    return e


def emulator():
    """The command line put in front of mtron to run it: MTRON_EMULATOR from the environment (a
    cross build's tests set it, e.g. qemu-aarch64 and its options), else nothing."""
    return shlex.split(os.environ.get("MTRON_EMULATOR", ""))


def run(mtron, np_, args, expect_rc=0, timeout=300, omp_threads="1", cwd=None):
    """Runs `mtron ARGS` (under mpirun for np > 1, behind emulator(), in folder cwd when given);
    returns its combined output. Exits the script, printing the output, when the exit status is
    not expect_rc (None: any status)."""
    cmd = mpi_prefix(np_) + emulator() + [mtron] + args
    p = subprocess.run(cmd, env=env(omp_threads), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=timeout, cwd=cwd)
    if expect_rc is not None and p.returncode != expect_rc:
        print(p.stdout)
        sys.exit("exit %d (expected %d): %s" % (p.returncode, expect_rc, " ".join(cmd)))
    return p.stdout


def read_metrics(path):
    """The rows of a metrics JSONL file ([] when there is none)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def train(mtron, np_, args, metrics, expect_rc=0, timeout=300):
    """Runs `mtron train ARGS --metrics-file METRICS`; returns (metrics rows, combined output)."""
    out = run(mtron, np_, ["train"] + args + ["--metrics-file", metrics], expect_rc, timeout)
    return read_metrics(metrics), out
