#!/usr/bin/env bash
# bad_layout.sh MTRON: each invalid parallel combination, under mpirun, must print Megatron's
# message once ("[mtron rR/N] error: ..."), exit 2 and end within 5 s.
set -u
mtron=$1
tiny="--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 2
      --train-iters 3 --lr 1e-3 --mock-data --vocab-size 500 --metrics-file /dev/null"
fails=0
check() {  # check NP REGEX FLAGS...
  local np=$1 regex=$2
  shift 2
  local out start end rc errors
  out=$(mktemp)
  start=$(date +%s%3N)
  timeout -k 5 30 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" \
    "$mtron" train $tiny "$@" >"$out" 2>&1
  rc=$?
  end=$(date +%s%3N)
  errors=$(grep -c "^\[mtron r[0-9]*/$np\] error: " "$out")
  local why=""
  [ $rc -eq 2 ] || why="exit code $rc, want 2"
  [ -z "$why" ] && [ "$errors" -ne 1 ] && why="$errors error lines, want 1"
  [ -z "$why" ] && ! grep -Eq -- "error: $regex" "$out" && why="message does not match /$regex/"
  [ -z "$why" ] && [ $((end - start)) -gt 5000 ] && why="took $((end - start)) ms, want <= 5000"
  if [ -n "$why" ]; then
    echo "FAIL (np $np $*): $why"; cat "$out"; fails=$((fails + 1))
  else
    echo "ok   (np $np, $((end - start)) ms): $(grep "error: " "$out" | head -1)"
  fi
  rm -f "$out"
}

check 4 "world_size \(4\) is not divisible by tensor_model_parallel_size \(3\)" \
  --tensor-model-parallel-size 3
check 4 "num_attention_heads \(6\) must be a multiple of tensor_model_parallel_size \(4\)" \
  --tensor-model-parallel-size 4 --num-attention-heads 6 --hidden-size 72
check 2 "num_query_groups \(1\) must be a multiple of tensor_model_parallel_size \(2\)" \
  --tensor-model-parallel-size 2 --group-query-attention --num-query-groups 1
check 2 "global batch size \(3\) is not divisible by micro batch size \(2\) times data parallel size \(2\)" \
  --global-batch-size 3
check 3 "Number of layers \(4\) should be divisible by the pipeline-model-parallel size \(3\)" \
  --pipeline-model-parallel-size 3
check 2 "number of layers per pipeline stage \(2\) must be divisible by number of layers per virtual pipeline stage \(3\)" \
  --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 3
check 2 "pipeline-model-parallel size should be greater than 1 with interleaved schedule" \
  --num-layers-per-virtual-pipeline-stage 1 --global-batch-size 4
check 2 "The remainder of M \(the total micro-batches\) divided by N \(number of contiguous micro-batches in a virtual pipeline stage\) should be 0, or larger than or equal to the pipeline-parallel size, but it is 1 \(M = 3, N = 2\)" \
  --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 --global-batch-size 6
check 2 "The number of contiguous micro-batches in a virtual pipeline stage should range in \[PP=2 , M=3\]" \
  --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 --global-batch-size 6 \
  --microbatch-group-size-per-virtual-pipeline-stage 4
check 2 "--overlap-param-gather only supported with distributed optimizer" --overlap-param-gather
# Context and expert parallelism.
check 2 "seq-length \(30\) should be a multiple of 2 \* context-parallel-size \(4\) if context-parallel-size > 1" \
  --context-parallel-size 2 --seq-length 30
check 4 "Number of experts \(6\) should be a multiple of expert model parallel_size \(4\)" \
  --num-experts 6 --expert-model-parallel-size 4 --disable-bias-linear
check 2 "world_size \(2\) is not divisible by expert_tensor_parallel_size \(1\) x expert_model_parallel_size \(4\)" \
  --num-experts 8 --expert-model-parallel-size 4 --disable-bias-linear
check 2 "num_experts must be non None to use expert model parallelism" --expert-model-parallel-size 2
check 2 "During training, performance may degrade if MoE and tensor parallelism are enabled without also enabling sequence parallelism" \
  --tensor-model-parallel-size 2 --num-experts 4 --disable-bias-linear
check 4 "moe_ffn_hidden_size \(90\) must be a multiple of expert_tensor_parallel_size \(4\)" \
  --num-experts 4 --moe-ffn-hidden-size 90 --expert-tensor-parallel-size 4 --disable-bias-linear
check 1 "--num-experts: experts with biases are not supported yet" --num-experts 4
check 1 "--mtp-num-layers with --position-embedding-type learned_absolute is not supported" \
  --mtp-num-layers 1
[ $fails -eq 0 ] && echo "all bad layouts rejected" || { echo "$fails failures"; exit 1; }
