#!/usr/bin/env bash
# The planner's launch scripts run as written: for ten catalog plans and the three launchers
# (mpirun, srun, sbatch), `mtron plan --emit` writes a script, which is then executed with
# stand-in launchers on PATH (tests/e2e/launchers: they run its `mtron train` line once, with
# --print-layout --world-size N appended, and srun requires --mpi=pmix), so mtron train's own
# parser checks every flag of every script at the script's world size. GPU scripts must select
# --device cuda. The committed examples/ and a fresh regeneration of them are checked the same
# way. GPT-3 plans with its dropout (0.1, the default) and Mixtral with expert parallelism, which
# --device cuda runs; DeepSeek-V3 at Megatron-Bridge's pipeline layout and Llama 3.1 405B with the
# embedding and loss counted as layers: the fixed splits reach the script. DeepSeek-V3 at
# Megatron-Bridge's recompute (--recompute-modules mla_up_proj mlp) and Mixtral with moe_act,
# layernorm and shared_experts: the modules (and moe_act's --moe-grouped-gemm) reach the script.
# Usage: emit_roundtrip.sh MTRON_BINARY
set -euo pipefail
MTRON=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export PATH="$ROOT/tests/e2e/launchers:$PATH" MTRON HOSTFILE=/dev/null

# Runs a launch script as written; the sbatch allocation's size comes from its #SBATCH lines.
run_script() {
  local script=$1 out=$2 nodes per
  nodes=$(sed -n 's/^#SBATCH --nodes=//p' "$script")
  per=$(sed -n 's/^#SBATCH --ntasks-per-node=//p' "$script")
  SLURM_NNODES=${nodes:-1} SLURM_NTASKS_PER_NODE=${per:-1} bash "$script" > "$out" 2>&1 \
    || fail "$script: $(tail -5 "$out")"
  grep -q "Theoretical memory footprints" "$out" || fail "$script did not reach mtron train: $(cat "$out")"
}

plans=(
  "llama2-7b --gpus 8"
  "llama3-8b --gpus 16"
  "llama2-70b --gpus 64"
  "gpt3-175b --gpus 128"
  "mixtral-8x7b --gpus 64"
  "gpt2-124m --hardware local-cpu --gpus 4 --global-batch-size 8 --fp32 --calibration /nonexistent"
  "deepseek-v3 --gpus 1024 --global-batch-size 8192 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 8 --expert-model-parallel-size 64 --pipeline-model-parallel-layout Et|(tt|)*30mL"
  "llama3.1-405b --gpus 1024 --global-batch-size 512 --tensor-model-parallel-size 8 --pipeline-model-parallel-size 8 --context-parallel-size 2 --num-virtual-stages-per-pipeline-rank 8 --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split"
  "deepseek-v3 --gpus 1024 --global-batch-size 8192 --fp8-format hybrid --memory-margin 0 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 8 --expert-model-parallel-size 64 --pipeline-model-parallel-layout Et|(tt|)*30mL --recompute-modules mla_up_proj mlp"
  "mixtral-8x7b --gpus 64 --recompute-modules moe_act layernorm shared_experts"
)
n=0
for p in "${plans[@]}"; do
  read -r -a args <<< "$p"
  for launcher in mpirun srun sbatch; do
    script=$TMP/$n.sh
    "$MTRON" plan --model "${args[@]}" --emit "$launcher" --mtron "$MTRON" -o "$script" 2> /dev/null \
      || fail "mtron plan --model $p --emit $launcher"
    case "$p" in
      *local-cpu*) ! grep -q -- "--device cuda" "$script" || fail "$p: a CPU plan selects --device cuda" ;;
      *) grep -q -- "--device cuda" "$script" || fail "$p: no --device cuda in $script" ;;
    esac
    case "$p" in
      *layout*) grep -q -- "--pipeline-model-parallel-layout 'Et|(tt|)\*30mL'" "$script" \
        || fail "$p: no layout in $script" ;;
      *account*) grep -q -- "--account-for-loss-in-pipeline-split" "$script" \
        || fail "$p: no --account-for-loss-in-pipeline-split in $script" ;;
    esac
    case "$p" in
      *recompute-modules*) modules=${p##*--recompute-modules }
        grep -q -- "--recompute-granularity selective" "$script" \
          && grep -q -- "--recompute-modules $modules\$" "$script" \
          || fail "$p: no --recompute-modules $modules in $script" ;;
    esac
    case "$p" in
      *moe_act*) grep -q -- "--moe-grouped-gemm" "$script" || fail "$p: no --moe-grouped-gemm" ;;
    esac
    run_script "$script" "$TMP/$n.out"
    n=$((n + 1))
  done
done
[ $n -eq 30 ] || fail "$n scripts"

# The examples as committed, and regenerated.
cp -r "$ROOT/examples" "$TMP/regenerated"
bash "$TMP/regenerated/regenerate.sh" "$MTRON" 2> /dev/null || fail "examples/regenerate.sh"
count=0
for dir in "$ROOT/examples" "$TMP/regenerated"; do
  for script in "$dir"/*.sh "$dir"/*.sbatch; do
    [ "$(basename "$script")" = regenerate.sh ] && continue
    run_script "$script" "$TMP/example.out"
    count=$((count + 1))
  done
done
[ $count -ge 6 ] || fail "only $count examples"
echo "emit_roundtrip: $n emitted scripts and $count examples parse in mtron train"
