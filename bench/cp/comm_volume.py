#!/usr/bin/python3
"""bench/cp: bytes each rank sends per training step over the context-parallel groups (attention's
K/V blocks, gathers or head all-to-alls, by --cp-comm-type), measured (Comm::bytes_sent, logged by
`mtron train --profile`) against the analytic volume, with the step time beside it.

  comm_volume.py MTRON

Per attention call and rank, with KV = 2 * (S/CP) * B * (G/TP) * D * 4 bytes (the rank's K and V,
fp32), Q = O = (S/CP) * B * (H/TP) * D * 4 (its q and its output) and X = Q + K + V + O:
  p2p, all_gather  (CP-1) KV forward, 2 (CP-1) KV backward (over `cp`)
  a2a              (a-1)/a X forward, 2 (a-1)/a X backward (a = CP, over `cp`)
  a2a+p2p          a2a's over the first level (`cp-a2a`, a ranks), p2p's over the second
                   (`cp-ring`, CP/a ranks) with the same KV
With --bf16 (and no attention dropout) q, k, v, the output and its gradient hold bf16 values and
travel as bf16; gradients and partial sums stay fp32:
  p2p, all_gather  (CP-1) KV / 2 forward, 3/2 (CP-1) KV backward
  a2a, a2a+p2p's   (a-1)/a (Q+K+V+O) / 2 forward and backward (QKV's fused layout; the
  all-to-all       head-sharded q, k, v and output kept for the backward)
Per step: x layers x micro-batches (x 2 for the forward with --recompute-granularity full).
"""
import os
import sys
from fractions import Fraction

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from profile_run import run_profiled  # noqa: E402

L, H, HEADS, GROUPS, S, MBS, GBS, VOCAB = 4, 256, 8, 4, 512, 1, 4, 1000
BASE = ("--num-layers %d --hidden-size %d --num-attention-heads %d --group-query-attention "
        "--num-query-groups %d --swiglu --normalization RMSNorm --position-embedding-type rope "
        "--disable-bias-linear --seq-length %d --micro-batch-size %d --global-batch-size %d "
        "--train-iters 3 --lr 1e-4 --mock-data --vocab-size %d --log-interval 1 "
        "--metrics-file /dev/null --profile --eval-iters 0" % (L, H, HEADS, GROUPS, S, MBS, GBS, VOCAB)).split()


def analytic(cp, tp, pp, dp, recompute, comm, a, bf16):
    """Bytes per step and rank by group."""
    if cp == 1:
        return {"cp": 0}
    M = GBS // (MBS * dp)
    calls = (L // pp) * M
    forwards = 2 if recompute else 1
    D, rows = H // HEADS, (S // cp) * MBS
    kv = 2 * rows * (GROUPS // tp) * D * 4
    qo = rows * (HEADS // tp) * D * 4
    w = Fraction(1, 2) if bf16 else 1  # the wire's share of fp32 bytes
    # forward: K/V blocks; backward: K/V blocks again and the dK/dV partials (fp32)
    ring = lambda n: int(calls * (n - 1) * kv * (forwards * w + w + 1))
    # forward: q, k, v there and the output back; backward: q, k, v, out, dout there and dq, dk,
    # dv (fp32) back
    heads = lambda n: int(calls * Fraction(n - 1, n) * (
        forwards * w * (2 * qo + kv) + w * (3 * qo + kv) + qo + kv))
    if comm in ("p2p", "all_gather"):
        return {"cp": ring(cp)}
    # bf16: the fused layout's all-to-all, q, k, v and out there, out and dq, dk, dv back
    fused = lambda n: int(calls * Fraction(n - 1, n) * (forwards + 1) * w * (2 * qo + kv))
    if comm == "a2a":
        return {"cp": fused(cp) if bf16 else heads(cp)}
    return {"cp": 0, "cp-a2a": fused(a) if bf16 else heads(a), "cp-ring": ring(cp // a)}


def main():
    mtron = sys.argv[1]
    BF16 = ["--bf16", "--attention-dropout", "0", "--hidden-dropout", "0"]
    a2a_p2p = ["--cp-comm-type", "a2a+p2p", "--hierarchical-context-parallel-sizes", "2", "2"]
    layouts = [("CP1", 1, 1, 1, 1, []),
               ("CP2", 2, 2, 1, 1, []),
               ("CP4", 4, 4, 1, 1, []),
               ("TP2xCP2+SP", 4, 2, 2, 1, ["--sequence-parallel"]),
               ("CP2xPP2", 4, 2, 1, 2, []),
               ("CP2 recompute", 2, 2, 1, 1, ["--recompute-granularity", "full"]),
               ("CP4 all_gather", 4, 4, 1, 1, ["--cp-comm-type", "all_gather"]),
               ("CP2 a2a", 2, 2, 1, 1, ["--cp-comm-type", "a2a"]),
               ("CP4 a2a", 4, 4, 1, 1, ["--cp-comm-type", "a2a"]),
               ("TP2xCP2+SP a2a", 4, 2, 2, 1, ["--sequence-parallel", "--cp-comm-type", "a2a"]),
               ("CP4 a2a+p2p 2x2", 4, 4, 1, 1, a2a_p2p),
               ("CP2 bf16", 2, 2, 1, 1, BF16),
               ("CP4 bf16", 4, 4, 1, 1, BF16),
               ("CP2 recompute bf16", 2, 2, 1, 1, ["--recompute-granularity", "full"] + BF16),
               ("CP4 all_gather bf16", 4, 4, 1, 1, ["--cp-comm-type", "all_gather"] + BF16),
               ("CP4 a2a bf16", 4, 4, 1, 1, ["--cp-comm-type", "a2a"] + BF16),
               ("CP4 a2a+p2p bf16", 4, 4, 1, 1, a2a_p2p + BF16)]
    print("model: %d layers, hidden %d, %d heads / %d query groups, seq %d, micro-batch %d, "
          "global batch %d, fp32 unless named bf16" % (L, H, HEADS, GROUPS, S, MBS, GBS))
    print("%-20s %4s %-8s %14s %14s %8s %10s" % ("layout", "rank", "group", "measured B",
                                                 "analytic B", "error", "ms/step"))
    worst = 0.0
    for name, np_, cp, tp, pp, extra in layouts:
        flags = ["--context-parallel-size", str(cp), "--tensor-model-parallel-size", str(tp),
                 "--pipeline-model-parallel-size", str(pp)] + extra
        sent, _, ms = run_profiled(mtron, np_, BASE + flags)
        dp = np_ // (cp * tp * pp)
        comm = extra[extra.index("--cp-comm-type") + 1] if "--cp-comm-type" in extra else "p2p"
        wants = analytic(cp, tp, pp, dp, "--recompute-granularity" in extra, comm, 2,
                         "--bf16" in extra)
        for r in sorted(sent):
            for group, want in wants.items():
                got = sent[r][group]
                err = abs(got - want) / want if want else float(got != 0)
                worst = max(worst, err)
                print("%-20s %4d %-8s %14d %14d %7.2f%% %10.1f" % (name, r, group, got, want,
                                                                   100 * err, ms))
    print("worst error %.2f%%" % (100 * worst))
    return 0 if worst == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
