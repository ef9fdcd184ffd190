#include "mtron/model/inference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>

#include "mtron/kernels/activation.h"
#include "mtron/kernels/attention.h"
#include "mtron/kernels/elementwise.h"
#include "mtron/kernels/embedding.h"
#include "mtron/kernels/norm.h"
#include "mtron/kernels/rope.h"
#include "mtron/model/linear.h"

namespace mtron::model {

InferenceModel::InferenceModel(const ModelConfig& cfg, const GPTChunk& whole, int64_t max_tokens)
    : cfg_(cfg), dropless_(cfg), p_(whole.params()), cap_(max_tokens) {
  const ParamBuffer& params = whole.params();
  dropless_.moe_expert_capacity_factor = 0;
  std::map<std::string, int> by_name;
  for (size_t i = 0; i < params.specs().size(); ++i) {
    const ParamSpec& s = params.spec(int(i));
    MT_ASSERT(s.shard_dim < 0 || s.local_shape == s.global_shape,
              "inference needs the whole model (TP 1); ", s.name, " is a shard");
    by_name[s.name] = int(i);
  }
  auto get = [&](const std::string& name, bool required) {
    const auto it = by_name.find(name);
    MT_ASSERT(it != by_name.end() || !required, "the model has no parameter ", name);
    return it == by_name.end() ? -1 : it->second;
  };
  MT_CHECK(cap_ >= 1, "the generation length must be positive");
  if (cfg.position_embedding_type == PositionEmbedding::kLearnedAbsolute) {
    MT_CHECK(cap_ <= cfg.max_position_embeddings, "prompt plus new tokens (", cap_,
             ") exceed the model's --max-position-embeddings (", cfg.max_position_embeddings, ")");
    wpe_ = get("embedding.position_embeddings.weight", true);
  }
  wte_ = get("embedding.word_embeddings.weight", true);
  const bool ln = cfg.normalization == Normalization::kLayerNorm;
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    const std::string pre = "decoder.layers." + std::to_string(l) + ".";
    Layer y;
    y.ln1_w = get(pre + "input_layernorm.weight", true);
    y.ln1_b = get(pre + "input_layernorm.bias", ln);
    y.qkv_w = get(pre + "self_attention.linear_qkv.weight", true);
    y.qkv_b = get(pre + "self_attention.linear_qkv.bias", false);
    y.proj_w = get(pre + "self_attention.linear_proj.weight", true);
    y.proj_b = get(pre + "self_attention.linear_proj.bias", false);
    y.ln2_w = get(pre + "pre_mlp_layernorm.weight", true);
    y.ln2_b = get(pre + "pre_mlp_layernorm.bias", ln);
    const bool moe = cfg.is_moe_layer(l);
    y.ffn = moe ? cfg.moe_shared_expert_intermediate_size : cfg.ffn();
    const std::string mlp = pre + (moe ? "mlp.shared_experts." : "mlp.");
    if (y.ffn > 0) {
      y.fc1_w = get(mlp + "linear_fc1.weight", true);
      y.fc1_b = get(mlp + "linear_fc1.bias", false);
      y.fc2_w = get(mlp + "linear_fc2.weight", true);
      y.fc2_b = get(mlp + "linear_fc2.bias", false);
    }
    if (moe) y.moe = std::make_unique<MoELayer>(dropless_, l, params, whole.expert_params());
    layers_.push_back(std::move(y));
  }
  lnf_w_ = get("decoder.final_layernorm.weight", true);
  lnf_b_ = get("decoder.final_layernorm.bias", ln);
  out_w_ = cfg.untie_embeddings_and_output_weights ? get("output_layer.weight", true) : wte_;
  V_ = params.spec(wte_).global_shape[0];
  const size_t kv = size_t(cfg.num_layers * cap_ * cfg.query_groups() * cfg.kv_channels);
  k_cache_.assign(kv, 0.0f);
  v_cache_.assign(kv, 0.0f);
}

void InferenceModel::norm(float* out, const float* in, int w, int b, int64_t n) {
  const kernels::Ctx k;
  const int64_t h = cfg_.hidden_size;
  float* rstd = scratch_.alloc<float>(n);
  const float* gamma = p_.master(w);
  if (cfg_.apply_layernorm_1p) {  // zero-centred weights: the norm applies 1 + weight
    float* g = scratch_.alloc<float>(h);
    for (int64_t i = 0; i < h; ++i) g[i] = 1.0f + gamma[i];
    gamma = g;
  }
  if (cfg_.normalization == Normalization::kLayerNorm) {
    float* mean = scratch_.alloc<float>(n);
    kernels::layernorm_forward(k, out, mean, rstd, in, gamma, p_.master(b), n, h,
                               cfg_.norm_epsilon);
  } else {
    kernels::rmsnorm_forward(k, out, rstd, in, gamma, n, h, cfg_.norm_epsilon);
  }
}

void InferenceModel::forward(const int32_t* tokens, int64_t n, float* logits, bool all_logits) {
  MT_CHECK(n >= 1 && len_ + n <= cap_, "sequence of ", len_ + n, " tokens exceeds the cache of ",
           cap_);
  for (int64_t i = 0; i < n; ++i) {
    MT_CHECK(tokens[i] >= 0 && tokens[i] < cfg_.vocab_size, "token id ", tokens[i],
             " is outside the vocabulary [0, ", cfg_.vocab_size, ")");
  }
  const RunCtx rc;  // fp32, TP 1
  const kernels::Ctx& k = rc.k;
  const int64_t h = cfg_.hidden_size, H = cfg_.num_attention_heads, G = cfg_.query_groups();
  const int64_t D = cfg_.kv_channels, qkv_w = (H + 2 * G) * D;
  const int64_t Fmax = std::max(cfg_.ffn(), cfg_.moe_shared_expert_intermediate_size);
  const int64_t p0 = len_, S = len_ + n;
  auto w = [&](int handle) { return Weight{p_.master(handle), nullptr}; };
  auto opt = [&](int handle) { return handle < 0 ? nullptr : p_.master(handle); };
  scratch_.reset();

  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pos[size_t(i)] = int32_t(p0 + i);
  float* x = scratch_.alloc<float>(n * h);
  kernels::embedding_forward(k, x, tokens, p_.master(wte_), n, h, 0, V_, false);
  if (wpe_ >= 0) {
    kernels::embedding_forward(k, x, pos.data(), p_.master(wpe_), n, h, 0,
                               cfg_.max_position_embeddings, true);
  }
  float* a = scratch_.alloc<float>(n * h);
  float* qkv = scratch_.alloc<float>(n * qkv_w);
  float* q = scratch_.alloc<float>(n * H * D);
  float* kn = scratch_.alloc<float>(n * G * D);
  float* vn = scratch_.alloc<float>(n * G * D);
  float* att = scratch_.alloc<float>(n * H * D);
  float* lse = scratch_.alloc<float>(H * n);
  float* fc1 = scratch_.alloc<float>(n * (cfg_.swiglu ? 2 * Fmax : Fmax));
  float* act = scratch_.alloc<float>(n * Fmax);
  float* tmp = scratch_.alloc<float>(n * h);
  float* routed = scratch_.alloc<float>(n * h);
  const TokenLayout tl{1, n, pos.data(), 1.0f};
  const kernels::AttnShape as{1, n, S, H, G, D, 1.0f / std::sqrt(float(D))};
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& y = layers_[l];
    // Attention block, the new tokens' keys and values appended to the cache.
    norm(a, x, y.ln1_w, y.ln1_b, n);
    linear_forward(rc, qkv, Act{a, nullptr}, w(y.qkv_w), opt(y.qkv_b), n, h, qkv_w);
    kernels::qkv_split(k, q, kn, vn, qkv, n, G, H / G, D);
    if (cfg_.position_embedding_type == PositionEmbedding::kRope) {
      kernels::rope_forward(k, q, pos.data(), n, H, D, cfg_.rotary_dim(), cfg_.rotary_base);
      kernels::rope_forward(k, kn, pos.data(), n, G, D, cfg_.rotary_dim(), cfg_.rotary_base);
    }
    float* kc = k_cache_.data() + l * size_t(cap_ * G * D);
    float* vc = v_cache_.data() + l * size_t(cap_ * G * D);
    std::memcpy(kc + p0 * G * D, kn, sizeof(float) * size_t(n * G * D));
    std::memcpy(vc + p0 * G * D, vn, sizeof(float) * size_t(n * G * D));
    kernels::attention_forward(k, att, lse, q, kc, vc, as, kernels::AttnMask{true, p0});
    linear_forward(rc, tmp, Act{att, nullptr}, w(y.proj_w), opt(y.proj_b), n, H * D, h);
    kernels::add(k, x, x, tmp, n * h);
    // MLP block: the dense MLP (an MoE layer's shared expert) and/or the routed experts, summed
    // in the training forward's order.
    norm(a, x, y.ln2_w, y.ln2_b, n);
    if (y.ffn > 0) {
      const int64_t F = y.ffn, fc1_w = cfg_.swiglu ? 2 * F : F;
      linear_forward(rc, fc1, Act{a, nullptr}, w(y.fc1_w), opt(y.fc1_b), n, h, fc1_w);
      if (cfg_.swiglu) {
        kernels::swiglu_forward(k, act, fc1, n, F);
      } else {
        kernels::gelu_forward(k, act, fc1, n * F);
      }
      linear_forward(rc, tmp, Act{act, nullptr}, w(y.fc2_w), opt(y.fc2_b), n, F, h);
    }
    if (y.moe) {
      MoELayer::Stash st;
      y.moe->forward(rc, tl, st, scratch_, scratch_, a, y.ffn > 0 ? routed : tmp);
      if (y.ffn > 0) kernels::add(k, tmp, tmp, routed, n * h);
    }
    kernels::add(k, x, x, tmp, n * h);
  }
  // Final norm and the output layer (only the rows asked for).
  const int64_t rows = all_logits ? n : 1;
  const float* last = x + (n - rows) * h;
  norm(a, last, lnf_w_, lnf_b_, rows);
  linear_forward(rc, logits, Act{a, nullptr}, w(out_w_), nullptr, rows, h, V_);
  len_ = S;
}

}  // namespace mtron::model
