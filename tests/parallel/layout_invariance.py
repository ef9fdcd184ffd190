#!/usr/bin/python3
"""Layout invariance (design.md's correctness contract), checked end to end with `mtron train`.

  layout_invariance.py baseline MTRON ARCH OUT.jsonl
      trains ARCH for 10 iterations in one process and keeps its metrics
  layout_invariance.py check MTRON ARCH BASELINE.jsonl NP FLAGS...
      trains the same model under `mpirun -np NP` with the layout FLAGS and requires every
      iteration's loss to match the baseline (rel <= 1e-5)

ARCH: gpt2 (LayerNorm, GELU, learned positions, tied embeddings, biases) or llama (RMSNorm,
SwiGLU, RoPE, GQA with 4 query groups for 8 heads, untied, no biases). fp32, same seed and data.
"""
import json
import os
import subprocess
import sys
import tempfile

COMMON = ("--num-layers 4 --hidden-size 64 --seq-length 32 --micro-batch-size 2 "
          "--global-batch-size 16 --train-iters 10 --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine "
          "--lr-warmup-iters 2 --mock-data --vocab-size 500 --seed 1234 --log-interval 1").split()
ARCH = {
    "gpt2": "--num-attention-heads 4".split(),
    "llama": ("--num-attention-heads 8 --group-query-attention --num-query-groups 4 --swiglu "
              "--normalization RMSNorm --position-embedding-type rope "
              "--untie-embeddings-and-output-weights --disable-bias-linear").split(),
}
TOL = 1e-5


def train(mtron, arch, np_, flags, metrics):
    cmd = [mtron, "train"] + COMMON + ARCH[arch] + flags + ["--metrics-file", metrics]
    if np_ > 1:
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
               "-np", str(np_)] + cmd
    env = dict(os.environ, OMPI_MCA_rmaps_base_oversubscribe="1")
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=600)
    if p.returncode != 0:
        print(p.stdout)
        sys.exit("training failed (exit %d): %s" % (p.returncode, " ".join(cmd)))
    with open(metrics) as f:
        return [json.loads(line) for line in f if line.strip()], p.stdout


def main():
    mode, mtron, arch = sys.argv[1], sys.argv[2], sys.argv[3]
    if mode == "baseline":
        rows, _ = train(mtron, arch, 1, [], sys.argv[4])
        print("baseline %s: %s" % (arch, " ".join("%.6f" % r["lm_loss"] for r in rows)))
        return 0
    base = [json.loads(line) for line in open(sys.argv[4]) if line.strip()]
    np_ = int(sys.argv[5])
    flags = sys.argv[6:]
    with tempfile.TemporaryDirectory() as d:
        rows, _ = train(mtron, arch, np_, flags, os.path.join(d, "m.jsonl"))
    assert len(rows) == len(base) == 10, "expected 10 logged iterations"
    worst = 0.0
    for b, r in zip(base, rows):
        rel = abs(r["lm_loss"] - b["lm_loss"]) / abs(b["lm_loss"])
        worst = max(worst, rel)
        print("iteration %2d  1 process %.9f  np %d %.9f  rel %.2e" %
              (r["iteration"], b["lm_loss"], np_, r["lm_loss"], rel))
    print("%s np %d %s: worst rel %.2e (tol %.0e)" % (arch, np_, " ".join(flags), worst, TOL))
    return 0 if worst <= TOL else 1


if __name__ == "__main__":
    sys.exit(main())
