#!/usr/bin/env bash
# `mtron plan` and `mtron doctor` end to end: help, a plan, errors and their exit codes, the
# doctor's exit codes, a launch script bash accepts, and a quick calibration under mpirun that
# the planner then uses. Usage: cli_test.sh MTRON_BINARY DATA_DIR
set -euo pipefail
MTRON=$1
DATA=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Help is complete: every group and the key flags.
"$MTRON" plan --help > "$TMP/help"
for want in "--model" "--hardware" "--gpus" "--global-batch-size" "--tensor-model-parallel-size" \
            "--recompute-granularity" "--recompute-modules" "--emit" "--json" "--calibrate" "--num-layers" \
            "--group-query-attention" "--num-experts" "--memory-margin" "--no-distributed-optimizer"; do
  grep -q -- "$want" "$TMP/help" || fail "plan --help lacks $want"
done
"$MTRON" doctor --help | grep -q -- "--expected-tflops" || fail "doctor --help lacks --expected-tflops"
grep -q -- "--device" "$TMP/help" || fail "plan --help lacks --device (for --calibrate)"

# A plan, as a table and as JSON.
"$MTRON" plan --model llama2-13b --gpus 8 > "$TMP/plan.txt"
grep -q "TP2 PP1 CP1 DP4" "$TMP/plan.txt" || fail "13B on 8 GPUs is not TP2 DP4"
grep -q "why not:" "$TMP/plan.txt" || fail "no alternatives"
"$MTRON" plan --model llama2-13b --gpus 8 --json -o "$TMP/plan.json"
/usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1])); p=j['plans'][0]; assert p['layout']['tensor_model_parallel_size']==2; assert p['memory_gib']['total'] < p['memory_gib']['capacity']; assert 'parameters' not in p['memory_gib']; assert j['cluster']['peak_tflops']['fp8'] > j['cluster']['mfu_peak_tflops']" "$TMP/plan.json" \
  || fail "JSON plan"
grep -q "fp8 dense peak 1979" "$TMP/plan.txt" || fail "the table does not state the fp8 peak"

# Errors: one line, exit 2, naming what is known or what would fit.
set +e
"$MTRON" plan --model llama9 --gpus 8 2> "$TMP/err"; rc=$?
set -e
[ $rc -eq 2 ] || fail "unknown model exit code $rc"
grep -q "known:.*llama2-7b" "$TMP/err" || fail "unknown model message: $(cat "$TMP/err")"
set +e
"$MTRON" plan --model llama2-70b --gpus 8 --hardware h100 2> "$TMP/err"; rc=$?
set -e
[ $rc -eq 2 ] || fail "nothing fits exit code $rc"
grep -q "GPUs would fit" "$TMP/err" || fail "nothing-fits message: $(cat "$TMP/err")"
set +e
"$MTRON" plan --model llama2-7b --gpus 8 --hardware h1000 2> "$TMP/err"; rc=$?
set -e
[ $rc -eq 2 ] && grep -q "h100-sxm" "$TMP/err" || fail "unknown hardware message"
# Layout flags the planner does not take: refused by name, not ignored.
for flag in --microbatch-group-size-per-virtual-pipeline-stage --decoder-first-pipeline-num-layers; do
  set +e
  "$MTRON" plan --model llama2-7b --gpus 8 "$flag" 3 2> "$TMP/err"; rc=$?
  set -e
  [ $rc -eq 2 ] && grep -q -- "${flag%%-pipeline*}" "$TMP/err" || fail "$flag: exit $rc, $(cat "$TMP/err")"
done
# --recompute-modules: Megatron's names, selective recompute only, Megatron's rules; a plan with
# them names them (table and JSON).
expect_refused() {  # expect_refused PATTERN ARGS...: exit 2 and PATTERN in the message
  local pattern=$1 rc
  shift
  set +e
  "$MTRON" plan "$@" 2> "$TMP/err"; rc=$?
  set -e
  [ $rc -eq 2 ] && grep -q -- "$pattern" "$TMP/err" || fail "$*: exit $rc, $(cat "$TMP/err")"
}
expect_refused "invalid choice 'attn'.*core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts" \
  --model llama2-7b --gpus 8 --recompute-modules core_attn attn
expect_refused "applies to --recompute-granularity selective only (got --recompute-granularity full)" \
  --model llama2-7b --gpus 8 --recompute-granularity full --recompute-modules mlp
expect_refused "mla_up_proj in recompute_modules is only supported with multi_latent_attention" \
  --model llama2-7b --gpus 8 --recompute-modules mla_up_proj
expect_refused "Delayed scaling does not support moe_act and layernorm recompute for fp8" \
  --model mixtral-8x7b --gpus 64 --fp8-format hybrid --recompute-modules moe_act
"$MTRON" plan --model llama2-7b --gpus 8 --recompute-granularity selective --recompute-modules \
  layernorm mlp --json -o "$TMP/rm.json"
/usr/bin/python3 -c "import json,sys; p=json.load(open(sys.argv[1]))['plans'][0]; assert p['layout']['recompute_modules']==['layernorm','mlp'], p['layout']; assert p['name'].endswith('recompute-selective(layernorm mlp)'), p['name']" "$TMP/rm.json" \
  || fail "JSON plan with --recompute-modules"

# A fixed split: DeepSeek-V3 at Megatron-Bridge's published layout (the embedding and 1 layer, 30
# virtual stages of 2, the MTP layer and the loss over PP8 x VP4: 7, 8 x 6 and 6 layers per rank);
# a layout needs the pipeline size.
"$MTRON" plan --model deepseek-v3 --gpus 1024 --fp8-format hybrid --global-batch-size 8192 \
  --tensor-model-parallel-size 2 --pipeline-model-parallel-size 8 --expert-model-parallel-size 64 \
  --pipeline-model-parallel-layout "Et|(tt|)*30mL" > "$TMP/ds.txt"
grep -q "PP 8 interleaved x4: .*uneven stages 7/8x6/6 layers" "$TMP/ds.txt" \
  || fail "DeepSeek-V3 at its layout: $(head -20 "$TMP/ds.txt")"
set +e
"$MTRON" plan --model deepseek-v3 --gpus 1024 --pipeline-model-parallel-layout "Et|(tt|)*30mL" \
  2> "$TMP/err"; rc=$?
set -e
[ $rc -eq 2 ] && grep -q "needs --pipeline-model-parallel-size" "$TMP/err" \
  || fail "layout without PP: exit $rc, $(cat "$TMP/err")"

# The doctor: 1 with findings, 0 on a healthy log, JSON.
set +e
"$MTRON" doctor "$DATA/oom.log" > "$TMP/doc"; rc=$?
set -e
[ $rc -eq 1 ] && grep -q "out of memory" "$TMP/doc" || fail "doctor on oom.log (rc $rc)"
"$MTRON" doctor "$DATA/healthy.log" --hardware h100-sxm | grep -q "no problems found" \
  || fail "doctor on healthy.log"
# Information only (the fp16 loss-scale warm-up of a real log) is not a problem: exit 0.
"$MTRON" doctor "$DATA/real/megatron_60_fp16_warmup.log" > "$TMP/doc" \
  && grep -q "\[info\] fp16 loss-scale warm-up" "$TMP/doc" || fail "doctor on the fp16 warm-up"
set +e
"$MTRON" doctor "$DATA/real/megatron_792_crash_nccl.log" > "$TMP/doc"; rc=$?
set -e
[ $rc -eq 1 ] && grep -q "crash before the first logged iteration" "$TMP/doc" \
  || fail "doctor on a crash (rc $rc)"
set +e
"$MTRON" doctor "$DATA/healthy.log" --plan "$TMP/plan.json" --expected-tflops 900 --json > "$TMP/doc.json"; rc=$?
set -e
[ $rc -eq 1 ] && grep -q '"low_mfu"' "$TMP/doc.json" || fail "doctor --expected-tflops"

# A launch script for a small CPU model: bash accepts it.
"$MTRON" plan --hardware local-cpu --gpus 2 --num-layers 2 --hidden-size 64 \
  --num-attention-heads 4 --seq-length 64 --vocab-size 512 --global-batch-size 4 --fp32 \
  --calibration "$TMP/none.json" --emit mpirun -o "$TMP/run.sh"
bash -n "$TMP/run.sh" || fail "mpirun script does not parse"
grep -q "mpirun -np 2" "$TMP/run.sh" || fail "mpirun line"
grep -q "train" "$TMP/run.sh" || fail "train"

# Calibration under MPI (quick), then a CPU plan from it. (Open MPI's plugins leak at exit
# and are unloaded before LeakSanitizer can name them: no leak check for this one command in
# the sanitizer build.)
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 \
mpirun --allow-run-as-root --oversubscribe -np 2 -x ASAN_OPTIONS "$MTRON" plan --calibrate --calibrate-quick \
  --calibration "$TMP/cal.json" > "$TMP/cal.out"
grep -q "MPI collectives: bus bandwidth" "$TMP/cal.out" || fail "calibration output: $(cat "$TMP/cal.out")"
"$MTRON" plan --hardware local-cpu --gpus 2 --num-layers 2 --hidden-size 64 \
  --num-attention-heads 4 --seq-length 64 --vocab-size 512 --global-batch-size 4 --fp32 \
  --calibration "$TMP/cal.json" > "$TMP/cpu_plan.txt"
grep -q "calibration $TMP/cal.json" "$TMP/cpu_plan.txt" || fail "the CPU plan did not use the calibration"
echo "cli_test: all passed"
