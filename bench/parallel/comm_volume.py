#!/usr/bin/python3
"""bench/parallel: bytes each rank sends per training step, measured (Comm::bytes_sent, logged
by `mtron train --profile`) against the analytic volume of the layout, and the pipeline bubble
against (p-1)/(v m).

  comm_volume.py MTRON

Runs a GPT-2-style model (4 layers, hidden 256, seq 128, micro-batch 2, global batch 16, vocab
1000, fp32) under several layouts for 3 iterations (2 profiled) and prints, per layout, the
measured and analytic bytes per rank (the largest relative error over ranks), then a bubble
table for PP 2 at several micro-batch counts. Byte conventions are comm.h's: all-reduce of n
bytes over p ranks 2(p-1)/p n, all-gather / reduce-scatter (p-1)/p of the full vector, send n.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from profile_run import run_profiled  # noqa: E402

L, H, HEADS, S, MBS, GBS, VOCAB = 4, 256, 4, 128, 2, 16, 1000
E = 4  # fp32 bytes
BASE = ("--num-layers %d --hidden-size %d --num-attention-heads %d --seq-length %d "
        "--micro-batch-size %d --global-batch-size %d --train-iters 3 --lr 1e-4 --mock-data "
        "--vocab-size %d --log-interval 100 --metrics-file /dev/null --profile --eval-iters 0"
        % (L, H, HEADS, S, MBS, GBS, VOCAB)).split()


def padded_vocab(t):
    m = 128 * t
    return (VOCAB + m - 1) // m * m


def analytic(t, p, d, v, sp, rank_pp):
    """Bytes one rank of pipeline stage rank_pp sends per step, by group."""
    M = GBS // (MBS * d)
    N = MBS * S
    Vl = padded_vocab(t) // t
    ar = lambda n, g: 2.0 * (g - 1) / g * n * E if g > 1 else 0.0
    ag = lambda n, g: (g - 1.0) / g * n * E if g > 1 else 0.0
    out = {"tp": 0.0, "dp-cp": 0.0, "pp": 0.0, "embedding": 0.0}
    lpc = L // (p * v)
    params = 0.0
    sp_params = 0.0
    for c in range(v):
        vs = c * p + rank_pp
        first, last = vs == 0, vs == p * v - 1
        # TP traffic of one micro-batch through this chunk
        per_layer = 8 * ag(N * H, t) if sp else 4 * ar(N * H, t)
        tp = lpc * per_layer
        if first:
            tp += ar(N * H, t) + (ag(N * H, t) if sp else 0)
        if last:
            tp += 3 * ar(N, t)  # softmax max, sum-exp, target logit
            tp += 2 * ag(N * H, t) if sp else ar(N * H, t)
        out["tp"] += M * tp
        # PP sends: activations forward, gradients backward
        Nl = N // t if sp else N
        out["pp"] += M * ((0 if last else Nl * H * E) + (0 if first else Nl * H * E))
        # parameters of this chunk (local shards)
        layer = (3 * H * H + 3 * H + H * H + 4 * H * H + 4 * H + 4 * H * H) / t + H + H + 4 * H
        params += lpc * layer
        sp_params += lpc * (4 * H + 2 * H)
        if first:
            params += Vl * H + S * H
        if last:
            params += 2 * H
            sp_params += 2 * H
            if not first:
                params += Vl * H  # tied copy
                out["embedding"] += ar(Vl * H, 2)
        if first and not last:
            out["embedding"] += ar(Vl * H, 2)
    out["dp-cp"] = ar(params, d)  # all-reduce = reduce-scatter + all-gather in volume
    if sp:
        out["tp"] += ar(sp_params, t)
    return out


def coords(rank, t, d):
    return rank // (t * d)  # pp rank (order tp-cp-ep-dp-pp)


def main():
    mtron = sys.argv[1]
    layouts = [("TP2", 2, 2, 1, 1, False, []),
               ("TP2+SP", 2, 2, 1, 1, True, ["--sequence-parallel"]),
               ("TP4", 4, 4, 1, 1, False, []),
               ("DP2", 2, 1, 1, 1, False, []),
               ("DP2 dist-opt", 2, 1, 1, 1, False, ["--use-distributed-optimizer"]),
               ("PP2", 2, 1, 2, 1, False, []),
               ("PP2 VPP2", 2, 1, 2, 2, False, ["--num-layers-per-virtual-pipeline-stage", "1"]),
               ("TP2xPP2xDP2", 8, 2, 2, 1, False, [])]
    print("%-14s %5s %14s %14s %8s" % ("layout", "rank", "measured B", "analytic B", "error"))
    worst_all = 0.0
    for name, np_, t, p, v, sp, extra in layouts:
        d = np_ // (t * p)
        flags = ["--tensor-model-parallel-size", str(t), "--pipeline-model-parallel-size", str(p)]
        measured, _, _ = run_profiled(mtron, np_, BASE + flags + extra)
        for r in sorted(measured):
            m = measured[r]
            a = analytic(t, p, d, v, sp, coords(r, t, d))
            total_m = m["tp"] + m["dp-cp"] + m["pp"] + m["embedding"]
            total_a = sum(a.values())
            err = abs(total_m - total_a) / total_a
            worst_all = max(worst_all, err)
            print("%-14s %5d %14d %14d %7.2f%%" % (name, r, total_m, int(total_a), 100 * err))
    print("worst error %.2f%% (target <= 5%%)" % (100 * worst_all))
    print()
    print("pipeline bubble, PP 2 (2 ranks, 1 thread each): measured wait/compute of the first"
          " stage vs (p-1)/(v m)")
    print("%-10s %4s %10s %10s" % ("layout", "m", "measured", "ideal"))
    for v in (1, 2):
        for m in (2, 4, 8):
            flags = ["--pipeline-model-parallel-size", "2", "--global-batch-size", str(m * MBS)]
            if v == 2:
                flags += ["--num-layers-per-virtual-pipeline-stage", "1"]
            _, bubble, _ = run_profiled(mtron, 2, BASE + flags)
            meas, ideal = bubble[0]
            print("%-10s %4d %10.3f %10.3f" % ("PP2 VPP%d" % v, m, meas, ideal))
    return 0 if worst_all <= 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
