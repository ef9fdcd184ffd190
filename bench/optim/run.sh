#!/bin/bash
# Muon's step on GPT-2 124M's four matrices of a layer, mtron against PyTorch (Debian's
# python3-torch), bf16 and fp32 Newton-Schulz, ROUNDS rounds each (default 5); prints every round,
# then the median of each. Usage: bench/optim/run.sh [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bench=${MTRON_BENCH_DIR:-$here/../../build/cpu-release/bench}
rounds=${1:-5}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for prec in bf16 fp32; do
  "$bench/optim/muon_bench" "$rounds" "$prec" | tee -a "$out"
  /usr/bin/python3 "$here/muon_torch.py" "$rounds" "$prec" | tee -a "$out"
done
/usr/bin/python3 - "$out" <<'PY'
import collections, statistics, sys
t = collections.defaultdict(list)
for line in open(sys.argv[1]):
    w = line.split()
    t[w[0] + " " + w[1]].append((float(w[4]), float(w[6])))
for k, v in t.items():
    s = statistics.median(x[0] for x in v)
    print("%-11s median %.4f s  %.1f GFLOP/s" % (k, s, statistics.median(x[1] for x in v)))
PY
