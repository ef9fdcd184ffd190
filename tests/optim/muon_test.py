#!/usr/bin/python3
"""Muon (optim/muon.h) against Megatron's Muon written here in PyTorch from its semantics
(megatron/core/optimizer/emerging_optimizers.py's TensorParallelMuon over the emerging_optimizers
package's OrthogonalizedOptimizer and newton_schulz): decoupled weight decay, the momentum
lerp_(g, 1 - mu), Nesterov's g.lerp(M, mu), the fused QKV weight split per query group into its
q, k and v rows, X = U / max(|U|_F, 1e-15) on the side with fewer rows, each step's
(a, b, c): A = X X^T, B = addmm(A, A, A, beta=b, alpha=c), X = addmm(X, B, X, beta=a) (with c = 0:
X = addmm(X, A, X, beta=a, alpha=b)), in bf16 under fp32_matmul_prec medium, the update scaled by
the scale mode's factor and the extra factor.

  muon_test.py MUON_STEPS_BINARY

Three steps per fp32 case on random matrices: the weight's change must match within 1e-5 of its
largest magnitude, the momentum within 1e-6. The bf16 cases (one step) check the conversions
only, within 1e-1 of the change in Frobenius norm (a missing or misplaced one is O(1) off): bf16
Newton-Schulz is as exact as the GEMMs' rounding. X = a X + B X cancels most of its terms, so one
element of B rounded to the other bf16 neighbour (a 1e-7 difference in the fp32 sum before
rounding) moves the result by up to 5e-2: measured 1e-7 to 6e-7 where mtron's bf16 GEMMs are
oneDNN's AVX512_BF16 ones, as PyTorch's here, and 1.7e-3 to 5e-2 on some shapes with
MTRON_CPU_ISA=avx2 (bf16 widened to fp32), about what bf16 against fp32 Newton-Schulz differs
(4e-3 to 8e-3).
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

COEFFS = {
    "simple": ([(3.4445, -4.7750, 2.0315)], False),
    "quintic": ([(4.0848, -6.8946, 2.9270), (3.9505, -6.3029, 2.6377), (3.7418, -5.5913, 2.3037),
                 (2.8769, -3.1427, 1.2046), (2.8366, -3.0525, 1.2012)], False),
    "polar_express": ([(8.2051, -22.9019, 16.4607), (4.0664, -2.8612, 0.5184),
                       (3.9096, -2.8234, 0.5250), (3.2856, -2.4153, 0.4853),
                       (2.2779, -1.6198, 0.3985), (1.8726, -1.2307, 0.3585),
                       (1.8564, -1.2132, 0.3568), (1.8750, -1.2500, 0.3750)], True),
    "cubic5": ([(3.3656576, -3.3420992, 0.0), (2.5744352, -1.4957376, 0.0),
                (2.5368962, -1.4312570, 0.0), (2.4418906, -1.2764040, 0.0),
                (2.2230472, -0.9630650, 0.0)], False),
}


def coefficients(name, steps):
    sets, repeat_last = COEFFS[name]
    return [sets[min(i, len(sets) - 1)] if repeat_last else sets[i % len(sets)]
            for i in range(steps)]


def newton_schulz(x, coeffs, bf16):
    transpose = x.size(0) > x.size(1)
    if transpose:
        x = x.mT
    X = torch.nn.functional.normalize(x, p=2, dim=(-2, -1), eps=1e-15)
    if bf16:
        X = X.to(torch.bfloat16)
    for a, b, c in coeffs:
        A = X @ X.mT
        if c != 0.0:
            B = torch.addmm(A, A, A, alpha=c, beta=b)
            X = torch.addmm(X, B, X, alpha=1.0, beta=a)
        else:
            X = torch.addmm(X, A, X, alpha=b, beta=a)
    X = X.to(torch.float32)
    return X.mT if transpose else X


def scale_factor(mode, rows, cols):
    if mode == "spectral":
        return max(rows, cols) ** 0.5
    if mode == "unit_rms_norm":
        return (rows / cols) ** 0.5
    return max(1, rows / cols) ** 0.5


def reference(case, w, grads):
    rows = w.numel() // case["shape"][-1]
    cols = case["shape"][-1]
    p = w.reshape(rows, cols).clone()
    m = torch.zeros_like(p)
    mu, lr, wd = case["momentum"], case["lr"], case["weight_decay"]
    coeffs = coefficients(case["coefficients"], case["ns_steps"])
    for g in grads:
        g = g.reshape(rows, cols) * case["grad_scale"]
        p.add_(p, alpha=-wd * lr)
        m.lerp_(g, 1 - mu)
        u = g.lerp(m, mu) if case["nesterov"] else m

        def orth(x):
            return newton_schulz(x, coeffs, case["bf16"]) * scale_factor(
                case["scale_mode"], x.size(0), x.size(1)) * case["extra_scale"]
        split = case["qkv_rows"]
        if split:
            groups = rows // sum(split)
            parts = torch.split(u.view(groups, sum(split), cols), split, dim=1)
            parts = [orth(q.reshape(-1, cols)).view(groups, -1, cols) for q in parts]
            o = torch.cat(parts, dim=1).view(rows, cols)
        else:
            o = orth(u)
        p.add_(o, alpha=-lr)
    return p.reshape(-1), m.reshape(-1)


CASES = [
    # name, shape, qkv_rows, extra settings
    ("wide_spectral_fp32", [24, 40], [], {}),
    ("tall_nesterov_fp32", [48, 16], [], {"nesterov": True, "weight_decay": 0.1}),
    ("swiglu_fc1_unit_rms", [2, 20, 16], [], {"scale_mode": "unit_rms_norm"}),
    ("qkv_split_fp32", [4 * (2 * 8 + 2 * 8), 32], [16, 8, 8], {"grad_scale": 0.5}),
    ("shape_scaling_polar_express", [30, 12], [], {"scale_mode": "shape_scaling",
                                                   "coefficients": "polar_express",
                                                   "ns_steps": 10}),
    ("cubic5", [16, 28], [], {"coefficients": "cubic5"}),
    ("wide_bf16", [24, 40], [], {"bf16": True, "steps": 1}),
    ("qkv_split_bf16_nesterov", [4 * (2 * 8 + 2 * 8), 32], [16, 8, 8],
     {"bf16": True, "nesterov": True, "extra_scale": 0.2, "steps": 1}),
    ("tall_bf16", [128, 32], [], {"bf16": True, "steps": 1}),
]


def main():
    tool = sys.argv[1]
    torch.manual_seed(0)
    failed = False
    for name, shape, qkv, extra in CASES:
        case = {"shape": shape, "qkv_rows": qkv, "momentum": 0.9, "nesterov": False,
                "scale_mode": "spectral", "extra_scale": 1.0, "coefficients": "quintic",
                "ns_steps": 5, "bf16": False, "lr": 0.02, "weight_decay": 0.01,
                "grad_scale": 1.0, "steps": 3}
        case.update(extra)
        n = 1
        for d in shape:
            n *= d
        w = torch.randn(n) * 0.05
        grads = torch.randn(case["steps"], n)
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "case.json"), "w") as f:
                json.dump(case, f)
            w.numpy().tofile(os.path.join(d, "w.bin"))
            grads.numpy().tofile(os.path.join(d, "grads.bin"))
            subprocess.run([tool, d], check=True)
            w_out = torch.from_numpy(np.fromfile(os.path.join(d, "w_out.bin"), dtype=np.float32))
            m_out = torch.from_numpy(np.fromfile(os.path.join(d, "m_out.bin"), dtype=np.float32))
        w_ref, m_ref = reference(case, w, grads)
        change = (w_ref - w).abs().max().item()
        if case["bf16"]:
            err = (w_out - w_ref).norm().item() / (w_ref - w).norm().item()
        else:
            err = (w_out - w_ref).abs().max().item() / change
        merr = (m_out - m_ref).abs().max().item() / m_ref.abs().max().item()
        tol = 1e-1 if case["bf16"] else 1e-5
        ok = err <= tol and merr <= 1e-6
        failed |= not ok
        print("%-28s %-12s weight change %.3e  rel error %.2e (tol %.0e)  momentum %.2e  %s" %
              (name, "x".join(map(str, shape)), change, err, tol, merr, "ok" if ok else "FAIL"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
