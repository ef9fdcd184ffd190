#!/usr/bin/python3
"""The loss scaler's trajectory against Megatron's DynamicGradScaler, written here from its
semantics (megatron/core/optimizer/grad_scaler.py): the scale is an fp32 number; on found-inf the
growth tracker resets and the hysteresis tracker decrements, and the scale halves (never below
the minimum) whenever the hysteresis tracker is <= 0; a clean step increments the growth tracker,
and after `window` of them in a row the scale doubles and both trackers reset.

  grad_scaler_test.py TRAJECTORY_BINARY

Drives both with the same found-inf sequences (a few hundred steps) and requires equal states
after every step, and that every branch was taken: a found-inf absorbed by hysteresis, a backoff,
a backoff clamped at the minimum, a growth, a found-inf that resets a partial growth count; and a
static scale that never moves.
"""
import random
import subprocess
import sys

import numpy as np


class DynamicGradScaler:
    def __init__(self, initial, minimum, window, hysteresis):
        self.scale = np.float32(initial)
        self.min = np.float32(minimum)
        self.window, self.hysteresis = window, hysteresis
        self.growth, self.hyst = 0, hysteresis
        self.branches = set()

    def update(self, found_inf):
        if found_inf:
            if self.growth > 0:
                self.branches.add("inf resets growth count")
            self.growth = 0
            self.hyst -= 1
            if self.hyst <= 0:
                halved = self.scale * np.float32(0.5)
                self.branches.add("backoff clamped" if halved < self.min else "backoff")
                self.scale = max(halved, self.min)
            else:
                self.branches.add("hysteresis")
        else:
            self.growth += 1
            if self.growth == self.window:
                self.growth = 0
                self.hyst = self.hysteresis
                self.scale = self.scale * np.float32(2.0)
                self.branches.add("growth")


def run(binary, args):
    out = subprocess.run([binary] + args, check=True, stdout=subprocess.PIPE, text=True).stdout
    return [line.split() for line in out.splitlines()]


def main():
    binary = sys.argv[1]
    rng = random.Random(7)
    # overflow bursts (long enough to reach the minimum), clean stretches (growth), sparse noise
    seq = "1" * 14 + "0" * 12 + "1" + "0" * 3 + "1" * 2 + "0" * 9
    for _ in range(30):
        seq += "".join("1" if rng.random() < p else "0" for p in [0.5] * 3 + [0.05] * 9)
    seq += "1" * 25 + "0" * 20
    bad, branches = 0, set()
    for initial, minimum, window, hysteresis in [(1024, 4, 5, 3), (2.0 ** 32, 1, 4, 2),
                                                 (65536, 2, 2, 1), (8, 8, 3, 2)]:
        ref = DynamicGradScaler(initial, minimum, window, hysteresis)
        rows = run(binary, [repr(float(initial)), repr(float(minimum)), str(window),
                            str(hysteresis), seq])
        assert len(rows) == len(seq), (len(rows), len(seq))
        for row, f in zip(rows, seq):
            ref.update(f == "1")
            want = (np.float32(ref.scale), ref.growth, ref.hyst)
            got = (np.float32(float(row[2])), int(row[3]), int(row[4]))
            if got != want:
                bad += 1
                if bad <= 10:
                    print("step %s found_inf %s: mtron %s, Megatron %s" % (row[0], f, got, want))
        branches |= ref.branches
        print("initial %g min %g window %d hysteresis %d: %d steps, final scale %g" %
              (initial, minimum, window, hysteresis, len(seq), ref.scale))
    rows = run(binary, ["static", "1024", seq[:50]])
    static_ok = all(float(r[2]) == 1024.0 for r in rows)
    need = {"hysteresis", "backoff", "backoff clamped", "growth", "inf resets growth count"}
    print("branches taken: %s" % ", ".join(sorted(branches)))
    print("static scale constant: %s" % static_ok)
    print("%d mismatching steps" % bad)
    return 0 if bad == 0 and need <= branches and static_ok else 1


if __name__ == "__main__":
    sys.exit(main())
