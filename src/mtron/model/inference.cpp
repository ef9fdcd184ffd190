#include "mtron/model/inference.h"

#include "mtron/kernels/device.h"

namespace mtron::model {

InferenceModel::InferenceModel(const ModelConfig& cfg,
                               GPTChunk& whole,
                               int64_t max_tokens,
                               const RunCtx& rc)
    : cfg_(cfg), chunk_(whole), rc_(rc), logits_(rc.k.device) {
  const ChunkPlacement& p = whole.placement();
  MT_ASSERT(p.has_embedding && p.has_head && p.first_layer == 0 && p.num_layers == cfg.num_layers,
            "inference needs the whole model");
  for (const ParamSpec& s : whole.params().specs()) {
    MT_ASSERT(s.shard_dim < 0 || s.local_shape == s.global_shape,
              "inference needs the whole model (TP 1); ", s.name, " is a shard");
  }
  MT_CHECK(max_tokens >= 1, "the generation length must be positive");
  if (cfg.position_embedding_type == PositionEmbedding::kLearnedAbsolute) {
    MT_CHECK(max_tokens <= cfg.max_position_embeddings, "prompt plus new tokens (", max_tokens,
             ") exceed the model's --max-position-embeddings (", cfg.max_position_embeddings, ")");
  }
  V_ = whole.params().spec(whole.word_embedding()).global_shape[0];
  cache_ = whole.make_kv_cache(rc_, 1, max_tokens);
  mb_.B = 1;
}

void InferenceModel::forward(const int32_t* tokens, int64_t n, float* logits, bool all_logits) {
  MT_CHECK(n >= 1 && length() + n <= capacity(), "sequence of ", length() + n,
           " tokens exceeds the cache of ", capacity());
  for (int64_t i = 0; i < n; ++i) {
    MT_CHECK(tokens[i] >= 0 && tokens[i] < cfg_.vocab_size, "token id ", tokens[i],
             " is outside the vocabulary [0, ", cfg_.vocab_size, ")");
  }
  mb_.S = n;
  mb_.tokens.assign(tokens, tokens + n);
  mb_.labels.clear();
  mb_.pos.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) mb_.pos[size_t(i)] = int32_t(length() + i);
  const int64_t rows = all_logits ? n : 1;
  logits_.reset();
  float* dev = logits_.alloc<float>(rows * V_);
  chunk_.forward_cached(rc_, mb_, cache_, dev, rows);
  kernels::copy_to_host(rc_.k, logits, dev, int64_t(sizeof(float)) * rows * V_);
}

}  // namespace mtron::model
