#!/usr/bin/python3
"""fp16 mixed precision end to end: a tiny GPT trains with --fp16 and Megatron's dynamic loss
scaling from its default initial scale 2^32.

  fp16_test.py MTRON

The scaled loss gradient overflows fp16 at first, so the first iterations are skipped while the
scale backs off (the first found-inf only spends the hysteresis of 2, then the scale halves at
each further one); the learning-rate schedule does not advance on a skipped iteration. Then the
steps are taken and the loss falls (with the odd overflow later, as gradients grow). Checks, per iteration of the metrics and of the log lines:
the skipped count, the loss scale Megatron's rule gives for that found-inf sequence, the
"loss scale: X" and "number of skipped iterations: N" fields, no "grad norm" on a skipped
iteration (as Megatron; null in the JSONL), and that the loss falls.
"""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import mtron_run  # noqa: E402

ARGS = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
        "--micro-batch-size 2 --global-batch-size 8 --train-iters 40 --lr 2e-3 "
        "--lr-warmup-iters 4 --lr-decay-style constant --mock-data --vocab-size 500 --seed 1234 "
        "--log-interval 1 --eval-iters 0 --fp16").split()
LINE = re.compile(r"iteration +(\d+)/ +\d+ .*learning rate: (\S+) .*lm loss: (\S+) \| "
                  r"loss scale: (\S+) \| .*number of skipped iterations: +(\d+) \|")


def main():
    with tempfile.TemporaryDirectory() as d:
        rows, out = mtron_run.train(sys.argv[1], 1, ARGS, os.path.join(d, "m.jsonl"))
    lines = {int(m.group(1)): m for m in map(LINE.search, out.splitlines()) if m}
    assert len(rows) == 40 and len(lines) == 40, out
    scale, hyst, bad = 2.0 ** 32, 2, 0
    skipped = [r["skipped_iterations"] == 1 for r in rows]
    for r, s in zip(rows, skipped):
        if s:  # Megatron's update on found-inf (no growth within 40 steps: window 1000)
            hyst -= 1
            if hyst <= 0:
                scale = max(scale / 2, 1.0)
        m = lines[r["iteration"]]
        ok = (r["loss_scale"] == scale and float(m.group(4)) == scale and
              int(m.group(5)) == int(s) and (r["grad_norm"] is None) == s and
              ("grad norm:" in m.string) != s)
        bad += not ok
        print("iteration %2d  %s  loss scale %-12g lm loss %.6f  lr %s%s" % (
            r["iteration"], "skipped" if s else "stepped", r["loss_scale"], r["lm_loss"],
            m.group(2), "" if ok else "  WRONG"))
    first = skipped.index(False)
    assert first >= 3, "expected a run of overflows at the start: %s" % skipped
    # the schedule stands still while skipping: the first step taken has the warmup's first rate
    assert rows[first - 1]["learning_rate"] == rows[0]["learning_rate"], rows[:first]
    taken = [r["lm_loss"] for r, s in zip(rows[first:], skipped[first:]) if not s]
    start, end = sum(taken[:3]) / 3, sum(taken[-5:]) / 5
    print("%d iterations skipped at the start, %d later; lm loss %.4f -> %.4f; %d rows wrong" %
          (first, sum(skipped[first:]), start, end, bad))
    return 0 if bad == 0 and end < start - 0.3 else 1


if __name__ == "__main__":
    sys.exit(main())
