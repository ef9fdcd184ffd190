#!/usr/bin/python3
"""bench/moe: bytes each rank sends per training step over the expert-parallel groups (the token
all-to-all over EP; the all-gather / reduce-scatter over expert TP), measured
(Comm::bytes_sent, logged by `mtron train --profile`) against the analytic volume of balanced
routing, with the step time beside it.

  comm_volume.py MTRON

Per MoE layer and micro-batch a rank with T tokens (after SP / CP splitting) routes T k
(token, expert) pairs; four all-to-alls move them (dispatch and combine, forward and backward),
each sending the pairs bound for other EP ranks: with balanced routing T k (EP-1)/EP rows of h
floats. The dispatch plan first exchanges per-expert counts ((EP-1) E/EP int64). With expert TP
the EP-received rows (T k on average) are all-gathered over ETP (forward dispatch, backward
combine) and reduce-scattered (forward combine, backward dispatch): 4 (ETP-1) T k h floats,
plus the counts' all-gather. Real routing is not balanced: the measured bytes differ from the
balanced volume by the routing's imbalance (printed as measured / analytic); the sum over the EP
ranks differs only by the pairs that stay on their own rank.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from profile_run import run_profiled  # noqa: E402

L, H, HEADS, S, MBS, GBS, VOCAB, E, K, FE = 4, 256, 8, 256, 2, 8, 1000, 8, 2, 256
BASE = ("--num-layers %d --hidden-size %d --num-attention-heads %d --swiglu --normalization "
        "RMSNorm --position-embedding-type rope --disable-bias-linear --seq-length %d "
        "--micro-batch-size %d --global-batch-size %d --train-iters 3 --lr 1e-4 --mock-data "
        "--vocab-size %d --log-interval 1 --metrics-file /dev/null --profile --eval-iters 0 --num-experts %d "
        "--moe-router-topk %d --moe-ffn-hidden-size %d --moe-aux-loss-coeff 1e-2"
        % (L, H, HEADS, S, MBS, GBS, VOCAB, E, K, FE)).split()


def analytic(ep, etp, tp, cp, pp, dp):
    """Balanced-routing bytes per step of one rank: (ep group, etp group)."""
    T = MBS * S // (cp * tp)  # tokens per rank in an MoE layer (SP splits over TP)
    M = GBS // (MBS * dp)
    per = (L // pp) * M
    ep_b = 4 * T * K * (ep - 1) / ep * H * 4 + (ep - 1) * (E // ep) * 8 if ep > 1 else 0
    etp_b = 4 * (etp - 1) * T * K * H * 4 + (etp - 1) * ep * (E // ep) * 8 if etp > 1 else 0
    return per * ep_b, per * etp_b


def main():
    mtron = sys.argv[1]
    # name, np, EP, ETP, TP, CP, PP, extra flags
    layouts = [("EP1", 1, 1, 1, 1, 1, 1, []),
               ("EP2", 2, 2, 1, 1, 1, 1, []),
               ("EP4", 4, 4, 1, 1, 1, 1, []),
               ("EP2xETP2 (TP2+SP)", 4, 2, 2, 2, 1, 1, ["--sequence-parallel"]),
               ("EP2 (TP2+SP) ETP1", 2, 2, 1, 2, 1, 1, ["--sequence-parallel"]),
               ("EP2xCP2", 4, 2, 1, 1, 2, 1, []),
               ("EP2xPP2", 4, 2, 1, 1, 1, 2, [])]
    print("model: %d layers, hidden %d, %d experts top-%d (expert ffn %d, SwiGLU), seq %d, "
          "micro-batch %d, global batch %d, fp32" % (L, H, E, K, FE, S, MBS, GBS))
    print("%-18s %4s %13s %13s %7s %13s %13s %7s %9s" %
          ("layout", "rank", "ep measured", "ep balanced", "ratio", "etp measured",
           "etp balanced", "ratio", "ms/step"))
    for name, np_, ep, etp, tp, cp, pp, extra in layouts:
        flags = ["--expert-model-parallel-size", str(ep), "--expert-tensor-parallel-size",
                 str(etp), "--tensor-model-parallel-size", str(tp), "--context-parallel-size",
                 str(cp), "--pipeline-model-parallel-size", str(pp)] + extra
        sent, _, ms = run_profiled(mtron, np_, BASE + flags)
        dp = np_ // (tp * cp * pp)
        want_ep, want_etp = analytic(ep, etp, tp, cp, pp, dp)
        total_ep = 0
        for r in sorted(sent):
            got_ep, got_etp = sent[r]["ep"], sent[r]["etp"]
            total_ep += got_ep
            ratio = lambda g, w: ("%7.3f" % (g / w)) if w else ("%7s" % ("-" if g == 0 else "!"))
            print("%-18s %4d %13d %13d %s %13d %13d %s %9.1f" %
                  (name, r, got_ep, int(want_ep), ratio(got_ep, want_ep), got_etp,
                   int(want_etp), ratio(got_etp, want_etp), ms))
        if want_ep:
            print("%-18s  sum %13d %13d %7.3f" % ("", total_ep, int(want_ep * len(sent)),
                                                 total_ep / (want_ep * len(sent))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
