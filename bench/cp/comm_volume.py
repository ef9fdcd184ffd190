#!/usr/bin/python3
"""bench/cp: bytes each rank sends per training step over the context-parallel group (the ring
attention's K/V blocks and dK/dV partials), measured (Comm::bytes_sent, logged by
`mtron train --profile`) against the analytic volume, with the step time beside it.

  comm_volume.py MTRON

Ring attention sends, per attention call and rank, (CP-1) K/V blocks forward and 2 (CP-1)
blocks backward (K/V, then the dK/dV partials), a block being the rank's K and V:
KV = 2 * (S/CP) * B * (G/TP) * D * 4 bytes (fp32). Per step: x layers x micro-batches (x 2 for
the forward with --recompute-granularity full, which runs the forward ring twice).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from profile_run import run_profiled  # noqa: E402

L, H, HEADS, GROUPS, S, MBS, GBS, VOCAB = 4, 256, 8, 4, 512, 1, 4, 1000
BASE = ("--num-layers %d --hidden-size %d --num-attention-heads %d --group-query-attention "
        "--num-query-groups %d --swiglu --normalization RMSNorm --position-embedding-type rope "
        "--disable-bias-linear --seq-length %d --micro-batch-size %d --global-batch-size %d "
        "--train-iters 3 --lr 1e-4 --mock-data --vocab-size %d --log-interval 1 "
        "--metrics-file /dev/null --profile --eval-iters 0" % (L, H, HEADS, GROUPS, S, MBS, GBS, VOCAB)).split()


def analytic(cp, tp, pp, dp, recompute):
    if cp == 1:
        return 0
    kv = 2 * (S // cp) * MBS * (GROUPS // tp) * (H // HEADS) * 4
    M = GBS // (MBS * dp)
    forwards = 2 if recompute else 1
    return (L // pp) * M * (forwards + 2) * (cp - 1) * kv


def main():
    mtron = sys.argv[1]
    layouts = [("CP1", 1, 1, 1, 1, []),
               ("CP2", 2, 2, 1, 1, []),
               ("CP4", 4, 4, 1, 1, []),
               ("TP2xCP2+SP", 4, 2, 2, 1, ["--sequence-parallel"]),
               ("CP2xPP2", 4, 2, 1, 2, []),
               ("CP2 recompute", 2, 2, 1, 1, ["--recompute-granularity", "full"])]
    print("model: %d layers, hidden %d, %d heads / %d query groups, seq %d, micro-batch %d, "
          "global batch %d, fp32" % (L, H, HEADS, GROUPS, S, MBS, GBS))
    print("%-15s %4s %14s %14s %8s %10s" % ("layout", "rank", "cp measured B", "analytic B",
                                            "error", "ms/step"))
    worst = 0.0
    for name, np_, cp, tp, pp, extra in layouts:
        flags = ["--context-parallel-size", str(cp), "--tensor-model-parallel-size", str(tp),
                 "--pipeline-model-parallel-size", str(pp)] + extra
        sent, _, ms = run_profiled(mtron, np_, BASE + flags)
        dp = np_ // (cp * tp * pp)
        want = analytic(cp, tp, pp, dp, "--recompute-granularity" in extra)
        for r in sorted(sent):
            got = sent[r]["cp"]
            err = abs(got - want) / want if want else float(got != 0)
            worst = max(worst, err)
            print("%-15s %4d %14d %14d %7.2f%% %10.1f" % (name, r, got, want, 100 * err, ms))
    print("worst error %.2f%%" % (100 * worst))
    return 0 if worst == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
