#!/usr/bin/env bash
# Regenerates the launch-script examples of this folder with `mtron plan --emit`.
# Usage: examples/regenerate.sh path/to/mtron
set -euo pipefail
MTRON=$1
cd "$(dirname "$0")"
DATA=(--data-path /data/redpajama_text_document --tokenizer-type Llama2Tokenizer
      --tokenizer-model /data/tokenizer.model --split 99,1,0)
RUN=(--train-iters 500000 --lr 1.5e-4 --min-lr 1.5e-5 --lr-warmup-iters 2000
     --eval-interval 1000 --eval-iters 10)
"$MTRON" plan --model llama2-70b --gpus 64 "${DATA[@]}" "${RUN[@]}" --mtron mtron \
  --job-name llama2-70b --time 48:00:00 --emit sbatch -o llama2-70b-64xh100.sbatch
"$MTRON" plan --model llama2-70b --gpus 64 "${DATA[@]}" "${RUN[@]}" --mtron mtron \
  --emit srun -o llama2-70b-64xh100-srun.sh
"$MTRON" plan --model llama3-8b --gpus 8 --global-batch-size 128 --train-iters 100000 \
  --mtron mtron --job-name llama3-8b --emit sbatch -o llama3-8b-8xh100.sbatch
# The CPU example uses the catalog's CPU estimates (no calibration), so it does not depend on
# the machine that regenerates it beyond its core count.
"$MTRON" plan --hardware local-cpu --gpus 4 --num-layers 4 --hidden-size 256 \
  --num-attention-heads 4 --seq-length 256 --vocab-size 50257 --global-batch-size 16 --fp32 \
  --train-iters 20 --calibration /nonexistent --mtron mtron --emit mpirun -o gpt-small-cpu-4ranks.sh
