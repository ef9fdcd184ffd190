#!/usr/bin/env bash
# Launch scripts in the style of Megatron-LM's examples (GPT-3 175B, Llama-3 8B, Mixtral 8x7B;
# megatron_scripts/), launcher line replaced by `mtron train`, run as written: each passes
# --print-layout at its world size (the stand-in mpirun of launchers/ adds --print-layout
# --world-size N) without reading any of the files it names, and the Llama-3 one trains 20 steps
# on mock data with a tiny model appended to its flags (a flag given twice takes its last value).
# FP8 comes with mtron's precision work: the Llama-3 script runs here with DTYPE=bf16; the GPT-3
# one with its own --fp16. Usage: megatron_scripts_test.sh MTRON_BINARY
set -euo pipefail
MTRON=$1
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export MTRON PATH="$HERE/launchers:$PATH"
cd "$TMP"
S=$HERE/megatron_scripts

bash "$S/gpt3_175b.sh" /nonexistent/ck /nonexistent/tb /nonexistent/vocab.json \
  /nonexistent/merges.txt /nonexistent/data_text_document > gpt3.out 2>&1 || fail "gpt3: $(cat gpt3.out)"
grep -q "world 128 = TP 8 x CP 1 x DP 1 x PP 16" gpt3.out || fail "gpt3 layout: $(cat gpt3.out)"
grep -q "step schedule 0:16 1171875:320 2343750:624" gpt3.out || fail "gpt3 batch schedule"
grep -q "Theoretical memory footprints" gpt3.out || fail "gpt3 memory report"
grep -q "vocabulary assumed 50257" gpt3.out || fail "gpt3 vocabulary note"
grep -q "no --tokenizer-type: GPT2BPETokenizer" gpt3.out || fail "gpt3: the tokenizer of the BPE files"

DTYPE=bf16 bash "$S/llama3_8b.sh" ck/llama tb/llama MOCK MOCK > llama.out 2>&1 || fail "llama: $(cat llama.out)"
grep -q "world 8 = TP 1 x CP 1 x DP 8 x PP 1" llama.out || fail "llama layout: $(cat llama.out)"
grep -q "15258789 iterations" llama.out || fail "llama: --train-samples 1953125000 / 128"
for note in "--manual-gc has no effect" "--num-workers 1 has no effect" "--ckpt-format torch_dist has no effect" \
            "--calculate-per-token-loss has no effect"; do
  grep -q -- "note: $note" llama.out || fail "llama: no note '$note'"
done

bash "$S/mixtral_8x7b.sh" /nonexistent/ck /nonexistent/tokenizer.model /nonexistent/data \
  > mixtral.out 2>&1 || fail "mixtral: $(cat mixtral.out)"
grep -q "world 32 = TP 1 x CP 1 x DP 8 x PP 4; experts ETP 1 x EP 8 x EDP 1" mixtral.out \
  || fail "mixtral layout: $(cat mixtral.out)"
grep -q "vocabulary assumed 32000" mixtral.out || fail "mixtral vocabulary note"
WANDB_API_KEY=x bash "$S/mixtral_8x7b.sh" ck tok data > wandb.out 2>&1 || fail "mixtral with W&B: $(cat wandb.out)"
grep -q -- "note: --wandb-project Mixtral: mtron does not talk to Weights & Biases; the last rank writes the scalars W&B would get to ck/wandb as TensorBoard event files" wandb.out \
  || fail "mixtral with W&B: no note: $(cat wandb.out)"

# The Llama-3 script trains, one process, a tiny model appended (20 steps of 4 samples).
TINY=(--num-layers 2 --hidden-size 64 --ffn-hidden-size 128 --num-attention-heads 4
      --num-query-groups 2 --kv-channels 16 --seq-length 32 --max-position-embeddings 32
      --vocab-size 256 --global-batch-size 4 --micro-batch-size 2 --train-samples 80
      --lr-decay-samples 80 --lr-warmup-samples 8 --eval-iters 0)
LAUNCHER= DTYPE=bf16 bash "$S/llama3_8b.sh" ck/llama tb/llama MOCK MOCK "${TINY[@]}" > train.out 2>&1 \
  || fail "llama training: $(tail -20 train.out)"
grep -q "iteration       20/      20 | consumed samples:           80 |" train.out \
  || fail "llama: 20 iterations: $(tail -5 train.out)"
grep -q "decoupled learning rate:" train.out || fail "llama: no decoupled learning rate"
[ -f ck/llama/iter_0000020/manifest.json ] || fail "llama: no checkpoint at iteration 20"
[ "$(wc -l < ck/llama/mtron-metrics.jsonl)" -eq 20 ] || fail "llama: metrics beside the checkpoint"
ls tb/llama/events.out.tfevents.* > /dev/null || fail "llama: no TensorBoard event file"
echo "megatron_scripts_test: all passed"
