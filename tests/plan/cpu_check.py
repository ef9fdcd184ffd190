#!/usr/bin/python3
"""Does `mtron plan` predict mtron's own CPU runs? For each layout of a check: the plan's
prediction (`mtron plan --json`, the layout fixed), then the measurement (the plan's
`--emit mpirun` script, run for a few iterations), printed with their ratio.

  cpu_check.py memory MTRON
      memory per rank of five layouts of a 4-layer GPT (h 512, seq 512): memory_gib.total
      against the largest "peak memory (MB)" of the iteration lines (the process's peak RSS);
      passes when every layout is within 30%
  cpu_check.py time MTRON [CALIBRATION.json]
      step time of seven layouts of a 4-layer GPT (h 256, seq 256) after `mtron plan
      --calibrate` (measured first for 1, 2 and 4 ranks when the file lacks them):
      time_s.step against the median "elapsed time per iteration (ms)" after the first 3;
      passes when at least 5 of the 7 layouts are within 25%

ITERS (environment): iterations of each run (default: memory 6, time 12).
"""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import mtron_run  # noqa: E402

TP1 = "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1"
TP2 = "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 1"
PP2 = ("--tensor-model-parallel-size 1 --pipeline-model-parallel-size 2 "
       "--num-virtual-stages-per-pipeline-rank 1")


# The 2-rank layouts both checks run: DP2, TP2 and PP2.
TWO_RANKS = [(2, TP1 + " --micro-batch-size 4", "--fp32"),
             (2, TP2 + " --micro-batch-size 8", "--fp32"),
             (2, PP2 + " --micro-batch-size 2", "--fp32")]


def shape(hidden, heads, seq):
    return (f"--num-layers 4 --hidden-size {hidden} --num-attention-heads {heads} "
            f"--seq-length {seq} --max-position-embeddings {seq} --vocab-size 50257").split()


# What each check compares: the model, the layouts (ranks, layout flags, precision), the plan's
# JSON field, the measurement from the training log, the tolerance and how many must meet it.
CHECKS = {
    "memory": dict(
        model=shape(512, 8, 512), iters=6, field=("memory_gib", "total"), unit="GiB",
        layouts=[(1, TP1 + " --micro-batch-size 8", "--fp32"),
                 (1, TP1 + " --micro-batch-size 2", "--bf16")] + TWO_RANKS,
        pattern=r"peak memory \(MB\): ([0-9.]+)",
        measure=lambda v: max(v) / 1024 if v else float("nan"),
        tolerance=0.30, needed=5),
    "time": dict(
        model=shape(256, 4, 256), iters=12, field=("time_s", "step"), unit="s",
        layouts=[(1, TP1 + " --micro-batch-size 8", "--fp32"),
                 (1, TP1 + " --micro-batch-size 8", "--bf16")] + TWO_RANKS + [
                 (4, TP2 + " --micro-batch-size 4", "--fp32"),
                 (4, PP2 + " --micro-batch-size 2", "--fp32")],
        pattern=r"elapsed time per iteration \(ms\): ([0-9.]+)",
        measure=lambda v: statistics.median(v[3:]) / 1000 if len(v) > 4 else float("nan"),
        tolerance=0.25, needed=5),
}


def plan(mtron, args):
    """`mtron plan ARGS` with the environment as it is (OpenMP's and the calibration's own
    thread counts)."""
    return mtron_run.run(mtron, 1, ["plan"] + args, timeout=3600, omp_threads=None)


def calibrate(mtron, cal):
    """Measures the calibration for 1, 2 and 4 ranks where the file lacks them."""
    have = set()
    if os.path.exists(cal):
        with open(cal) as f:
            have = {e["ranks_per_node"] for e in json.load(f)["entries"]}
    for n in (1, 2, 4):
        if n not in have:
            mtron_run.run(mtron, n, ["plan", "--calibrate", "--calibration", cal], timeout=3600,
                          omp_threads=None)


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in CHECKS:
        sys.exit(__doc__)
    what, mtron = sys.argv[1], os.path.realpath(sys.argv[2])
    c = CHECKS[what]
    iters = os.environ.get("ITERS", str(c["iters"]))
    with tempfile.TemporaryDirectory() as tmp:
        cal = os.path.join(tmp, "none.json")
        if what == "time":
            cal = sys.argv[3] if len(sys.argv) > 3 else os.path.join(tmp, "calibration.json")
            calibrate(mtron, cal)
        within = 0
        worst = 0.0
        for n, layout, prec in c["layouts"]:
            common = (["--hardware", "local-cpu", "--gpus", str(n)] + c["model"] +
                      ["--global-batch-size", "8"] + layout.split() +
                      [prec, "--calibration", cal, "--context-parallel-size", "1",
                       "--recompute-granularity", "none"])
            plan_json = os.path.join(tmp, "plan.json")
            plan(mtron, common + ["--json", "-o", plan_json])
            with open(plan_json) as f:
                predicted = json.load(f)["plans"][0][c["field"][0]][c["field"][1]]
            plan(mtron, common + ["--train-iters", iters, "--emit", "mpirun", "-o",
                                  os.path.join(tmp, "run.sh")])
            p = subprocess.run(["bash", "run.sh"], cwd=tmp, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
            if p.returncode != 0:
                print("\n".join(p.stdout.splitlines()[-5:]))
                sys.exit(f"FAIL: training run failed ({n} ranks {layout} {prec})")
            measured = c["measure"]([float(m) for m in re.findall(c["pattern"], p.stdout)])
            ratio = predicted / measured
            print(f"{n} ranks {layout:<90} {prec} predicted {predicted:.3f} {c['unit']} "
                  f"measured {measured:.3f} {c['unit']} ratio {ratio:.3f}")
            worst = max(worst, abs(ratio - 1))
            within += abs(ratio - 1) <= c["tolerance"]
    print(f"within {c['tolerance']:.0%}: {within} of {len(c['layouts'])} layouts; worst relative "
          f"error: {worst:.3f}")
    sys.exit(0 if within >= c["needed"] else 1)


if __name__ == "__main__":
    main()
