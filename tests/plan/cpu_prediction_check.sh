#!/usr/bin/env bash
# After `--calibrate`, does `mtron plan` predict mtron's own CPU runs? For each layout below:
# the plan's predicted step time (mtron plan --json, with the layout fixed), then the measured
# one (the --emit mpirun script of that plan, run for a few iterations: median "elapsed time
# per iteration (ms)" after the first 3). Passes when at least 5 of the 7 layouts are within
# 25%.
#
#   tests/plan/cpu_prediction_check.sh path/to/mtron [calibration.json]
#
# Needs `mtron train` (the trainer) with Megatron's flags, --mock-data and NullTokenizer. The
# calibration is measured first for 1, 2 and 4 ranks when the file lacks them.
set -euo pipefail
MTRON=$(readlink -f "$1")
CAL=${2:-$(mktemp -d)/calibration.json}
ITERS=${ITERS:-12}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
MODEL=(--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 256
       --max-position-embeddings 256 --vocab-size 50257)
ROOT=(); [ "$(id -u)" = 0 ] && ROOT=(--allow-run-as-root)

for n in 1 2 4; do
  if ! /usr/bin/python3 -c "import json,sys; e=json.load(open(sys.argv[1]))['entries']; sys.exit(0 if any(x['ranks_per_node']==$n for x in e) else 1)" "$CAL" 2>/dev/null; then
    if [ "$n" = 1 ]; then "$MTRON" plan --calibrate --calibration "$CAL"
    else mpirun "${ROOT[@]}" --oversubscribe --bind-to none -np "$n" "$MTRON" plan --calibrate --calibration "$CAL"; fi
  fi
done

# ranks | layout flags | precision
LAYOUTS=(
  "1|--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 8|--fp32"
  "1|--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 8|--bf16"
  "2|--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 4|--fp32"
  "2|--tensor-model-parallel-size 2 --pipeline-model-parallel-size 1 --micro-batch-size 8|--fp32"
  "2|--tensor-model-parallel-size 1 --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 1 --micro-batch-size 2|--fp32"
  "4|--tensor-model-parallel-size 2 --pipeline-model-parallel-size 1 --micro-batch-size 4|--fp32"
  "4|--tensor-model-parallel-size 1 --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 1 --micro-batch-size 2|--fp32"
)
worst=0
within=0
for spec in "${LAYOUTS[@]}"; do
  IFS='|' read -r n layout prec <<< "$spec"
  common=(--hardware local-cpu --gpus "$n" "${MODEL[@]}" --global-batch-size 8 $layout $prec
          --calibration "$CAL" --context-parallel-size 1 --recompute-granularity none)
  "$MTRON" plan "${common[@]}" --json -o "$TMP/plan.json" 2>/dev/null
  predicted=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['plans'][0]['time_s']['step'])" "$TMP/plan.json")
  "$MTRON" plan "${common[@]}" --train-iters "$ITERS" --emit mpirun -o "$TMP/run.sh" 2>/dev/null
  (cd "$TMP" && bash run.sh > train.log 2>&1) || { echo "FAIL: training run failed ($spec)"; tail -5 "$TMP/train.log"; exit 1; }
  measured=$(/usr/bin/python3 - "$TMP/train.log" <<'PY'
import re, statistics, sys
ms = [float(m.group(1)) for m in re.finditer(r"elapsed time per iteration \(ms\): ([0-9.]+)", open(sys.argv[1]).read())]
print(statistics.median(ms[3:]) / 1000 if len(ms) > 4 else "nan")
PY
)
  ratio=$(/usr/bin/python3 -c "print(f'{float(\"$predicted\") / float(\"$measured\"):.3f}')")
  printf "%-4s ranks %-90s %s predicted %.3f s measured %.3f s ratio %s\n" "$n" "$layout" "$prec" "$predicted" "$measured" "$ratio"
  worst=$(/usr/bin/python3 -c "print(round(max($worst, abs(float('$ratio') - 1)), 3))")
  within=$(/usr/bin/python3 -c "print($within + (abs(float('$ratio') - 1) <= 0.25))")
done
echo "within 25%: $within of ${#LAYOUTS[@]} layouts; worst relative error: $worst"
[ "$within" -ge 5 ]
