"""PyTorch's speed on this GPU at gpu_bench's shapes, for the side-by-side table of run.sh:
bf16 GEMMs (cuBLAS, bf16 output) and causal scaled_dot_product_attention (flash) in bf16, forward
and backward. Times are CUDA-event medians over 20 runs after 3 warm-ups.

  torch_ops.py
"""
import torch
import torch.nn.functional as F

PEAK = 989.4e12


def timed(fn, reps=20):
    for _ in range(3):
        fn()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    ts.sort()
    return ts[len(ts) // 2]


def row(what, shape, s, flops):
    print("%-30s %-28s %9.3f %9.1f %7.1f%%" % (what, shape, s * 1e3, flops / s / 1e12,
                                              100 * flops / s / PEAK), flush=True)


def main():
    dev = torch.device("cuda")
    print("torch %s on %s\n" % (torch.__version__, torch.cuda.get_device_name()))
    print("%-30s %-28s %9s %9s %8s" % ("op", "shape (MxNxK)", "ms", "TFLOP/s", "of peak"))
    tokens = 16384
    for name, h, heads, seq, batch in (("gpt2-124m", 768, 12, 1024, 16), ("1.3b", 2048, 16, 2048, 8)):
        for lin, out, inp in (("qkv", 3 * h, h), ("proj", h, h), ("fc1", 4 * h, h), ("fc2", h, 4 * h)):
            x = torch.randn(tokens, inp, device=dev, dtype=torch.bfloat16)
            w = torch.randn(out, inp, device=dev, dtype=torch.bfloat16)
            s = timed(lambda: x @ w.t())
            row("%s %s fwd bf16" % (name, lin), "%dx%dx%d" % (tokens, out, inp), s,
                2.0 * tokens * out * inp)
        D = h // heads
        q, k, v = (torch.randn(batch, heads, seq, D, device=dev, dtype=torch.bfloat16,
                               requires_grad=True) for _ in range(3))
        flops = 4.0 * batch * heads * seq * seq * D / 2
        shape = "B%d S%d H%d D%d" % (batch, seq, heads, D)
        s = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
        row("%s sdpa fwd bf16" % name, shape, s, flops)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        g = torch.randn_like(o)
        s = timed(lambda: torch.autograd.grad(o, (q, k, v), g, retain_graph=True))
        row("%s sdpa bwd bf16" % name, shape, s, 2 * flops)


if __name__ == "__main__":
    main()
