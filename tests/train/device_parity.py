#!/usr/bin/python3
"""--device cuda against --device cpu, the same flags, under mpirun (or one process).

  device_parity.py MTRON NP FLAGS...

Trains with `mpirun -np NP MTRON train FLAGS --device cpu` and again with `--device cuda`
(MTRON: mtron_cudasim, whose CUDA device is the CPU emulation), and requires every iteration's
loss and gradient norm to agree (rel <= 1e-5).
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import mtron_run  # noqa: E402

TOL = 1e-5


def train(mtron, np_, flags, device, metrics):
    return mtron_run.train(mtron, np_, flags + ["--device", device], metrics, timeout=500)[0]


def main():
    mtron, np_, flags = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    with tempfile.TemporaryDirectory() as d:
        cpu = train(mtron, np_, flags, "cpu", os.path.join(d, "cpu.jsonl"))
        gpu = train(mtron, np_, flags, "cuda", os.path.join(d, "cuda.jsonl"))
    assert cpu and len(cpu) == len(gpu), "iterations logged: cpu %d, cuda %d" % (len(cpu), len(gpu))
    worst = 0.0
    for c, g in zip(cpu, gpu):
        rel = abs(g["lm_loss"] - c["lm_loss"]) / abs(c["lm_loss"])
        grel = abs(g["grad_norm"] - c["grad_norm"]) / abs(c["grad_norm"])
        worst = max(worst, rel, grel)
        print("iteration %2d  cpu %.9f  cuda %.9f  rel %.2e  grad norm rel %.2e" % (
            c["iteration"], c["lm_loss"], g["lm_loss"], rel, grel))
    print("np %d %s: worst rel %.2e (tol %.0e)" % (np_, " ".join(flags), worst, TOL))
    return 0 if worst <= TOL else 1


if __name__ == "__main__":
    sys.exit(main())
