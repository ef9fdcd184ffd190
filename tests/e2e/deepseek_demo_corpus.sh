#!/usr/bin/env bash
# A tiny DeepSeek-V3-shaped model (multi-latent attention with its latent norms and DeepSeek-V3's
# YaRN RoPE: factor 40, mscale and mscale_all_dim 1; a dense first layer, 8 experts top-2 in 4
# groups with sigmoid scores and the expert bias, a shared expert, one MTP depth) trained on the
# demo corpus, exported to Hugging Face's DeepseekV3ForCausalLM, imported back: greedy
# generation from the import equals the original's, token for token.
#   deepseek_demo_corpus.sh MTRON DATA_DIR WORKDIR
set -euo pipefail
mt=$1; data=$2; work=$3
rm -rf "$work"; mkdir -p "$work"
"$mt" train --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 64 \
  --micro-batch-size 2 --global-batch-size 4 --train-iters 12 --lr 1e-3 --min-lr 1e-4 \
  --lr-decay-style cosine --lr-warmup-iters 2 --seed 1234 \
  --multi-latent-attention --q-lora-rank 24 --kv-lora-rank 16 --qk-head-dim 12 \
  --qk-pos-emb-head-dim 8 --v-head-dim 10 --qk-layernorm --swiglu --normalization RMSNorm \
  --rotary-scaling-factor 40 --mscale 1.0 --mscale-all-dim 1.0 \
  --position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear \
  --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 32 --moe-layer-freq "([0]+[1]*3)" \
  --moe-router-score-function sigmoid --moe-router-enable-expert-bias \
  --moe-router-bias-update-rate 1e-2 --moe-router-num-groups 4 --moe-router-group-topk 1 \
  --moe-router-topk-scaling-factor 2.5 --moe-shared-expert-intermediate-size 32 \
  --moe-router-load-balancing-type seq_aux_loss --moe-aux-loss-coeff 1e-3 --mtp-num-layers 1 \
  --data-path "$data/demo_text_document" --tokenizer-type GPT2BPETokenizer \
  --vocab-file "$data/gpt2-vocab.json" --merge-file "$data/gpt2-merges.txt" --split 98,2,0 \
  --eval-iters 0 --log-interval 4 --metrics-file /dev/null --save "$work/ck" --save-interval 12
"$mt" export --load "$work/ck" --output "$work/hf"
grep -q DeepseekV3ForCausalLM "$work/hf/config.json"
"$mt" import --input "$work/hf" --output "$work/ck2"
gen() {
  "$mt" generate --load "$1" --prompt "The history of" --max-new-tokens 24 --temperature 0 \
    --ignore-eos --print-ids
}
a=$(gen "$work/ck"); b=$(gen "$work/ck2")
echo "original: $a"
echo "imported: $b"
[ -n "$a" ] && [ "$a" = "$b" ] && echo "generation identical"
