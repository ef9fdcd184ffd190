"""The CPU FP8 quantiser (kernels/fp8.h, through fp8_tool) against an independent reference.

Debian's PyTorch (1.13) has no float8 dtypes, so the reference is built from the formats'
definitions: the 256 codes of E4M3 (e4m3fn: bias 7, no infinities, S.1111.111 is NaN, max 448)
and E5M2 (bias 15, IEEE-like, max 57344) are decoded into a table of values, and each input goes
to its nearest table value (float64 distances), a tie to the code with an even mantissa; values
at or beyond +-max saturate to +-max (Transformer Engine's saturating cast), NaN stays NaN.
Inputs: every bf16 bit pattern (as bf16 and as fp32 sources), random fp32 values over the whole
exponent range, and the exact midpoints between neighbouring FP8 values (ties), at scales 1,
2^-5 and 0.3 (not a power of two, so x * scale rounds in fp32 first). Every output must match
bit for bit (NaN for NaN, the sign of zero too), and the amax must be max |x| over the non-NaN
inputs.

Usage: fp8_reference.py [EMULATOR...] FP8_TOOL  (a cross build's emulator first)
"""

import os
import subprocess
import sys
import tempfile

import numpy as np

TOOL = sys.argv[1:]  # the tool's command line: the emulator, if any, then the tool
FORMATS = {"e4m3": (4, 3, 7), "e5m2": (5, 2, 15)}  # exponent bits, mantissa bits, bias


def table(fmt):
    """The finite non-negative values of the format, ascending, and whether each code is even."""
    e_bits, m_bits, bias = FORMATS[fmt]
    vals, even = [], []
    for code in range(1 << (e_bits + m_bits)):
        e, m = code >> m_bits, code & ((1 << m_bits) - 1)
        if fmt == "e4m3" and e == 15 and m == 7:
            continue  # NaN
        if fmt == "e5m2" and e == 31:
            continue  # infinities and NaN
        v = m * 2.0 ** (1 - bias - m_bits) if e == 0 else (1 + m / 2**m_bits) * 2.0 ** (e - bias)
        vals.append(v)
        even.append(m % 2 == 0)
    return np.array(vals), np.array(even)


def reference(x32, scale, fmt):
    vals, even = table(fmt)
    mx = vals[-1]
    with np.errstate(invalid="ignore", over="ignore"):
        y = (x32 * np.float32(scale)).astype(np.float32).astype(np.float64)
    a = np.abs(y)
    with np.errstate(invalid="ignore"):
        hi = np.clip(np.searchsorted(vals, a), 1, len(vals) - 1)
        lo = hi - 1
        dlo, dhi = a - vals[lo], vals[hi] - a
        pick_hi = (dhi < dlo) | ((dhi == dlo) & even[hi])
        q = np.where(pick_hi, vals[hi], vals[lo])
        q = np.where(a >= mx, mx, q)
    q = np.copysign(q, y)
    q[np.isnan(y)] = np.nan
    return q.astype(np.float32)


def run_tool(fmt, scale, src, arr, tmp):
    i, o = os.path.join(tmp, "in"), os.path.join(tmp, "out")
    arr.tofile(i)
    subprocess.run([*TOOL, fmt, repr(scale), src, i, o], check=True)
    raw = np.fromfile(o, dtype=np.uint8)
    bits = raw[:-4].view(np.uint16)
    amax = raw[-4:].view(np.float32)[0]
    return (bits.astype(np.uint32) << 16).view(np.float32), amax


def ties(fmt):
    """Midpoints between neighbouring finite FP8 values, and the values themselves."""
    v, _ = table(fmt)
    mids = ((v[:-1].astype(np.float64) + v[1:]) / 2).astype(np.float32)
    return np.concatenate([v, mids, -mids]).astype(np.float32)


def main():
    rng = np.random.default_rng(7)
    every_bf16 = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    bf16_as_f32 = (every_bf16.astype(np.uint32) << 16).view(np.float32)
    rand = (rng.standard_normal(200000) * np.exp2(rng.uniform(-30, 30, 200000))).astype(np.float32)
    rand[:4] = [np.inf, -np.inf, np.nan, 0.0]
    failures, checked = 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in FORMATS:
            cases = [("bf16 patterns as bf16", "bf16", every_bf16, bf16_as_f32),
                     ("bf16 patterns as fp32", "f32", bf16_as_f32, bf16_as_f32),
                     ("random fp32", "f32", rand, rand),
                     ("ties", "f32", ties(fmt), ties(fmt))]
            for scale in (1.0, 2.0**-5, 0.3):
                for name, src, arr, x32 in cases:
                    got, amax = run_tool(fmt, scale, src, arr, tmp)
                    want = reference(x32, scale, fmt)
                    bad = ~((got == want) | (np.isnan(got) & np.isnan(want)))
                    # the sign of zero as well
                    bad |= (got == 0) & (want == 0) & (np.signbit(got) != np.signbit(want))
                    fin = x32[~np.isnan(x32)]
                    want_amax = np.float32(np.max(np.abs(fin))) if fin.size else np.float32(0)
                    checked += got.size
                    status = "ok"
                    if bad.any() or amax != want_amax:
                        failures += 1
                        k = int(np.argmax(bad)) if bad.any() else -1
                        status = (f"FAIL: {int(bad.sum())} values differ (first: x={x32[k]!r} "
                                  f"got {got[k]!r} want {want[k]!r}); amax {amax} vs {want_amax}")
                    print(f"{fmt} scale {scale:<8g} {name:<24} n={got.size:<7} {status}")
    print(f"{checked} values checked, {failures} failing cases")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
