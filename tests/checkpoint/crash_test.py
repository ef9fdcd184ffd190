#!/usr/bin/python3
"""Crash safety: SIGKILL the trainer at random moments while it saves, 20 times.

  crash_test.py MTRON TOOL WORKDIR NP [KILLS]

A tiny model whose step takes ~2 ms and whose save (7 MB with fsync) ~40 ms, saving every
iteration, so most kills land inside a save. Each round starts `mtron train --load D --save D`
(under `mpirun -np NP` when NP > 1, killing one random rank), waits a random time and kills.
Every round must:
  - load the checkpoint the marker named when it started (the newest committed one), or start
    fresh if there was none;
  - log, for every iteration it completed, exactly the loss and grad norm of an uninterrupted
    reference run (resume is bit-exact, so a torn checkpoint could not pass);
and after each kill the marker must name a complete checkpoint. A final run then finishes the
job and its last checkpoint must be bit-identical to the reference run's.
"""
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ckpt_common import env, mpi_prefix, read_metrics  # noqa: E402

MIN_ITERS = 200  # the job's length grows with the machine's speed (see probe())
MODEL = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 16 "
         "--micro-batch-size 1 --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine "
         "--mock-data --vocab-size 8000 --seed 7 --log-interval 1 --eval-iters 0").split()


def rows_of(path):
    """Metrics rows; a line torn by the kill is ignored."""
    rows = []
    if os.path.exists(path):
        for line in open(path):
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
    return rows


def marker(d):
    try:
        return int(open(os.path.join(d, "latest_checkpointed_iteration.txt")).read())
    except (OSError, ValueError):
        return None


def children(pid):
    kids = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                stat = open("/proc/%s/stat" % p).read()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    kids.append(int(p))
            except (OSError, IndexError, ValueError):
                pass
    return kids


def sleep_range(np_):
    """Seconds between a round's start and its kill (under mpirun start-up takes longer)."""
    return (0.15, 0.8) if np_ == 1 else (0.6, 2.0)


def probe(mtron, work, np_, base):
    """Iterations a round can complete at most on this machine: run the round's command (saving
    every iteration) for the longest kill delay and count. Every kill round must interrupt
    training, so the job must be longer than the rounds can get through."""
    d = os.path.join(work, "probe")
    cmd = mpi_prefix(np_) + [mtron, "train"] + base + [
        "--train-iters", "1000000", "--save", d, "--save-interval", "1",
        "--keep-last-n-checkpoints", "2", "--metrics-file", d + ".jsonl"]
    p = subprocess.Popen(cmd, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    time.sleep(sleep_range(np_)[1])
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    shutil.rmtree(d, ignore_errors=True)
    return len(rows_of(d + ".jsonl"))


def main():
    mtron, tool, work, np_ = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    kills = int(sys.argv[5]) if len(sys.argv) > 5 else 20
    rng = random.Random(int(os.environ.get("CRASH_SEED", "20261130")))
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    layout = ["--global-batch-size", str(np_)] + (["--use-distributed-optimizer"] if np_ > 1 else [])
    # the most of two probes: the first start of the binary and its libraries can be much slower
    # than the rounds' (a cold page cache)
    per_round = max(probe(mtron, work, np_, MODEL + layout) for _ in range(2))
    # 1.3 x the most the kill rounds could get through (a round averages ~0.6 of the most: the
    # machine would have to get twice as fast during the test for a round to find it finished).
    iters = max(MIN_ITERS, int(1.3 * per_round * kills) + per_round)
    print("probe: at most %d iterations per round; the job trains %d" % (per_round, iters))
    base = MODEL + layout + ["--train-iters", str(iters)]

    ref_ck = os.path.join(work, "reference")
    cmd = mpi_prefix(np_) + [mtron, "train"] + base + [
        "--save", ref_ck, "--save-interval", str(iters), "--metrics-file", work + "/ref.jsonl"]
    subprocess.run(cmd, env=env(), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ref = {r["iteration"]: r for r in read_metrics(work + "/ref.jsonl")}
    assert len(ref) == iters

    ck = os.path.join(work, "ck")
    in_save = 0
    failures = []
    for k in range(kills + 1):
        final = k == kills
        before = marker(ck)
        if not final and before == iters:
            # A kill of a finished job tests nothing: every round must interrupt training.
            failures.append("round %d: the job already finished at iteration %d, so the kills "
                            "test nothing (the probe underestimated the speed)" % (k, iters))
            break
        metrics, log = work + "/run%02d.jsonl" % k, work + "/run%02d.log" % k
        cmd = mpi_prefix(np_) + [mtron, "train"] + base + [
            "--load", ck, "--save", ck, "--save-interval", "1", "--keep-last-n-checkpoints", "2",
            "--metrics-file", metrics]
        t_start = time.time()
        with open(log, "w") as out:
            p = subprocess.Popen(cmd, env=env(), stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
            if final:
                p.wait(timeout=300)
            else:
                time.sleep(rng.uniform(*sleep_range(np_)))
                victim = p.pid
                if np_ > 1:
                    ranks = children(p.pid)
                    victim = rng.choice(ranks) if ranks else p.pid
                try:
                    os.kill(victim, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        text = open(log).read()
        after = marker(ck)
        stale = [n for n in os.listdir(ck)] if os.path.isdir(ck) else []
        torn = any(n.startswith(".tmp.iter_") and os.path.getmtime(os.path.join(ck, n)) >= t_start
                   for n in stale)
        # Renamed into place but not yet named by the marker: killed inside the commit.
        uncommitted = any(re.fullmatch(r"iter_\d{7}", n) and int(n[5:]) > (after or 0)
                          for n in stale)
        in_save += torn or uncommitted
        rows = rows_of(metrics)
        # It resumed from the newest committed checkpoint...
        if before is None:
            ok_start = "will start from random" in text or not text.strip()
        else:
            want = "loading checkpoint %s (iteration %d," % (
                os.path.join(ck, "iter_%07d" % before), before)
            ok_start = want in text or (not rows and "loading checkpoint" not in text)
        if not ok_start:
            failures.append("round %d: did not load iteration %s:\n%s" % (k, before, text[-2000:]))
        # ...and continued exactly.
        start = (before or 0) + 1
        if rows and rows[0]["iteration"] != start:
            failures.append("round %d: first iteration %d, expected %d" %
                            (k, rows[0]["iteration"], start))
        for r in rows:
            b = ref[r["iteration"]]
            if (r["lm_loss"], r["grad_norm"]) != (b["lm_loss"], b["grad_norm"]):
                failures.append("round %d: iteration %d loss %r != reference %r" %
                                (k, r["iteration"], r["lm_loss"], b["lm_loss"]))
        # The marker only moves forward, and names a complete checkpoint.
        if after is not None:
            if before is not None and after < before:
                failures.append("round %d: marker went back from %d to %d" % (k, before, after))
            if not os.path.exists(os.path.join(ck, "iter_%07d" % after, "manifest.json")):
                failures.append("round %d: marker names incomplete iteration %d" % (k, after))
        last = rows[-1]["iteration"] if rows else None
        print("round %2d: marker %s -> %s, iterations %s..%s%s" %
              (k, before, after, rows[0]["iteration"] if rows else "-", last,
               ", killed while writing a save" if torn else
              ", killed between the rename and the marker update" if uncommitted else ""))
        if failures:
            break
    if not failures:
        if marker(ck) != iters:
            failures.append("the job did not finish (marker %s)" % marker(ck))
        p = subprocess.run([tool, "compare", ref_ck, ck], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        if p.returncode != 0:
            failures.append("final checkpoint differs from the reference:\n" + p.stdout)
    print("crash test np %d: %d kills, %d inside a save; %s" %
          (np_, kills, in_save, "FAILED" if failures else "every restart resumed exactly"))
    for f in failures:
        print(f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
