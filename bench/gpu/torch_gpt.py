"""The PyTorch side of bench/gpu/run.sh: a GPT training step on one GPU, as a strong baseline.

The GPT-2 of bench/torch_gpt_model.py (scaled_dot_product_attention: flash, causal), bf16
autocast with fp32 master weights, fused AdamW, random tokens. Eager, or --compile for torch.compile. Runs --warmup steps
(compilation happens there), then --steps timed ones, and prints one line:

  tokens/s <median> step_s <median seconds> mfu <fraction> loss_first <l> loss_last <l>

MFU uses Megatron's FLOPs formula (core/formulas.cpp) against --peak (989.4 TFLOP/s, the dense
bf16 peak of an H100/H200), so the figure is comparable with mtron's log line.

  torch_gpt.py --layers 12 --hidden 768 --heads 12 --seq 1024 --batch 64 [--compile]
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from torch_gpt_model import GPT  # noqa: E402


def megatron_flops(B, s, L, h, V):
    # 72 B s L h^2 (1 + s/(12 h) + V/(12 L h)): core/formulas.cpp for a GPT-2-style model
    return 72.0 * B * s * L * h * h * (1 + s / (12.0 * h) + V / (12.0 * L * h))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--peak", type=float, default=989.4e12)
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = torch.device("cuda")
    model = GPT(a.layers, a.hidden, a.heads, a.vocab, a.seq).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    step_fn = torch.compile(model) if a.compile else model
    idx = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
    tgt = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
    times, losses = [], []
    for it in range(a.warmup + a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_fn(idx, tgt)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        losses.append(loss.item())
        if it >= a.warmup:
            times.append(time.perf_counter() - t0)
    step = statistics.median(times)
    tokens = a.batch * a.seq
    mfu = megatron_flops(a.batch, a.seq, a.layers, a.hidden, a.vocab) / step / a.peak
    print("tokens/s %.1f step_s %.4f mfu %.4f loss_first %.4f loss_last %.4f max_mem_gib %.1f"
          % (tokens / step, step, mfu, losses[0], losses[-1],
             torch.cuda.max_memory_allocated() / 2**30))


if __name__ == "__main__":
    main()
