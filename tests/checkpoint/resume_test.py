#!/usr/bin/python3
"""Exact resume and resharding, end to end with `mtron train` (docs/checkpoints.md).

  resume_test.py exact [--device D] [--iters N] MTRON TOOL WORKDIR NP ARCH [FLAGS...]
      N iterations straight (default 20, saving at N) versus N/2 iterations + save + exit, then a
      new process that loads and trains N/2 more (saving at N), both under `mpirun -np NP` with the
      layout FLAGS. Requires every iteration's loss, grad norm, learning rate, loss scale and
      skipped count to be identical and the two final checkpoints (weights, Adam moments) to be
      bit-identical tensor by tensor.
  resume_test.py reshard [--device D] [--iters N] MTRON WORKDIR NP ARCH [FLAGS...]
      loads the iteration-N/2 checkpoint an `exact` run (with the same N) left in WORKDIR under
      another layout and trains to N: every loss must match that run's (un-resharded)
      continuation, rel <= 1e-5. With --use-checkpoint-args in FLAGS the model's flags are left
      out (FLAGS may give contrary ones): the checkpoint supplies them.
  resume_test.py exchange [--iters N] MTRON WORKDIR NP ARCH [FLAGS...]
      MTRON is mtron_cudasim (its CUDA device is the CPU emulation). N iterations on
      --device cpu and on --device cuda, saving at N/2; then the CUDA checkpoint continued on the
      CPU and the CPU one on CUDA, to N: every loss within rel 1e-5 of the all-CPU run (the
      emulation's fp32 rounding differs from the CPU kernels'). (That a device's checkpoint
      holds its buffers bit for bit is test_checkpoint_cudasim's.)
exact and reshard with --device D train on device D (mtron's --device; for cuda MTRON is
mtron_cudasim).
MoE models (ARCH moe): exact also requires identical auxiliary losses and routing checksums;
reshard requires the auxiliary losses within rel 1e-5 and the same routed (token, expert) pairs.
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ckpt_common import (  # noqa: E402
    ARCH, COMMON, MOE_KEYS, device_flags, read_metrics, train)

TOL = 1e-5


def progress_state(root):
    """(optimizer.grad_scaler, lr_scheduler.num_samples) of the latest checkpoint in root."""
    with open(os.path.join(root, "latest_checkpointed_iteration.txt")) as f:
        it = int(f.read())
    with open(os.path.join(root, "iter_%07d" % it, "manifest.json")) as f:
        m = json.load(f)
    return (m["optimizer"] or {}).get("grad_scaler"), m["lr_scheduler"]["num_samples"]


def exact(mtron, tool, work, np_, arch, flags, device, n):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    h = n // 2
    base = COMMON + ARCH[arch] + ["--train-iters", str(n)] + flags + device_flags(device)
    straight, _ = train(mtron, np_, base + ["--save", work + "/straight", "--save-interval",
                                            str(n)], work + "/straight.jsonl")
    first, out1 = train(mtron, np_, base + ["--save", work + "/split", "--save-interval", str(h),
                                            "--exit-interval", str(h)], work + "/first.jsonl")
    assert "exiting program at iteration %d" % h in out1, out1
    second, out2 = train(mtron, np_, base + ["--load", work + "/split", "--save", work + "/split",
                                             "--save-interval", str(n)], work + "/second.jsonl")
    assert "(iteration %d, saved under" % h in out2, out2
    split = first + second
    assert [r["iteration"] for r in straight] == list(range(1, n + 1)), straight
    assert [r["iteration"] for r in split] == list(range(1, n + 1)), split
    bad = 0
    for s, r in zip(straight, split):
        keys = ("lm_loss", "grad_norm", "learning_rate", "consumed_samples", "loss_scale",
                "skipped_iterations") + tuple(k for k in MOE_KEYS if k in s)
        same = all(s[k] == r.get(k) for k in keys)
        bad += not same
        print("iteration %2d  straight %.9g  resumed %.9g  %s" %
              (s["iteration"], s["lm_loss"], r["lm_loss"], "same" if same else "DIFFERENT"))
    p = subprocess.run([tool, "compare", work + "/straight", work + "/split"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(p.stdout.strip())
    # the loss scaler's state and the schedule's position, as the manifests record them
    state = [progress_state(work + d) for d in ("/straight", "/split")]
    print("scaler and schedule at %d: straight %s, resumed %s" % ((n,) + tuple(state)))
    bad += state[0] != state[1]
    print("exact resume np %d %s %s%s: %d iterations differ; final checkpoints %s" %
          (np_, arch, " ".join(flags), " on " + device if device else "", bad,
           "bit-identical" if p.returncode == 0 else "DIFFER"))
    return 0 if bad == 0 and p.returncode == 0 else 1


def without_model_flags(flags):
    """COMMON without the model's shape: what --use-checkpoint-args takes from the checkpoint."""
    out = list(flags)
    for f in ("--num-layers", "--hidden-size", "--seq-length"):
        i = out.index(f)
        del out[i:i + 2]
    return out


def reshard(mtron, work, np_, arch, flags, device, n):
    h = n // 2
    ref = read_metrics(work + "/second.jsonl")
    assert len(ref) == n - h, "run the exact test with --iters %d first (fixture)" % n
    tag = "_".join(f.strip("-") for f in flags) or "np1"
    # With --use-checkpoint-args the model's flags come from the checkpoint (FLAGS may add
    # contrary ones, which it overrides)
    from_ckpt = "--use-checkpoint-args" in flags
    base = without_model_flags(COMMON) if from_ckpt else COMMON + ARCH[arch]
    rows, out = train(mtron, np_, base + ["--train-iters", str(n), "--load",
                                          work + "/split/iter_%07d" % h] + flags +
                      device_flags(device),
                      work + "/reshard_%d_%s.jsonl" % (np_, tag))
    assert "(iteration %d, saved under" % h in out, out
    if from_ckpt:
        assert "--use-checkpoint-args: from" in out and "--num-layers 4" in out, out
    assert [r["iteration"] for r in rows] == list(range(h + 1, n + 1)), rows
    worst, routing = 0.0, 0
    for b, r in zip(ref, rows):
        rel = abs(r["lm_loss"] - b["lm_loss"]) / abs(b["lm_loss"])
        for k in ("load_balancing_loss", "z_loss"):
            if k in b:
                rel = max(rel, abs(r[k] - b[k]) / abs(b[k]))
        routing += "moe_routing_hash" in b and r.get("moe_routing_hash") != b["moe_routing_hash"]
        worst = max(worst, rel)
        print("iteration %2d  saved layout %.9f  np %d %.9f  rel %.2e%s" %
              (r["iteration"], b["lm_loss"], np_, r["lm_loss"], rel,
               "" if "moe_routing_hash" not in b else "  routing " + (
                   "same" if r.get("moe_routing_hash") == b["moe_routing_hash"] else "DIFFERENT")))
    print("reshard to np %d %s%s: worst rel %.2e (tol %.0e)%s" % (
        np_, " ".join(flags), " on " + device if device else "", worst, TOL,
        "; %d iterations routed other pairs" % routing if "moe_routing_hash" in ref[0] else ""))
    return 0 if worst <= TOL and routing == 0 else 1


def exchange(mtron, work, np_, arch, flags, n):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    h = n // 2
    base = COMMON + ARCH[arch] + ["--train-iters", str(n)] + flags

    def run(name, device, extra):
        rows, out = train(mtron, np_, base + ["--device", device, "--save", work + "/" + name,
                                              "--save-interval", str(h)] + extra,
                          work + "/" + name + ".jsonl")
        return [r["lm_loss"] for r in rows], out

    cpu, _ = run("cpu", "cpu", [])
    cuda, _ = run("cuda", "cuda", [])
    cuda_cpu, out1 = run("cuda_to_cpu", "cpu", ["--load", work + "/cuda/iter_%07d" % h])
    cpu_cuda, out2 = run("cpu_to_cuda", "cuda", ["--load", work + "/cpu/iter_%07d" % h])
    for out in (out1, out2):
        assert "(iteration %d, saved under" % h in out, out
    assert len(cpu) == len(cuda) == n and len(cuda_cpu) == len(cpu_cuda) == n - h
    worst = 0.0
    for i in range(n):
        row = [cpu[i], cuda[i]] + ([cuda_cpu[i - h], cpu_cuda[i - h]] if i >= h else [])
        rel = max(abs(x - cpu[i]) / abs(cpu[i]) for x in row)
        worst = max(worst, rel)
        print("iteration %2d  cpu %.9f  cuda %.9f%s  rel %.2e" % (
            i + 1, cpu[i], cuda[i], "  cuda->cpu %.9f  cpu->cuda %.9f" % tuple(row[2:])
            if i >= h else "", rel))
    print("exchange np %d %s %s: cuda->cpu and cpu->cuda at iteration %d, worst rel %.2e against "
          "the all-cpu run (tol %.0e)" % (np_, arch, " ".join(flags), h, worst, TOL))
    return 0 if worst <= TOL else 1


def main():
    args = sys.argv[1:]
    mode, device, n = args.pop(0), None, 20
    while args[0] in ("--device", "--iters"):
        if args[0] == "--device":
            device = args[1]
        else:
            n = int(args[1])
        args = args[2:]
    assert n >= 2 and n % 2 == 0, "--iters takes an even count"
    if mode == "exact":
        mtron, tool, work, np_, arch = args[:5]
        return exact(mtron, tool, work, int(np_), arch, args[5:], device, n)
    mtron, work, np_, arch = args[:4]
    if mode == "exchange":
        return exchange(mtron, work, int(np_), arch, args[4:], n)
    return reshard(mtron, work, int(np_), arch, args[4:], device, n)


if __name__ == "__main__":
    sys.exit(main())
