#include "mtron/core/mla_config.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

#include <CLI/CLI.hpp>

#include "mtron/core/error.h"
#include "mtron/core/model_config.h"

namespace mtron {

double MlaConfig::yarn_get_mscale(double f, double m) {
  return f <= 1 ? 1.0 : 0.1 * m * std::log(f) + 1.0;
}

void MlaConfig::yarn_ramp(double base, double* low, double* high) const {
  const double dim = double(qk_pos_emb_head_dim);
  auto correction_dim = [&](double rotations) {
    return dim * std::log(double(kYarnOriginalMaxPositions) / (rotations * 2 * M_PI)) /
           (2 * std::log(base));
  };
  *low = std::max(std::floor(correction_dim(kYarnBetaFast)), 0.0);
  *high = std::min(std::ceil(correction_dim(kYarnBetaSlow)), dim - 1);
}

double MlaConfig::yarn_concentration() const {
  return yarn_get_mscale(rotary_scaling_factor, mscale) /
         yarn_get_mscale(rotary_scaling_factor, mscale_all_dim);
}

float MlaConfig::softmax_scale() const {
  const float m = float(yarn_get_mscale(rotary_scaling_factor, mscale_all_dim));
  return m * m / std::sqrt(float(q_head_dim()));
}

void MlaConfig::validate(const ModelConfig& m) const {
  MT_CHECK(rope_type.empty() || rope_type == "rope" || rope_type == "yarn", "--rope-type '",
           rope_type, "': rope or yarn");
  MT_CHECK(enabled || rope_type != "yarn",
           "--rope-type yarn needs --multi-latent-attention (Megatron's common attention takes "
           "only rope)");
  if (!enabled) return;
  MT_CHECK(!m.group_query_attention,
           "--multi-latent-attention does not take --group-query-attention (MLA has one key and "
           "value head per query head)");
  MT_CHECK(m.rotary_percent == 1.0f, "--rotary-percent ", m.rotary_percent,
           " with --multi-latent-attention: only 1.0 (RoPE on all qk_pos_emb_head_dim channels)");
  MT_CHECK(rotary_scaling_factor > 0, "--rotary-scaling-factor must be positive (got ",
           rotary_scaling_factor, ")");
  MT_CHECK(q_lora_rank >= 0, "--q-lora-rank must be positive (or 0: None; got ", q_lora_rank, ")");
  MT_CHECK(kv_lora_rank > 0, "--kv-lora-rank must be positive (got ", kv_lora_rank, ")");
  MT_CHECK(qk_head_dim > 0, "--qk-head-dim must be positive (got ", qk_head_dim, ")");
  MT_CHECK(v_head_dim > 0, "--v-head-dim must be positive (got ", v_head_dim, ")");
  MT_CHECK(qk_pos_emb_head_dim > 0 && qk_pos_emb_head_dim % 2 == 0,
           "--qk-pos-emb-head-dim must be even and positive (RoPE rotates channel pairs; got ",
           qk_pos_emb_head_dim, ")");
}

int64_t MlaConfig::tp_sharded_attention_parameters(const ModelConfig& m) const {
  const int64_t H = m.num_attention_heads;
  const int64_t q = H * q_head_dim() * (q_lora_rank > 0 ? q_lora_rank : m.hidden_size);
  return q + kv_lora_rank * H * (qk_head_dim + v_head_dim) + H * v_head_dim * m.hidden_size;
}

int64_t MlaConfig::replicated_attention_parameters(const ModelConfig& m) const {
  const int64_t h = m.hidden_size;
  // The latent norms q_layernorm and kv_layernorm exist with --qk-layernorm (Megatron's MLA spec).
  const int64_t norm = !m.qk_layernorm ? 0 : m.normalization == Normalization::kLayerNorm ? 2 : 1;
  const int64_t q = q_lora_rank > 0 ? h * q_lora_rank + norm * q_lora_rank : 0;
  return q + h * (kv_lora_rank + qk_pos_emb_head_dim) + norm * kv_lora_rank +
         (m.add_bias_linear ? h : 0);
}

double MlaConfig::attention_flops_term(const ModelConfig& m) const {
  const double h = double(m.hidden_size), H = double(m.num_attention_heads);
  const double s = double(m.seq_length);
  const double q = q_lora_rank > 0 ? double(q_lora_rank) * (h + H * double(q_head_dim()) + 1)
                                   : h * H * double(q_head_dim());
  return q + double(kv_lora_rank) * (h + H * double(qk_head_dim + v_head_dim) + 1) +
         h * double(qk_pos_emb_head_dim) + H * double(v_head_dim) * h +
         s * H * double(q_head_dim()) / 2 + s * H * double(v_head_dim) / 2;
}

void add_mla_flags(CLI::App& app, MlaConfig& c) {
  auto opt = [&](const std::string& name, auto& var, auto dflt, const std::string& help) {
    app.add_option(name, var, help)
        ->default_val(dflt)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
        ->group("Model");
  };
  c.enabled = false;
  app.add_flag("--multi-latent-attention", c.enabled, "Use multi-latent attention for model.")
      ->group("Model");
  opt("--q-lora-rank", c.q_lora_rank, int64_t(0),
      "Rank of Query tensor's low rank representation. 0 (None): q is projected directly.");
  opt("--kv-lora-rank", c.kv_lora_rank, int64_t(32),
      "Rank of Key and Value tensors' low rank representation.");
  opt("--qk-head-dim", c.qk_head_dim, int64_t(128),
      "Dimension of the head in the QK projection. q_head_dim = qk_head_dim + "
      "qk_pos_emb_head_dim");
  opt("--qk-pos-emb-head-dim", c.qk_pos_emb_head_dim, int64_t(64),
      "Dimension of the position embedding in the QK projection.");
  opt("--v-head-dim", c.v_head_dim, int64_t(128), "Dimension of the head in the V projection.");
  opt("--rotary-scaling-factor", c.rotary_scaling_factor, 1.0f,
      "Rotary scaling factor for the rotary embeddings.");
  opt("--rope-type", c.rope_type, std::string(),
      "Type of rope to use (rope or yarn). Multi-latent attention takes yarn by default, "
      "common attention rope.");
  opt("--mscale", c.mscale, 1.0f, "Mscale for YaRN RoPE in multi-latent attention.");
  opt("--mscale-all-dim", c.mscale_all_dim, 0.0f,
      "Mscale all dimensions for YaRN RoPE in multi-latent attention.");
}

void mla_flag_args(const MlaConfig& c, std::vector<std::string>& a) {
  if (!c.enabled) return;
  a.push_back("--multi-latent-attention");
  auto add = [&](const char* flag, auto v) {
    a.push_back(flag);
    a.push_back(fmt::format("{}", v));
  };
  if (c.q_lora_rank > 0) add("--q-lora-rank", c.q_lora_rank);
  add("--kv-lora-rank", c.kv_lora_rank);
  add("--qk-head-dim", c.qk_head_dim);
  add("--qk-pos-emb-head-dim", c.qk_pos_emb_head_dim);
  add("--v-head-dim", c.v_head_dim);
  add("--rotary-scaling-factor", c.rotary_scaling_factor);
  if (!c.rope_type.empty()) add("--rope-type", c.rope_type);
  add("--mscale", c.mscale);
  add("--mscale-all-dim", c.mscale_all_dim);
}

}  // namespace mtron
