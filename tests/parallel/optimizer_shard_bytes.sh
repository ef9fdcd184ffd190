#!/usr/bin/env bash
# optimizer_shard_bytes.sh MTRON: with the distributed optimizer at DP 4, the optimizer state
# each rank holds (Adam's moments, as the trainer logs it) is at most 1/4 of DP 1's plus the
# bucket padding (ParamBuffer pads each bucket to a multiple of 64 x DP elements: < 64 elements
# per rank and bucket; the default bucket size gives one bucket, plus one for a tied embedding),
# and the shards cover the whole model (DP x a shard is at least DP 1's). Every DP rank holds the
# same share of each bucket by construction; the trainer logs it on the ranks that log (rank 0
# and the last stage's first rank), and all of those lines are checked.
set -euo pipefail
mtron=$1
tiny="--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 2
      --global-batch-size 8 --train-iters 1 --lr 1e-3 --mock-data --vocab-size 500
      --metrics-file /dev/null --eval-iters 0"
bytes() {  # bytes NP FLAGS...: the "optimizer state" bytes logged by every rank, one per line
  local np=$1
  shift
  timeout -k 5 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" \
    "$mtron" train $tiny "$@" 2>&1 | grep -o 'optimizer state: .* (\([0-9]*\) bytes)' |
    grep -o '([0-9]* bytes)' | tr -dc '0-9\n'
}
one=$(bytes 1)
mapfile -t four < <(bytes 4 --use-distributed-optimizer)
[ ${#four[@]} -ge 1 ] || { echo "FAIL: no optimizer-state line from the DP 4 run"; exit 1; }
max=0
for b in "${four[@]}"; do
  [ "$b" -gt "$max" ] && max=$b
done
sum=$((4 * four[0]))
# Adam's two fp32 moments: 8 bytes per element; < 64 padding elements in each of <= 2 buckets.
limit=$((one / 4 + 8 * 64 * 2))
echo "DP1: $one bytes; DP4 distributed optimizer, logged per rank: ${four[*]} (max $max, x4 $sum);" \
  "limit 1/4 + padding = $limit; ratio max/DP1 = $(awk -v a="$max" -v b="$one" 'BEGIN{printf "%.4f", a/b}')"
[ "$max" -le "$limit" ] || { echo "FAIL: a rank holds more than 1/4 plus padding"; exit 1; }
[ "$sum" -ge "$one" ] || { echo "FAIL: the shards do not cover the model"; exit 1; }
echo ok
