// defines: InferenceModel
//
// Autoregressive inference of a whole GPT/Llama model in one process (`mtron generate`): the
// training layers' forward (GPTChunk::forward_cached) without a stash and with a KV cache that
// keeps each layer's keys and values (after RoPE) for every position so far. A call processes n
// new tokens at positions length() .. length() + n - 1 against the cache (multi-latent attention
// keeps its compressed latent there, mla.h): the prompt in one call
// (prefill), then one token per call (decode); attention's causal mask with offset length() lets
// the new queries see every cached key. Batch size 1, fp32 (whatever precision trained it).
//
// Mixture-of-experts layers run dropless: a capacity factor limits training batches only, so the
// next token never depends on how the prompt was chunked (Hugging Face's Mixtral is dropless
// too).
#pragma once

#include <cstdint>
#include <vector>

#include "mtron/core/arena.h"
#include "mtron/core/model_config.h"
#include "mtron/model/gpt.h"

namespace mtron::model {

class InferenceModel {
 public:
  // `whole` must be a whole model (a GPTChunk with embedding and head, TP 1, EP 1) and outlive
  // this object, as must cfg. max_tokens: the cache length (at most the learned position table's
  // length with learned positions). rc: where it runs (its TP, CP and EP of size 1).
  InferenceModel(const ModelConfig& cfg,
                 GPTChunk& whole,
                 int64_t max_tokens,
                 const RunCtx& rc = {});

  int64_t length() const { return cache_.length(); }
  int64_t capacity() const { return cache_.capacity(); }
  int64_t padded_vocab() const { return V_; }  // logits width; ids >= cfg.vocab_size are padding
  int64_t cache_bytes() const { return int64_t(cache_.storage.used()); }
  void reset() { cache_.reset(); }

  // Appends tokens[n] to the sequence. Writes the logits [n, padded_vocab()] of every new
  // token with all_logits, else only the last token's [padded_vocab()] (host memory).
  void forward(const int32_t* tokens, int64_t n, float* logits, bool all_logits);

 private:
  const ModelConfig& cfg_;
  GPTChunk& chunk_;
  RunCtx rc_;
  int64_t V_;
  KvCache cache_;
  MicroBatch mb_;
  Arena logits_;  // on rc's device
};

}  // namespace mtron::model
