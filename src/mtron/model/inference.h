// defines: InferenceModel
//
// Autoregressive inference of a whole GPT/Llama model in one process, with a KV cache: the
// forward pass of generation (`mtron generate`). It reads the weights a full-model GPTChunk
// registered (TP 1, found by their Megatron-Core names), runs the training kernels on them in
// fp32, and keeps each layer's keys and values (after RoPE) for every position so far:
//   k_cache[l], v_cache[l]: [max_tokens, G, D]   (sequence-major, as the attention kernel reads)
// A call processes n new tokens at positions length() .. length() + n - 1 against the cache:
// the prompt in one call (prefill), then one token per call (decode); attention's causal mask
// with offset length() lets the new queries see every cached key. Batch size 1.
//
// Mixture-of-experts layers run the training code (MoELayer bound to the chunk's router and
// expert weights, one process), dropless: a capacity factor limits training batches only, so the
// next token never depends on how the prompt was chunked (Hugging Face's Mixtral is dropless
// too). A shared expert and the dense layers of --moe-layer-freq > 1 run as the dense MLP.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "mtron/core/arena.h"
#include "mtron/core/model_config.h"
#include "mtron/model/gpt.h"
#include "mtron/model/moe.h"
#include "mtron/model/params.h"

namespace mtron::model {

class InferenceModel {
 public:
  // `whole` must be a whole model (a GPTChunk with embedding and head, TP 1, EP 1) and outlive
  // this object, as must cfg. max_tokens: the cache length (at most the learned position table's
  // length with learned positions).
  InferenceModel(const ModelConfig& cfg, const GPTChunk& whole, int64_t max_tokens);

  int64_t length() const { return len_; }
  int64_t capacity() const { return cap_; }
  int64_t padded_vocab() const { return V_; }  // logits width; ids >= cfg.vocab_size are padding
  void reset() { len_ = 0; }

  // Appends tokens[n] to the sequence. Writes the logits [n, padded_vocab()] of every new
  // token with all_logits, else only the last token's [padded_vocab()].
  void forward(const int32_t* tokens, int64_t n, float* logits, bool all_logits);

 private:
  struct Layer {
    int ln1_w = -1, ln1_b = -1, qkv_w = -1, qkv_b = -1, proj_w = -1, proj_b = -1;
    int ln2_w = -1, ln2_b = -1, fc1_w = -1, fc1_b = -1, fc2_w = -1, fc2_b = -1;
    int64_t ffn = 0;                // the dense MLP's (or shared expert's) width; 0: none
    std::unique_ptr<MoELayer> moe;  // the routed experts of an MoE layer
  };
  void norm(float* out, const float* in, int w, int b, int64_t n);

  const ModelConfig& cfg_;
  ModelConfig dropless_;  // cfg_ without a capacity factor (the MoE layers' configuration)
  const ParamBuffer& p_;
  int64_t cap_, len_ = 0, V_;
  int wte_ = -1, wpe_ = -1, lnf_w_ = -1, lnf_b_ = -1, out_w_ = -1;
  std::vector<Layer> layers_;
  std::vector<float> k_cache_, v_cache_;  // [L, cap, G, D]
  Arena scratch_;
};

}  // namespace mtron::model
