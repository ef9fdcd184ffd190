"""Shared by the bench/*/comm_volume.py scripts: run `mtron train` (under mpirun when np > 1) with
--profile and parse what it logs per rank."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import mtron_run  # noqa: E402


def run_profiled(mtron, np_, args):
    """Returns (bytes sent per step by rank and group, pipeline (bubble, ideal) by rank, the last
    iteration's time in ms)."""
    out = mtron_run.run(mtron, np_, ["train"] + args, expect_rc=None, timeout=900,
                        omp_threads=None)
    sent, bubble = {}, {}
    for m in re.finditer(r"\[mtron r(\d+)/\d+\] bytes sent per step:(.*)", out):
        toks = m.group(2).split()
        sent[int(m.group(1))] = {toks[i]: int(toks[i + 1]) for i in range(0, len(toks), 2)}
    for m in re.finditer(r"\[mtron r(\d+)/\d+\] pipeline per step: compute ([\d.]+) s, waiting "
                         r"([\d.]+) s, bubble ([\d.]+) \(ideal .* = ([\d.]+)\)", out):
        bubble[int(m.group(1))] = (float(m.group(4)), float(m.group(5)))
    ms = [float(x) for x in re.findall(r"elapsed time per iteration \(ms\): ([\d.]+)", out)]
    if not sent:
        sys.exit("no profile lines in:\n" + out)
    return sent, bubble, ms[-1] if ms else float("nan")
