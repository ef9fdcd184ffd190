#!/usr/bin/python3
"""Writes the synthetic training logs `mtron doctor` is tested on (tests/plan/test_doctor.cpp).

Each log is a plausible Megatron (or mtron) run of a 1.7B GPT on 48 H100s with one planted
problem; healthy*.log have none. Deterministic (fixed seeds). Rerun after changing it:

  /usr/bin/python3 tests/plan/data/make_logs.py
"""
import math
import os
import random
import time

HERE = os.path.dirname(os.path.abspath(__file__))
T0 = 1717236000  # 2024-06-01 10:00:00 UTC
TRAIN_ITERS = 1000
GBS = 192
INTERVAL = 5

PREAMBLE = """using world size: 48, data-parallel size: 48, context-parallel size: 1, tensor-model-parallel size: 1, pipeline-model-parallel size: 1
------------------------ arguments ------------------------
  check_for_nan_in_loss_and_grad ................. True
  distributed_timeout_minutes ..................... 10
  global_batch_size ............................... 192
  hidden_size ..................................... 2048
  micro_batch_size ................................ 1
  num_layers ...................................... 24
  overlap_grad_reduce ............................. True
  seq_length ...................................... 4096
  use_distributed_optimizer ....................... True
-------------------- end of arguments ---------------------
> building GPT2BPETokenizer tokenizer ...
 > padded vocab (size: 131072) with 0 dummy tokens (new size: 131072)
Theoretical memory footprints: weight and optimizer=12345.67 MB, activation=20480.00 MB, total=32825.67 MB
"""


def stamp(t):
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))


def line(it, t, ms, tflops, lr, loss, scale, gnorm, skipped=0, nans=0, prefix=""):
    loss_s = "nan" if loss is None else f"{loss:.6E}"
    gnorm_s = "nan" if gnorm is None else f"{gnorm:.3f}"
    return (f"{prefix} [{stamp(t)}] iteration {it:8d}/{TRAIN_ITERS:8d} | consumed samples: "
            f"{it * GBS:12d} | elapsed time per iteration (ms): {ms:.1f} | throughput per GPU "
            f"(TFLOP/s/GPU): {tflops:.1f} | learning rate: {lr:.6E} | global batch size: "
            f"{GBS:5d} | lm loss: {loss_s} | loss scale: {scale:.1f} | grad norm: {gnorm_s} | "
            f"number of skipped iterations: {skipped:3d} | number of nan iterations: {nans:3d} |")


class Run:
    """A healthy run; hooks change one thing at a time."""

    def __init__(self, seed, prefix="", ms=1234.0, tflops=408.0, iters=TRAIN_ITERS):
        self.rng = random.Random(seed)
        self.prefix = prefix
        self.ms = ms
        self.tflops = tflops
        self.iters = iters
        self.t = T0 + 120

    def loss(self, it):
        return 3.0 + 7.8 * math.exp(-it / 120.0) + self.rng.gauss(0, 0.015)

    def lr(self, it):
        return 3e-4 * min(1.0, it / 100.0)

    def lines(self, loss=None, ms=None, extra=None, stop=None, scale=1.0, skipped=None,
              gnorm=None):
        out = []
        for it in range(INTERVAL, self.iters + 1, INTERVAL):
            if stop is not None and it > stop:
                break
            step_ms = (ms(it) if ms else self.ms) * (1 + self.rng.gauss(0, 0.01))
            self.t += INTERVAL * step_ms / 1000.0
            value = loss(it) if loss else self.loss(it)
            g = None if value is None else 0.8 + 0.3 * self.rng.random()
            if gnorm and g is not None:
                g = gnorm(it, g)
            tf = self.tflops * self.ms / step_ms
            s = skipped(it) if skipped else 0
            sc = scale(it) if callable(scale) else scale
            out.append(line(it, self.t, step_ms, tf, self.lr(it), value, sc, g, s,
                            1 if value is None else 0, self.prefix))
            if it == INTERVAL:
                out.append(f"{self.prefix}[Rank 0] (after {INTERVAL} iterations) memory (MB) | "
                           "allocated: 31877.2 | max allocated: 52011.6 | reserved: 56234.0 | "
                           "max reserved: 56234.0")
            if it % 100 == 0:
                out.append(f"{self.prefix}(min, max) time across ranks (ms):")
                fb = step_ms * INTERVAL * 0.97
                out.append(f"{self.prefix}    forward-backward ...............................:"
                           f" ({fb * 0.995:.2f}, {fb:.2f})")
                out.append(f"{self.prefix}    optimizer ......................................:"
                           f" ({step_ms * 0.02:.2f}, {step_ms * 0.021:.2f})")
            if extra:
                out.extend(extra(it, self))
        return out


def write(name, body, preamble=PREAMBLE):
    with open(os.path.join(HERE, name), "w") as f:
        f.write(preamble)
        f.write("\n".join(body) + "\n")


def main():
    write("healthy.log", Run(1).lines())

    # mtron's own format: the rank prefix on every line, one logging rank.
    write("healthy_mtron.log", Run(2, prefix="[mtron r3/4]").lines(),
          preamble="[mtron r0/4] mtron train: world 4 = TP 1 x CP 1 x DP 4 x PP 1\n")

    r = Run(3)
    body = r.lines(stop=60)
    body += [
        "Traceback (most recent call last):",
        '  File "pretrain_gpt.py", line 245, in <module>',
        "    pretrain(train_valid_test_datasets_provider, model_provider, ModelType.encoder_or_decoder,",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB. GPU 3 has a total "
        "capacity of 79.10 GiB of which 1.21 GiB is free. Including non-PyTorch memory, this process "
        "has 77.88 GiB memory in use. Of the allocated memory 74.12 GiB is allocated by PyTorch.",
        "E0601 10:02:11.123000 1234 torch/distributed/elastic/multiprocessing/api.py:826] failed "
        "(exitcode: 1) local_rank: 3 (pid: 5678) of binary: /usr/bin/python",
    ]
    write("oom.log", body)

    r = Run(4, prefix="[mtron r0/4]")
    body = r.lines(stop=20)
    body += ["[mtron r2/4] error: std::bad_alloc while allocating the activation stash "
             "(3.2 GiB) for micro-batch 4",
             "--------------------------------------------------------------------------",
             "mpirun noticed that process rank 2 with PID 0 on node cpu01 exited on signal 9 "
             "(Killed).",
             "--------------------------------------------------------------------------"]
    write("oom_mtron.log", body,
          preamble="[mtron r0/4] mtron train: world 4 = TP 2 x CP 1 x DP 2 x PP 1\n")

    r = Run(5)
    write("divergence.log", r.lines(loss=lambda it: (
        r.loss(it) if it <= 400 else 3.0 + 7.8 * math.exp(-400 / 120.0) + (it - 400) * 0.012 +
        r.rng.gauss(0, 0.02))))

    r = Run(6)
    spikes = {500: 2.6, 505: 1.9, 745: 2.2}
    write("loss_spike.log", r.lines(loss=lambda it: r.loss(it) + spikes.get(it, 0.0)))

    r = Run(7)
    write("nan.log", r.lines(loss=lambda it: None if it >= 620 else r.loss(it), stop=640))

    r = Run(8)
    write("skipped_fp16.log", r.lines(
        scale=lambda it: 2.0 ** max(0, 16 - (it // 150)),
        skipped=lambda it: 2 if it % 150 == 0 else 0))

    write("low_mfu.log", Run(9, ms=4100.0, tflops=122.0).lines())

    def straggler(it, run):
        if it % 50:
            return []
        return [f" 0: INFO:megatron.core.utils:[{stamp(run.t)}] | MnRtt/Rnk: 5123.08ms/8 | "
                f"MxRtt/Rnk: 6648.20ms/27 | MnPwr/Rnk: 601796W/8 | MxPwr/Rnk: 683801W/18 | "
                f"MnTmp/Rnk: 52C/0 | MxTmp/Rnk: 88C/27 | MnUtl/Rnk: 97%/8 | MxUtl/Rnk: 100%/6 | "
                f"MnClk/Rnk: 1350MHz/27 | MxClk/Rnk: 1980MHz/0 | MnEtpt/Rnk: 296.02TF/27 | "
                f"MxEtpt/Rnk: 387.32TF/8"]
    write("straggler.log", Run(10).lines(extra=straggler))

    # mtron with every rank logging its own step time: rank 2 is 30% slower.
    body = []
    runs = [Run(20 + k, prefix=f"[mtron r{k}/4]", ms=1234.0 * (1.3 if k == 2 else 1.0))
            for k in range(4)]
    per_rank = [run.lines(stop=300) for run in runs]
    for group in zip(*per_rank):
        body.extend(group)
    write("straggler_mtron.log", body,
          preamble="[mtron r0/4] mtron train: world 4 = TP 1 x CP 1 x DP 4 x PP 1\n")

    r = Run(11)
    body = r.lines(stop=120)
    t = r.t + 600
    body += [f"[rank3]:[E601 {time.strftime('%H:%M:%S', time.gmtime(t))}.123456000 "
             "ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: "
             "WorkNCCL(SeqNum=81234, OpType=_ALLGATHER_BASE, NumelIn=268435456, "
             "NumelOut=12884901888, Timeout(ms)=600000) ran for 600123 milliseconds before "
             "timing out.",
             f"[rank3]:[E601 {time.strftime('%H:%M:%S', time.gmtime(t))}.130000000 "
             "ProcessGroupNCCL.cpp:1413] [PG 0 Rank 3] Process group watchdog thread terminated "
             "with exception"]
    write("hang.log", body)

    r = Run(12)
    body = r.lines(stop=80)
    body += [f"slurmstepd: error: *** STEP 123456.0 ON node012 "
             f"CANCELLED AT {time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(r.t + 3 * 3600))} "
             "DUE TO TIME LIMIT ***"]
    write("hang_silent.log", body)

    r = Run(13)
    write("throughput_drop.log", r.lines(ms=lambda it: 1234.0 if it < 600 else 1790.0))

    # The gradient norm explodes from iteration 600 (x2 every 50 iterations) while the loss,
    # flat by then, creeps up 5%: below the loss-divergence threshold.
    r = Run(14)
    write("grad_explosion.log", r.lines(
        loss=lambda it: r.loss(it) * (1 + 0.05 * max(0, it - 600) / 400),
        gnorm=lambda it, g: g * 2.0 ** (max(0, it - 600) / 50)))


if __name__ == "__main__":
    main()
