#!/usr/bin/python3
"""Exact resume and resharding, end to end with `mtron train` (docs/checkpoints.md).

  resume_test.py exact MTRON TOOL WORKDIR NP ARCH [FLAGS...]
      20 iterations straight (saving at 20) versus 10 iterations + save + exit, then a new
      process that loads and trains 10 more (saving at 20), both under `mpirun -np NP` with the
      layout FLAGS. Requires every iteration's loss, grad norm, learning rate, loss scale and
      skipped count to be identical and the two final checkpoints (weights, Adam moments) to be
      bit-identical tensor by tensor.
  resume_test.py reshard MTRON WORKDIR NP ARCH [FLAGS...]
      loads the iteration-10 checkpoint an `exact` run left in WORKDIR under another layout and
      trains to 20: every loss must match that run's (un-resharded) continuation, rel <= 1e-5.
MoE models (ARCH moe): exact also requires identical auxiliary losses and routing checksums;
reshard requires the auxiliary losses within rel 1e-5 and the same routed (token, expert) pairs.
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ckpt_common import ARCH, COMMON, MOE_KEYS, read_metrics, train  # noqa: E402

TOL = 1e-5


def progress_state(root):
    """(optimizer.grad_scaler, lr_scheduler.num_samples) of the latest checkpoint in root."""
    with open(os.path.join(root, "latest_checkpointed_iteration.txt")) as f:
        it = int(f.read())
    with open(os.path.join(root, "iter_%07d" % it, "manifest.json")) as f:
        m = json.load(f)
    return (m["optimizer"] or {}).get("grad_scaler"), m["lr_scheduler"]["num_samples"]


def exact(mtron, tool, work, np_, arch, flags):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    base = COMMON + ARCH[arch] + ["--train-iters", "20"] + flags
    straight, _ = train(mtron, np_, base + ["--save", work + "/straight", "--save-interval", "20"],
                        work + "/straight.jsonl")
    first, out1 = train(mtron, np_, base + ["--save", work + "/split", "--save-interval", "10",
                                            "--exit-interval", "10"], work + "/first.jsonl")
    assert "exiting program at iteration 10" in out1, out1
    second, out2 = train(mtron, np_, base + ["--load", work + "/split", "--save", work + "/split",
                                             "--save-interval", "20"], work + "/second.jsonl")
    assert "(iteration 10, saved under" in out2, out2
    split = first + second
    assert [r["iteration"] for r in straight] == list(range(1, 21)), straight
    assert [r["iteration"] for r in split] == list(range(1, 21)), split
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
    print("scaler and schedule at 20: straight %s, resumed %s" % tuple(state))
    bad += state[0] != state[1]
    print("exact resume np %d %s %s: %d iterations differ; final checkpoints %s" %
          (np_, arch, " ".join(flags), bad, "bit-identical" if p.returncode == 0 else "DIFFER"))
    return 0 if bad == 0 and p.returncode == 0 else 1


def reshard(mtron, work, np_, arch, flags):
    ref = read_metrics(work + "/second.jsonl")
    assert len(ref) == 10, "run the exact test first (fixture)"
    tag = "_".join(f.strip("-") for f in flags) or "np1"
    rows, out = train(mtron, np_, COMMON + ARCH[arch] + ["--train-iters", "20", "--load",
                                                         work + "/split/iter_0000010"] + flags,
                      work + "/reshard_%d_%s.jsonl" % (np_, tag))
    assert "(iteration 10, saved under" in out, out
    assert [r["iteration"] for r in rows] == list(range(11, 21)), rows
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
    print("reshard to np %d %s: worst rel %.2e (tol %.0e)%s" % (
        np_, " ".join(flags), worst, TOL,
        "; %d iterations routed other pairs" % routing if "moe_routing_hash" in ref[0] else ""))
    return 0 if worst <= TOL and routing == 0 else 1


def main():
    mode = sys.argv[1]
    if mode == "exact":
        mtron, tool, work, np_, arch = sys.argv[2:7]
        return exact(mtron, tool, work, int(np_), arch, sys.argv[7:])
    mtron, work, np_, arch = sys.argv[2:6]
    return reshard(mtron, work, int(np_), arch, sys.argv[6:])


if __name__ == "__main__":
    sys.exit(main())
