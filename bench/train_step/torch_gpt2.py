#!/usr/bin/python3
"""The PyTorch side of bench/train_step: the same GPT-2 training step in PyTorch (Debian's 1.13,
CPU): the model of bench/torch_gpt_model.py, AdamW, random tokens.

  torch_gpt2.py --precision fp32|bf16 --iters N [--layers 12 --hidden 768 --heads 12 --seq 1024
                --batch 4 --vocab 50304 --threads 2]
Prints one line: `tokens/s <value> step_s <median seconds>`.
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from torch_gpt_model import GPT  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = GPT(a.layers, a.hidden, a.heads, a.vocab, a.seq)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    idx = torch.randint(0, a.vocab, (a.batch, a.seq))
    tgt = torch.randint(0, a.vocab, (a.batch, a.seq))
    times = []
    for it in range(a.iters + 1):  # the first step warms up
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = model(idx, tgt)
        loss.backward()
        opt.step()
        if it > 0:
            times.append(time.perf_counter() - t0)
    step = statistics.median(times)
    print("tokens/s %.2f step_s %.4f" % (a.batch * a.seq / step, step))


if __name__ == "__main__":
    main()
