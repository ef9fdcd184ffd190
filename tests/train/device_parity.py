#!/usr/bin/python3
"""--device cuda against --device cpu, the same flags, under mpirun (or one process).

  device_parity.py MTRON NP FLAGS... [--tol T] [FLAGS...]

Trains with `mpirun -np NP MTRON train FLAGS --device cpu` and again with `--device cuda`
(MTRON: mtron_cudasim, whose CUDA device is the CPU emulation), and requires every iteration's
loss and gradient norm to agree (rel <= T, default 1e-5; 3e-4 with --fp16), and with --fp16 the same
iterations to be skipped with the same loss scales.
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import mtron_run  # noqa: E402

TOL = 1e-5
# fp16: the two devices' fp32 rounding differences move values across fp16 rounding boundaries
FP16_TOL = 3e-4


def train(mtron, np_, flags, device, metrics):
    return mtron_run.train(mtron, np_, flags + ["--device", device], metrics, timeout=500)[0]


def main():
    mtron, np_, flags = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    tol = FP16_TOL if "--fp16" in flags else TOL
    if "--tol" in flags:  # device_parity's own option, not mtron's
        i = flags.index("--tol")
        tol, flags = float(flags[i + 1]), flags[:i] + flags[i + 2:]
    with tempfile.TemporaryDirectory() as d:
        cpu = train(mtron, np_, flags, "cpu", os.path.join(d, "cpu.jsonl"))
        gpu = train(mtron, np_, flags, "cuda", os.path.join(d, "cuda.jsonl"))
    assert cpu and len(cpu) == len(gpu), "iterations logged: cpu %d, cuda %d" % (len(cpu), len(gpu))
    worst, differ = 0.0, 0
    for c, g in zip(cpu, gpu):
        rel = abs(g["lm_loss"] - c["lm_loss"]) / abs(c["lm_loss"])
        # --fp16: the same iterations skipped (no grad norm) with the same loss scales
        skips = (c["grad_norm"] is None, c.get("loss_scale")), (g["grad_norm"] is None,
                                                                 g.get("loss_scale"))
        differ += skips[0] != skips[1]
        grel = 0.0 if c["grad_norm"] is None or g["grad_norm"] is None else \
            abs(g["grad_norm"] - c["grad_norm"]) / abs(c["grad_norm"])
        worst = max(worst, rel, grel)
        print("iteration %2d  cpu %.9f  cuda %.9f  rel %.2e  grad norm rel %.2e%s" % (
            c["iteration"], c["lm_loss"], g["lm_loss"], rel, grel,
            "" if skips[0] == skips[1] else "  skipped/loss scale DIFFER %s" % (skips,)))
    print("np %d %s: worst rel %.2e (tol %.0e)%s" % (
        np_, " ".join(flags), worst, tol, "; %d iterations skipped differently" % differ
        if differ else ""))
    return 0 if worst <= tol and differ == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
