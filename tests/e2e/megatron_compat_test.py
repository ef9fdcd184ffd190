#!/usr/bin/env python3
"""`mtron train` with Megatron's launch-script flags, end to end, on tiny models.

Usage: megatron_compat_test.py MTRON CASE, one CASE per CTest test:
  tensorboard   event files (read by tfevents_reader.py, written independently of mtron) on the
                last rank only, Megatron's tags and switches; `lm loss` per iteration equals the log;
                no grad-norm event on an iteration the fp16 loss scaler skipped; with
                --wandb-project the same events in the W&B directory
  samples       --train-samples / --lr-decay-samples / --lr-warmup-samples train exactly as their
                iteration equivalents (same log line but for the timings); one validation
                iteration of --eval-global-batch-size 8 is two of --global-batch-size 4
  rampup        --rampup-batch-size and --step-batch-size-schedule: the batch size of every
                iteration and the iteration count, as Megatron's calculators compute them
                (reimplemented below from their definition)
  checkpoint_lr --use-checkpoint-opt_param-scheduler / --override-opt_param-scheduler on resume
  bf16_reduce   --grad-reduce-in-bf16 halves the data-parallel gradient bytes, the loss stays close
  per_token     --calculate-per-token-loss changes nothing (every token counts)
  metrics       no file appears in the current directory unasked; <save>/mtron-metrics.jsonl,
                appended on resume; a failed run leaves it as it was
  timeout       --distributed-timeout-minutes ends a job whose rank is stuck, naming the timeout
"""
import glob
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import mtron_run  # noqa: E402
import tfevents_reader  # noqa: E402

MTRON = sys.argv[1]
TINY = ("--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 "
        "--micro-batch-size 2 --lr 1e-3 --mock-data --vocab-size 64 --eval-iters 0 "
        "--log-interval 1").split()


def run(args, np_=1, rc=0, cwd=None):
    return mtron_run.run(MTRON, np_, ["train"] + args, expect_rc=rc, cwd=cwd)


LINE = re.compile(r"iteration +(\d+)/ *(\d+) \| consumed samples: +(\d+) \|.*?learning rate: "
                  r"(\S+) \|.*?global batch size: +(\d+) \| lm loss: (\S+) \|.*?grad norm: (\S+) \|")


def iterations(out):
    """[(iteration, train_iters, consumed, lr, batch, loss, grad_norm)] of the log lines."""
    return [(int(m[1]), int(m[2]), int(m[3]), m[4], int(m[5]), m[6], m[7])
            for m in LINE.finditer(out)]


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)


def case_tensorboard(work):
    tb = os.path.join(work, "tb")
    flags = TINY + ["--train-iters", "6", "--global-batch-size", "4", "--eval-interval", "3",
                    "--eval-iters", "1", "--tensorboard-dir", tb, "--log-timers-to-tensorboard",
                    "--log-memory-to-tensorboard", "--log-validation-ppl-to-tensorboard",
                    "--log-world-size-to-tensorboard", "--metrics-file", "/dev/null"]
    out = run(flags, np_=2)
    files = glob.glob(os.path.join(tb, "events.out.tfevents.*"))
    check(len(files) == 1, "one event file (the last rank's), found %s" % files)
    ev = tfevents_reader.events(files[0])
    check(ev[0].get("file_version") == "brain.Event:2", "first record: file_version")
    s = tfevents_reader.scalars(files[0])
    log = iterations(out)
    check([r[0] for r in log] == list(range(1, 7)), "six log lines")
    for it, _, consumed, lr, batch, loss, gnorm in log:
        check(abs(s["lm loss"][it] - float(loss)) <= 1e-6 * abs(float(loss)),
              "lm loss at %d: event %r, log %s" % (it, s["lm loss"][it], loss))
        check(abs(s["lm loss vs samples"][consumed] - float(loss)) <= 1e-6 * float(loss),
              "lm loss vs samples at %d" % consumed)
        check(abs(s["learning-rate"][it] - float(lr)) <= 1e-6 * float(lr), "learning-rate")
        check(s["batch-size"][it] == batch and s["world-size"][it] == 2, "batch-size, world-size")
        check(abs(s["grad-norm"][it] - float(gnorm)) <= 1e-3, "grad-norm")
        check(s["loss-scale"][it] == 1.0, "loss-scale")
        check(s["iteration-time"][it] > 0 and s["throughput"][it] > 0, "timers")
        check(s["mem-max-allocated-bytes"][it] > 0, "memory")
    # Validation after iterations 3 and 6, then (as Megatron) the final one at step 6 again.
    vals = re.findall(r"validation loss at (iteration \d+|the end of training for val data) \| "
                      r"lm loss value: (\S+) \|", out)
    check(len(vals) == 3, "three validations: %s" % vals)
    series = tfevents_reader.series(files[0])
    got = series["lm loss validation"]
    check([st for st, _ in got] == [3, 6, 6], "validation steps %s" % got)
    for (step, value), (_, v) in zip(got, vals):
        check(abs(value - float(v)) <= 1e-6 * float(v), "validation %s vs %s" % (value, v))
    for (step, value), (_, v) in zip(series["lm loss validation ppl"], vals):
        check(abs(value - math.exp(float(v))) <= 1e-5 * math.exp(float(v)), "validation ppl")
    check([st for st, _ in series["lm loss validation vs samples"]] == [12, 24, 24],
          "validation vs samples")
    # The interval and the switches: every 2nd iteration, no loss scale, no timers.
    # With --wandb-project the same stream goes to the W&B directory too.
    tb2, wb = os.path.join(work, "tb2"), os.path.join(work, "wandb")
    out2 = run(TINY + ["--train-iters", "6", "--tensorboard-dir", tb2, "--tensorboard-log-interval",
                       "2", "--no-log-loss-scale-to-tensorboard", "--metrics-file", "/dev/null",
                       "--wandb-project", "proj", "--wandb-exp-name", "run1", "--wandb-entity",
                       "team", "--wandb-save-dir", wb])
    s2 = tfevents_reader.scalars(glob.glob(os.path.join(tb2, "events.out.tfevents.*"))[0])
    check(sorted(s2["lm loss"]) == [2, 4, 6], "--tensorboard-log-interval 2: %s" % s2["lm loss"])
    check("loss-scale" not in s2 and "iteration-time" not in s2 and "mem-allocated-bytes" not in s2,
          "switches off: %s" % sorted(s2))
    wfiles = glob.glob(os.path.join(wb, "events.out.tfevents.*"))
    check(len(wfiles) == 1 and tfevents_reader.scalars(wfiles[0]) == s2,
          "the W&B directory's event file: %s" % wfiles)
    check("upload them with `wandb sync --sync-tensorboard -p proj -e team %s`" % wb in out2,
          "the W&B note: %s" % out2[:2000])
    # --fp16 from a loss scale of 2^24: the first iterations are skipped; as Megatron (whose grad
    # norm is None there) they have no grad-norm event, the others have the log line's.
    tb3 = os.path.join(work, "tb3")
    out3 = run(TINY + ["--fp16", "--initial-loss-scale", "16777216", "--train-iters", "14",
                       "--tensorboard-dir", tb3,
                       "--metrics-file", "/dev/null"])
    s3 = tfevents_reader.scalars(glob.glob(os.path.join(tb3, "events.out.tfevents.*"))[0])
    skipped = [int(i) for i in re.findall(
        r"iteration +(\d+)/ *\d+ \|[^\n]*number of skipped iterations: +1 ", out3)]
    taken = {r[0]: float(r[6]) for r in iterations(out3)}
    check(skipped and taken and sorted(skipped + list(taken)) == list(range(1, 15)),
          "fp16: skipped %s, taken %s" % (skipped, sorted(taken)))
    check(sorted(s3["grad-norm"]) == sorted(taken) and sorted(s3["lm loss"]) == list(range(1, 15)),
          "fp16 grad-norm events at %s, taken iterations %s" % (sorted(s3["grad-norm"]), sorted(taken)))
    check(all(abs(s3["grad-norm"][i] - g) <= 1e-3 * max(1.0, g) for i, g in taken.items()),
          "fp16 grad-norm values")


def strip_timing(out):
    return [(r[0], r[1], r[2], r[3], r[4], r[5], r[6]) for r in iterations(out)]


def case_samples(work):
    common = TINY + ["--global-batch-size", "4", "--lr-decay-style", "cosine", "--min-lr", "1e-4",
                     "--metrics-file", "/dev/null"]
    by_iters = run(common + ["--train-iters", "8", "--lr-decay-iters", "6", "--lr-warmup-iters",
                             "2"])
    by_samples = run(common + ["--train-samples", "32", "--lr-decay-samples", "24",
                               "--lr-warmup-samples", "8"])
    a, b = strip_timing(by_iters), strip_timing(by_samples)
    check(len(a) == 8 and a == b, "sample-based != iteration-based:\n%s\n%s" % (a, b))
    frac_i = strip_timing(run(common + ["--train-iters", "8", "--lr-warmup-fraction", "0.25"]))
    frac_s = strip_timing(run(common + ["--train-samples", "32", "--lr-warmup-fraction", "0.25"]))
    check(frac_i == frac_s, "--lr-warmup-fraction: %s vs %s" % (frac_i, frac_s))
    # --eval-global-batch-size 8: a validation iteration of 8 sequences is two of --global-batch-size
    # 4 (the same samples: token-weighted mean loss), at iteration 2 and at the end.
    ev = TINY + ["--global-batch-size", "4", "--train-iters", "2", "--eval-interval", "2",
                 "--metrics-file", "/dev/null"]
    val = re.compile(r"validation loss at (iteration \d+|the end of training for val data) \| "
                     r"lm loss value: (\S+) \|")
    one = val.findall(run(ev + ["--eval-iters", "1", "--eval-global-batch-size", "8"]))
    two = val.findall(run(ev + ["--eval-iters", "2"]))
    check(len(one) == 2 and [w for w, _ in one] == [w for w, _ in two] and
          all(abs(float(a) - float(b)) <= 1e-6 * float(b) for (_, a), (_, b) in zip(one, two)),
          "--eval-global-batch-size 8 x 1 vs 4 x 2: %s vs %s" % (one, two))
    # Megatron's rules: iteration- and sample-based flags do not mix.
    out = run(common + ["--train-iters", "8", "--lr-decay-samples", "24"], rc=2)
    check("--lr-decay-samples needs --train-samples" in out, out)
    out = run(common + ["--train-iters", "8", "--train-samples", "32"], rc=2)
    check("exclude each other" in out, out)


def megatron_rampup(start, incr, ramp_samples, gbs, consumed):
    """RampupBatchsizeNumMicroBatchesCalculator.update (Megatron-Core 0.15)."""
    if consumed > ramp_samples:
        return gbs
    per_increment = ramp_samples / ((gbs - start) // incr)
    return start + int(consumed / per_increment) * incr


def megatron_train_iters(start, incr, ramp_samples, gbs, train_samples):
    """update_train_iters with a ramp-up (Megatron-LM 0.15)."""
    iters, consumed = 0, 0
    while consumed <= ramp_samples and consumed <= train_samples:
        consumed += megatron_rampup(start, incr, ramp_samples, gbs, consumed)
        iters += 1
    if train_samples > consumed:
        iters += (train_samples - consumed) // gbs
    return iters


def case_rampup(work):
    flags = TINY + ["--micro-batch-size", "1", "--global-batch-size", "8", "--train-samples",
                    "70", "--rampup-batch-size", "2", "2", "20", "--metrics-file", "/dev/null"]
    log = iterations(run(flags))
    want_iters = megatron_train_iters(2, 2, 20, 8, 70)
    check(len(log) == want_iters and log[-1][1] == want_iters,
          "%d iterations, Megatron: %d" % (len(log), want_iters))
    consumed = 0
    for it, _, c, _, batch, _, _ in log:
        want = megatron_rampup(2, 2, 20, 8, consumed)
        check(batch == want, "iteration %d: batch %d, Megatron %d" % (it, batch, want))
        consumed += want
        check(c == consumed, "iteration %d: consumed %d, expected %d" % (it, c, consumed))
    check(sorted(set(r[4] for r in log)) == [2, 4, 6, 8], "every ramp-up size is used")
    out = run(flags + ["--train-iters", "4"], rc=2)
    check("--rampup-batch-size needs sample-based training" in out, out)
    out = run(flags + ["--rampup-batch-size", "3", "2", "20"], rc=2)
    check("to be divisible by global batch size increment" in out, out)
    # The step schedule (thresholds in tokens: 16 per sample here): 2 until 64 tokens (4
    # samples), 4 until 192 tokens (12 samples), then 8.
    log = iterations(run(TINY + ["--micro-batch-size", "1", "--train-iters", "6",
                                 "--step-batch-size-schedule", "0:2 64:4 192:8",
                                 "--metrics-file", "/dev/null"]))
    check([r[4] for r in log] == [2, 2, 4, 4, 8, 8], "step schedule: %s" % [r[4] for r in log])
    # Unquoted, one word per entry (as Megatron-LM's GPT-3 example's array expands it).
    words = iterations(run(TINY + ["--micro-batch-size", "1", "--train-iters", "6",
                                   "--step-batch-size-schedule", "0:2", "64:4", "192:8",
                                   "--metrics-file", "/dev/null"]))
    check([r[4] for r in words] == [2, 2, 4, 4, 8, 8], "step schedule in words")


def case_checkpoint_lr(work):
    ck = os.path.join(work, "ck")
    base = TINY + ["--global-batch-size", "4", "--lr-decay-style", "linear",
                   "--metrics-file", "/dev/null"]
    straight = strip_timing(run(base + ["--train-iters", "6"]))
    run(base + ["--train-iters", "6", "--save", ck, "--save-interval", "3", "--exit-interval",
                "3"])
    # Other schedule flags: refused, unless told which schedule to use.
    out = run(base + ["--train-iters", "6", "--lr", "5e-3", "--load", ck], rc=2)
    check("--override-opt_param-scheduler" in out, out)
    resumed = strip_timing(run(base + ["--train-iters", "6", "--lr", "5e-3", "--load", ck,
                                       "--use-checkpoint-opt_param-scheduler"]))
    check([r[3] for r in resumed] == [r[3] for r in straight[3:]],
          "the checkpoint's schedule: %s vs %s" % (resumed, straight[3:]))
    override = strip_timing(run(base + ["--train-iters", "6", "--lr", "5e-3", "--load", ck,
                                        "--override-opt_param-scheduler"]))
    check(float(override[0][3]) > 2 * float(straight[3][3]), "the flags' schedule: %s" % override)
    out = run(base + ["--train-iters", "6", "--load", ck, "--override-opt_param-scheduler",
                      "--use-checkpoint-opt_param-scheduler"], rc=2)
    check("both --override-opt_param-scheduler and --use-checkpoint-opt_param-scheduler" in out,
          out)


def dp_bytes(out):
    m = re.search(r"bytes sent per step:.* dp-cp (\d+)", out)
    check(m, "no dp-cp bytes in: " + out)
    return int(m[1])


def case_bf16_reduce(work):
    flags = TINY + ["--global-batch-size", "4", "--train-iters", "3", "--bf16", "--profile",
                    "--metrics-file", "/dev/null"]
    fp32, bf16 = run(flags, np_=2), run(flags + ["--grad-reduce-in-bf16"], np_=2)
    b32, b16 = dp_bytes(fp32), dp_bytes(bf16)
    check(b16 * 2 <= b32 + 64, "bf16 reduction sends %d bytes, fp32 %d" % (b16, b32))
    l32, l16 = iterations(fp32), iterations(bf16)
    for a, b in zip(l32, l16):
        check(abs(float(a[5]) - float(b[5])) < 1e-2 * float(a[5]), "loss %s vs %s" % (a[5], b[5]))
    out = run(TINY + ["--train-iters", "1", "--grad-reduce-in-bf16", "--metrics-file",
                      "/dev/null"])
    check("--grad-reduce-in-bf16 has no effect without --bf16" in out, out)


def case_per_token(work):
    flags = TINY + ["--global-batch-size", "4", "--train-iters", "3", "--metrics-file",
                    "/dev/null"]
    a = strip_timing(run(flags))
    b = strip_timing(run(flags + ["--calculate-per-token-loss"]))
    check(a == b, "per-token loss changed training: %s vs %s" % (a, b))


def case_metrics(work):
    flags = TINY + ["--lr-decay-iters", "4"]  # the same schedule for the resumed run
    cwd = os.path.join(work, "cwd")
    os.makedirs(cwd)
    run(flags + ["--train-iters", "2"], cwd=cwd)
    check(os.listdir(cwd) == [], "files appeared in the current directory: %s" % os.listdir(cwd))
    ck = os.path.join(work, "ck")
    m = os.path.join(ck, "mtron-metrics.jsonl")
    run(flags + ["--train-iters", "2", "--save", ck, "--save-interval", "2"], cwd=cwd)
    check(len(open(m).readlines()) == 2, "two rows beside the checkpoint")
    run(flags + ["--train-iters", "2", "--save", ck, "--save-interval", "2", "--hidden-size", "7"],
        cwd=cwd, rc=2)
    check(len(open(m).readlines()) == 2, "a failed run changed the metrics")
    run(flags + ["--train-iters", "4", "--save", ck, "--save-interval", "2", "--load", ck],
        cwd=cwd)
    rows = open(m).readlines()
    check(len(rows) == 4 and '"iteration": 4' in rows[-1], "resume appends: %s" % rows)
    run(flags + ["--train-iters", "2", "--save", ck, "--save-interval", "2"], cwd=cwd)
    check(len(open(m).readlines()) == 2, "a fresh run starts the file again")
    tb = os.path.join(work, "tb")
    run(flags + ["--train-iters", "2", "--tensorboard-dir", tb], cwd=cwd)
    check(os.path.exists(os.path.join(tb, "mtron-metrics.jsonl")), "beside the event file")
    check(os.listdir(cwd) == [], "files appeared in the current directory: %s" % os.listdir(cwd))


def rank_pids(parent):
    """{rank: pid} of the processes mpirun started."""
    out = {}
    for pid in subprocess.run(["pgrep", "-P", str(parent)], stdout=subprocess.PIPE,
                              text=True).stdout.split():
        try:
            env = open("/proc/%s/environ" % pid, "rb").read().split(b"\0")
        except OSError:
            continue
        for e in env:
            if e.startswith(b"OMPI_COMM_WORLD_RANK="):
                out[int(e.split(b"=")[1])] = int(pid)
    return out


def case_timeout(work):
    cmd = mtron_run.mpi_prefix(2) + [MTRON, "train"] + TINY + [
        "--train-iters", "100000", "--distributed-timeout-minutes", "0.05", "--metrics-file",
        "/dev/null"]
    log = open(os.path.join(work, "log"), "w+")
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=mtron_run.env(),
                         start_new_session=True)
    try:
        deadline = time.time() + 60
        while "iteration" not in open(log.name).read():
            check(time.time() < deadline and p.poll() is None, "no iteration within 60 s")
            time.sleep(0.2)
        ranks = rank_pids(p.pid)
        check(0 in ranks, "rank pids: %s" % ranks)
        os.kill(ranks[0], signal.SIGSTOP)  # rank 1 now waits in a collective
        t0 = time.time()
        rc = p.wait(timeout=60)
        waited = time.time() - t0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    out = open(log.name).read()
    check(rc != 0, "the job did not fail")
    check("more than the timeout of 3 s (--distributed-timeout-minutes)" in out, out[-2000:])
    check(waited < 30, "the watchdog took %.0f s for a 3 s timeout" % waited)


def main():
    case = sys.argv[2]
    work = tempfile.mkdtemp(prefix="mtron_compat_")
    try:
        globals()["case_" + case](work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("%s: passed" % case)


if __name__ == "__main__":
    main()
