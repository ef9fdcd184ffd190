#!/usr/bin/env bash
# bench/train_step/run.sh [ITERS] [ROUNDS]: a GPT-2 124M training step (12 layers, hidden 768,
# 12 heads, vocab 50257 (padded 50304), seq 1024, micro-batch 4) in mtron and in PyTorch on
# this machine, fp32 and bf16, side by side: the four runs alternate for ROUNDS rounds and each
# figure is the median. Prints tokens/s, GFLOP/s by Megatron's formula, the ratios mtron/PyTorch,
# and mtron's per-op profile of the last round.
# MTRON_ISAS (default "best"): the SIMD/GEMM levels mtron runs at, each as its own pair of runs in
# the same rounds, e.g. MTRON_ISAS="best avx2" (`best` runs without MTRON_CPU_ISA).
set -euo pipefail
cd "$(dirname "$0")/../.."
iters=${1:-3}
rounds=${2:-2}
mtron=${MTRON:-build/cpu-release/apps/mtron}
py=/usr/bin/python3
threads=$(nproc)
shape="--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024
       --max-position-embeddings 1024 --micro-batch-size 4 --global-batch-size 4 --lr 1e-4
       --mock-data --vocab-size 50257 --metrics-file /dev/null --log-interval 1 --eval-iters 0
       --hidden-dropout 0 --attention-dropout 0"  # the PyTorch step has no dropout
# Megatron's FLOPs per step (forward + backward): 72 B s L h^2 (1 + s/(12h) + V/(12 L h)).
flops=$(awk 'BEGIN { B=4; s=1024; L=12; h=768; V=50304;
                     printf "%.6e", 72*B*s*L*h*h*(1 + s/(12*h) + V/(12*L*h)) }')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

isas=${MTRON_ISAS:-best}
for isa in $isas; do
  [ "$isa" = best ] || MTRON_CPU_ISA=$isa "$mtron" --version >/dev/null ||
    { echo "MTRON_ISAS: $isa is not available on this CPU" >&2; exit 2; }
done
# OpenBLAS takes its kernels from OPENBLAS_CORETYPE where it is set, and a value inherited from
# the environment may not fit this CPU (a Haswell setting on an AVX-512 CPU): mtron runs without
# it and chooses for itself, PyTorch gets the kernels mtron chose at its best level.
core=$(env -u OPENBLAS_CORETYPE "$mtron" --version 2>/dev/null |
  sed -n 's/.*GEMM fp32 OpenBLAS (\([A-Za-z0-9_]*\) kernels).*/\1/p')
mtron_run() {  # isa precision round
  local extra="" log="$tmp/mtron-$1_$2_$3.log"
  [ "$2" = bf16 ] && extra="--bf16"
  # iteration 1 warms up; the profile covers iterations 2..N
  if [ "$1" = best ]; then
    env -u OPENBLAS_CORETYPE "$mtron" train $shape $extra --train-iters $((iters + 1)) --profile \
      >"$log" 2>&1
  else
    env -u OPENBLAS_CORETYPE MTRON_CPU_ISA="$1" "$mtron" train $shape $extra \
      --train-iters $((iters + 1)) --profile >"$log" 2>&1
  fi
  # median of the per-iteration times after the first
  grep -o "elapsed time per iteration (ms): [0-9.]*" "$log" | tail -n +2 |
    awk '{print $NF/1000}' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}
torch_run() {
  env -u OPENBLAS_CORETYPE ${core:+OPENBLAS_CORETYPE=$core} \
    "$py" bench/train_step/torch_gpt2.py --precision "$1" --iters "$iters" --threads "$threads" |
    awk '{print $4}'
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "GPT-2 124M step (B 4, T 1024), $threads threads, $iters timed iterations x $rounds rounds"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "PyTorch's OpenBLAS kernels: ${core:-its own choice} (OPENBLAS_CORETYPE)"
for r in $(seq "$rounds"); do
  for p in fp32 bf16; do
    for isa in $isas; do mtron_run "$isa" "$p" "$r" >>"$tmp/mtron-${isa}_$p"; done
    torch_run "$p" >>"$tmp/torch_$p"
  done
done
printf "\n%-16s %10s %12s %10s\n" "run" "step (s)" "tokens/s" "GFLOP/s"
row() {  # label file
  local s
  s=$(median <"$2")
  printf "%-16s %10.3f %12.1f %10.1f\n" "$1" "$s" "$(awk -v s="$s" 'BEGIN{print 4096/s}')" \
    "$(awk -v s="$s" -v f="$flops" 'BEGIN{print f/s/1e9}')"
}
for p in fp32 bf16; do
  for isa in $isas; do row "mtron $isa $p" "$tmp/mtron-${isa}_$p"; done
  row "torch $p" "$tmp/torch_$p"
  for isa in $isas; do
    echo "ratio mtron $isa/PyTorch $p: $(awk -v a="$(median <"$tmp/torch_$p")" \
      -v b="$(median <"$tmp/mtron-${isa}_$p")" 'BEGIN{printf "%.2fx", a/b}')"
  done
done
for isa in $isas; do
  echo
  for p in fp32 bf16; do
    echo "mtron $isa $p: $(grep -m1 -o 'mtron [0-9].*' "$tmp/mtron-${isa}_${p}_$rounds.log")"
    echo "mtron $isa $p: $(grep -o 'MFU against .*' "$tmp/mtron-${isa}_${p}_$rounds.log")"
  done
done
for isa in $isas; do
  for p in fp32 bf16; do
    echo
    echo "mtron $isa $p profile (last round):"
    sed -n '/profile of iterations/,$p' "$tmp/mtron-${isa}_${p}_$rounds.log" | tail -n +2
  done
done
