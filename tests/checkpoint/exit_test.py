#!/usr/bin/python3
"""Megatron's exit flags, end to end:

  exit_test.py signal [--device D] MTRON WORKDIR NP SIGNAL
      trains with --exit-signal-handler and sends SIGNAL (TERM or INT) to ONE process (a
      random rank under mpirun): every rank must agree, save at the same iteration and exit 0;
      a run resumed from that checkpoint must then continue exactly as an uninterrupted run.
  exit_test.py duration MTRON WORKDIR NP
      --exit-duration-in-mins 0.03: exits 0 after ~2 s with a checkpoint of the last iteration.
--device D trains on device D (mtron's --device; for cuda MTRON is mtron_cudasim, and it saves
from the emulated device's memory).
"""
import os
import random
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from crash_test import children, marker, rows_of  # noqa: E402
from ckpt_common import device_flags, env, mpi_prefix  # noqa: E402

MODEL = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 16 "
         "--micro-batch-size 1 --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine "
         "--mock-data --vocab-size 300 --seed 5 --log-interval 1 --train-iters 100000").split()


# The device's flags (device_flags), set by main.
DEVICE = []


def layout(np_):
    return DEVICE + ["--global-batch-size", str(np_)] + (
        ["--tensor-model-parallel-size", "2"] if np_ >= 2 else []) + (
        ["--use-distributed-optimizer"] if np_ >= 4 else [])


def start(mtron, np_, args, log):
    return subprocess.Popen(mpi_prefix(np_) + [mtron, "train"] + MODEL + layout(np_) + args,
                            env=env(), stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def wait_rows(path, n, p, timeout=120):
    t0 = time.time()
    while len(rows_of(path)) < n:
        if p.poll() is not None or time.time() - t0 > timeout:
            sys.exit("trainer stopped before %d iterations:\n%s" % (n, open(path + ".log").read()))
        time.sleep(0.05)


def check_continuation(mtron, work, np_, it):
    """Loads the checkpoint at `it`, trains 3 more; an uninterrupted run must log the same."""
    ck = os.path.join(work, "ck")
    out = subprocess.run(mpi_prefix(np_) + [mtron, "train"] + MODEL + layout(np_) + [
        "--load", ck, "--exit-interval", str(it + 3), "--metrics-file", work + "/cont.jsonl"],
        env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert out.returncode == 0 and "(iteration %d," % it in out.stdout, out.stdout
    ref = subprocess.run(mpi_prefix(np_) + [mtron, "train"] + MODEL + layout(np_) + [
        "--exit-interval", str(it + 3), "--metrics-file", work + "/ref.jsonl"],
        env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert ref.returncode == 0, ref.stdout
    cont = rows_of(work + "/cont.jsonl")
    base = {r["iteration"]: r for r in rows_of(work + "/ref.jsonl")}
    assert [r["iteration"] for r in cont] == [it + 1, it + 2, it + 3], cont
    for r in cont:
        assert r["lm_loss"] == base[r["iteration"]]["lm_loss"], (r, base[r["iteration"]])
    print("resumed from iteration %d: iterations %d..%d identical to an uninterrupted run" %
          (it, it + 1, it + 3))


def main():
    args = sys.argv[1:]
    if args[1] == "--device":
        DEVICE.extend(device_flags(args[2]))
        del args[1:3]
    mode, mtron, work, np_ = args[0], args[1], args[2], int(args[3])
    subprocess.run(["rm", "-rf", work])
    os.makedirs(work)
    ck = os.path.join(work, "ck")
    log = work + "/run.jsonl.log"
    if mode == "signal":
        sig = {"TERM": signal.SIGTERM, "INT": signal.SIGINT}[args[4]]
        p = start(mtron, np_, ["--exit-signal-handler", "--save", ck, "--save-interval", "100000",
                               "--metrics-file", work + "/run.jsonl"], log)
        wait_rows(work + "/run.jsonl", 5, p)
        victim = random.Random(1).choice(children(p.pid)) if np_ > 1 else p.pid
        os.kill(victim, sig)
        rc = p.wait(timeout=120)
        text = open(log).read()
        rows = rows_of(work + "/run.jsonl")
        assert rc == 0, "exit code %d:\n%s" % (rc, text)
        assert "exiting program after receiving SIG%s." % args[4] in text, text
        it = marker(ck)
        assert it == rows[-1]["iteration"], (it, rows[-1])
        assert text.count("saved checkpoint at iteration %d" % it) == 1, text
        print("SIG%s to %s of %d%s: every rank saved iteration %d and exited 0" %
              (args[4], "one rank" if np_ > 1 else "the process", np_,
               " ".join([""] + DEVICE[:2]), it))
        check_continuation(mtron, work, np_, it)
        return 0
    t0 = time.time()
    p = start(mtron, np_, ["--exit-duration-in-mins", "0.03", "--save", ck, "--save-interval",
                           "100000", "--metrics-file", work + "/run.jsonl"], log)
    rc = p.wait(timeout=120)
    text = open(log).read()
    rows = rows_of(work + "/run.jsonl")
    assert rc == 0 and "exiting program after" in text, text
    assert marker(ck) == rows[-1]["iteration"], (marker(ck), rows[-1])
    print("--exit-duration-in-mins 0.03: exited 0 after %.1f s at iteration %d with a checkpoint"
          % (time.time() - t0, marker(ck)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
