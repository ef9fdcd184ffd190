#!/usr/bin/python3
"""PyTorch's side of bench/optim/muon_bench.cpp: Megatron's Muon step (its emerging_optimizers
arithmetic, as tests/optim/muon_test.py writes it) on the same four GPT-2 124M matrices.

  muon_torch.py [ROUNDS] [bf16|fp32]
"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                "optim"))
import muon_test  # noqa: E402


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    bf16 = (sys.argv[2] if len(sys.argv) > 2 else "bf16") == "bf16"
    mats = [([2304, 768], [64, 64, 64]), ([768, 768], []), ([3072, 768], []), ([768, 3072], [])]
    torch.manual_seed(1)
    flops = 0.0
    cases = []
    for shape, qkv in mats:
        case = {"shape": shape, "qkv_rows": qkv, "momentum": 0.9, "nesterov": False,
                "scale_mode": "spectral", "extra_scale": 1.0, "coefficients": "quintic",
                "ns_steps": 5, "bf16": bf16, "lr": 0.02, "weight_decay": 0.01, "grad_scale": 1.0}
        n = shape[0] * shape[1]
        cases.append((case, torch.randn(n) * 0.02, torch.randn(1, n)))
        rows = [shape[0]] if not qkv else [shape[0] // sum(qkv) * q for q in qkv]
        for r in rows:
            a, b = min(r, shape[1]), max(r, shape[1])
            flops += 5 * (4 * a * a * b + 2 * a * a * a)
    for round_ in range(rounds):
        t0 = time.perf_counter()
        for case, w, g in cases:
            muon_test.reference(case, w, g)
        s = time.perf_counter() - t0
        print("torch %s round %d: %.4f s, %.1f GFLOP/s" % ("bf16" if bf16 else "fp32", round_, s,
                                                          flops / s / 1e9))


if __name__ == "__main__":
    main()
