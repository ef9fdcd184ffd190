"""Delayed scaling (model/fp8.h, through fp8_scaling_tool) against a Python re-implementation of
Transformer Engine's amax-history update, step by step over 50 synthetic amaxes.

The recipe as re-implemented here (TE's delayed_scaling.cu, bulk form): an iteration whose amax
is 0 changes nothing; otherwise the amax used is this iteration's (most_recent) or the maximum
of the window of the last LEN amaxes, this one included (max; NaN ignored as fmaxf does), the
history becomes [0, older entries shifted by one, this amax], and the scale is
fp8_max * 2^-margin / amax in fp32 when that amax is finite and positive, else the old scale;
an infinite quotient becomes FLT_MAX. The amaxes include zeros, a NaN, an infinity, a tiny
subnormal (scale overflows to FLT_MAX) and spikes. Cases: both algorithms, history lengths 1
and 16, margins 0 and 1, the E4M3 and E5M2 maxima. Every scale and history entry must match
bit for bit.

Usage: fp8_scaling_reference.py [EMULATOR...] FP8_SCALING_TOOL  (a cross build's emulator first)
"""

import subprocess
import sys

import numpy as np

TOOL = sys.argv[1:]  # the tool's command line: the emulator, if any, then the tool
F32 = np.float32


def amaxes():
    rng = np.random.default_rng(3)
    a = (np.exp(rng.normal(0, 2, 50)) * rng.uniform(0.5, 2, 50)).astype(F32)
    a[5] = 0
    a[6] = 0
    a[11] = np.nan
    a[17] = np.inf
    a[23] = F32(1e-45)  # subnormal: 448 / amax overflows
    a[30] = F32(3e4)    # a spike the max window remembers
    a[31] = 0
    return a


def fmax(a, b):
    if np.isnan(a):
        return b
    if np.isnan(b):
        return a
    return max(a, b)


def reference(seq, length, algo, margin, fp8_max):
    hist, scale, out = [F32(0)] * length, F32(1), []
    scaled_max = F32(F32(fp8_max) * F32(2.0) ** F32(-margin))
    for amax in seq:
        if amax != 0:
            window = F32(0)
            for v in hist[1:] + [amax]:
                window = fmax(window, v)
            hist = [F32(0)] + hist[2:] + [amax] if length > 1 else [F32(0)]
            used = amax if algo == "most_recent" else window
            if np.isfinite(used) and used > 0:
                with np.errstate(over="ignore"):
                    scale = F32(scaled_max / F32(used))
            if np.isinf(scale):
                scale = F32(np.finfo(F32).max)
        out.append([scale] + hist)
    return out


def hexes(row):
    return " ".join("%08x" % np.array(v, dtype=F32).view(np.uint32) for v in row)


def main():
    seq = amaxes()
    stdin = "\n".join("%08x" % v for v in seq.view(np.uint32)) + "\n"
    failures = 0
    for fp8_max in (448.0, 57344.0):
        for algo in ("most_recent", "max"):
            for length in (1, 16):
                for margin in (0, 1):
                    got = subprocess.run(
                        [*TOOL, str(length), algo, str(margin), repr(fp8_max)], input=stdin,
                        capture_output=True, text=True, check=True).stdout.split("\n")[:-1]
                    want = [hexes(r) for r in reference(seq, length, algo, margin, fp8_max)]
                    bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
                    ok = len(got) == len(seq) and not bad
                    failures += not ok
                    last = np.array(int(want[-1].split()[0], 16), dtype=np.uint32).view(F32)
                    print(f"fp8_max {fp8_max:<7g} {algo:<11} len {length:<2} margin {margin}: "
                          f"{'ok' if ok else 'FAIL at step %s' % (bad[:1] or ['count'])[0]} "
                          f"(final scale {last:.6g})")
    print(f"{failures} failing cases")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
