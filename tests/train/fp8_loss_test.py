#!/usr/bin/python3
"""FP8 training converges like bf16: a tiny Llama (4 layers, hidden 64, GQA, SwiGLU, RoPE) on
mock data, 40 iterations of 8 micro-batches, in bf16 and with FP8 GEMMs (--fp8-format hybrid,
delayed scaling with Megatron's defaults; tensorwise; with --all also history 16 / max and e4m3,
for the record), and in fp32 without and with FP8 GEMMs (hybrid, delayed). Each hybrid delayed
run's final loss must be within 2% of its precision's run without FP8, and differ from it (the
FP8 GEMMs ran).
Prints every run's loss curve (docs/precision.md records them).

Usage: fp8_loss_test.py MTRON [--all]
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import mtron_run  # noqa: E402

LLAMA = ("--num-layers 4 --hidden-size 64 --num-attention-heads 8 --group-query-attention "
         "--num-query-groups 4 --swiglu --normalization RMSNorm --position-embedding-type rope "
         "--untie-embeddings-and-output-weights --disable-bias-linear --seq-length 32 "
         "--micro-batch-size 2 --global-batch-size 16 --train-iters 40 --lr 3e-3 --min-lr 3e-4 "
         "--lr-decay-style cosine --lr-warmup-iters 4 --mock-data --vocab-size 500 --seed 1234 "
         "--log-interval 1 --eval-iters 0 --hidden-dropout 0 --attention-dropout 0").split()
RUNS = [
    ("bf16", ["--bf16"]),
    ("fp8 hybrid delayed", "--bf16 --fp8-format hybrid".split()),
    ("fp8 hybrid tensorwise", "--bf16 --fp8-format hybrid --fp8-recipe tensorwise".split()),
    # Without --bf16: FP8 GEMMs quantised from fp32, the rest fp32.
    ("fp32", []),
    ("fp32 fp8 hybrid delayed", "--fp8-format hybrid".split()),
]
# --all: also these (docs/precision.md's table)
MORE = [
    ("fp8 hybrid delayed h16 max",
     "--bf16 --fp8-format hybrid --fp8-amax-history-len 16 --fp8-amax-compute-algo max".split()),
    ("fp8 e4m3 delayed", "--bf16 --fp8-format e4m3".split()),
]


def main():
    mtron = sys.argv[1]
    curves = {}
    with tempfile.TemporaryDirectory() as d:
        for name, flags in RUNS + (MORE if "--all" in sys.argv else []):
            rows, _ = mtron_run.train(mtron, 1, LLAMA + flags, os.path.join(d, "m.jsonl"))
            curves[name] = [r["lm_loss"] for r in rows]
    for name, c in curves.items():
        print("%-28s %s" % (name, " ".join("%.4f" % v for v in c)))
    base, fp8 = curves["bf16"][-1], curves["fp8 hybrid delayed"][-1]
    rel = abs(fp8 - base) / base
    print("final loss: bf16 %.6f, fp8 hybrid %.6f, rel %.2e (tol 2e-2)" % (base, fp8, rel))
    for name, c in curves.items():
        print("final %-28s %.6f (rel to bf16 %+.2e)" % (name, c[-1], (c[-1] - base) / base))
    differs = curves["bf16"] != curves["fp8 hybrid delayed"]
    base32, fp8_32 = curves["fp32"][-1], curves["fp32 fp8 hybrid delayed"][-1]
    rel32 = abs(fp8_32 - base32) / base32
    print("final loss: fp32 %.6f, fp32 fp8 hybrid %.6f, rel %.2e (tol 2e-2)" % (base32, fp8_32, rel32))
    differs32 = curves["fp32"] != curves["fp32 fp8 hybrid delayed"]
    ok = (len(curves["bf16"]) == 40 and rel <= 2e-2 and differs and len(curves["fp32"]) == 40 and
          rel32 <= 2e-2 and differs32)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
