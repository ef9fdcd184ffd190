#!/usr/bin/env bash
# Does `mtron plan`'s memory model predict mtron's own CPU runs? For each layout below: the
# plan's memory per rank (mtron plan --json, the layout fixed: memory_gib.total), then the
# measured one (the --emit mpirun script of that plan, run for a few iterations: the largest
# "peak memory (MB)" the iteration lines report, the process's peak RSS). Prints both and
# their ratio; passes when every layout is within 30%.
#
#   tests/plan/cpu_memory_check.sh path/to/mtron
set -euo pipefail
MTRON=$(readlink -f "$1")
ITERS=${ITERS:-6}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# Large enough that the model state and activations, not the process itself, dominate.
MODEL=(--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 512
       --max-position-embeddings 512 --vocab-size 50257)

# ranks | layout flags | precision
LAYOUTS=(
  "1|--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 8|--fp32"
  "1|--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 2|--bf16"
  "2|--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 4|--fp32"
  "2|--tensor-model-parallel-size 2 --pipeline-model-parallel-size 1 --micro-batch-size 8|--fp32"
  "2|--tensor-model-parallel-size 1 --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 1 --micro-batch-size 2|--fp32"
)
failed=0
for spec in "${LAYOUTS[@]}"; do
  IFS='|' read -r n layout prec <<< "$spec"
  common=(--hardware local-cpu --gpus "$n" "${MODEL[@]}" --global-batch-size 8 $layout $prec
          --calibration "$TMP/none.json" --context-parallel-size 1 --recompute-granularity none)
  "$MTRON" plan "${common[@]}" --json -o "$TMP/plan.json" 2>/dev/null
  predicted=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['plans'][0]['memory_gib']['total'])" "$TMP/plan.json")
  "$MTRON" plan "${common[@]}" --train-iters "$ITERS" --emit mpirun -o "$TMP/run.sh" 2>/dev/null
  (cd "$TMP" && bash run.sh > train.log 2>&1) || { echo "FAIL: training run failed ($spec)"; tail -5 "$TMP/train.log"; exit 1; }
  measured=$(/usr/bin/python3 - "$TMP/train.log" <<'PY'
import re, sys
mb = [float(m.group(1)) for m in re.finditer(r"peak memory \(MB\): ([0-9.]+)", open(sys.argv[1]).read())]
print(max(mb) / 1024 if mb else "nan")
PY
)
  ratio=$(/usr/bin/python3 -c "print(f'{float(\"$predicted\") / float(\"$measured\"):.3f}')")
  printf "%s ranks %-88s %s predicted %.3f GiB measured %.3f GiB ratio %s\n" "$n" "$layout" "$prec" "$predicted" "$measured" "$ratio"
  /usr/bin/python3 -c "import sys; sys.exit(0 if abs(float('$ratio') - 1) <= 0.30 else 1)" || failed=$((failed + 1))
done
echo "outside 30%: $failed of ${#LAYOUTS[@]} layouts"
[ "$failed" -eq 0 ]
