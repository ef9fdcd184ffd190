// defines: MlaConfig, add_mla_flags, mla_flag_args
//
// Multi-latent attention (DeepSeek-V2/V3, Megatron-Core's MLASelfAttention), with Megatron's
// flags and defaults (arguments.py). Per token, with H heads:
//   q   = q_up(norm(q_down(x)))  [H, qk_head_dim + qk_pos_emb_head_dim]   (q_lora_rank > 0)
//         or linear_q_proj(x)                                              (q_lora_rank 0: None)
//   ckv = kv_down(x)             [kv_lora_rank | qk_pos_emb_head_dim]
//   kv  = kv_up(norm(ckv[:kv_lora_rank]))  [H, qk_head_dim + v_head_dim]
//   k   = [kv[h, :qk_head_dim] | rope(ckv[kv_lora_rank:])] per head (the RoPE key is shared)
//   v   = kv[h, qk_head_dim:]
// RoPE acts on the last qk_pos_emb_head_dim channels of each query head and on the shared key.
// Its type is Megatron's: --rope-type yarn (MLA's default) or rope. YaRN (Megatron's
// YarnRotaryEmbedding over dim = qk_pos_emb_head_dim) with factor f = --rotary-scaling-factor,
// original_max_position_embeddings 4096, beta_fast 32, beta_slow 1 and integer-rounded
// correction range (MLATransformerConfig's values, which no Megatron flag sets for MLA):
//   correction dim d(r) = dim ln(4096 / (2 pi r)) / (2 ln base),
//   [low, high] = [max(floor(d(32)), 0), min(ceil(d(1)), dim - 1)],
//   get_mscale(f, m) = 1 if f <= 1 else 0.1 m ln f + 1,
//   cos/sin factor (concentration) = get_mscale(f, --mscale) / get_mscale(f, --mscale-all-dim),
// the frequencies of kernels/rope.h's RopeFreq. Whatever the type, the softmax scale is
// get_mscale(f, --mscale-all-dim)^2 / sqrt(qk_head_dim + qk_pos_emb_head_dim), as Megatron's
// MLASelfAttention sets it. At f = 1 YaRN is plain RoPE.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace mtron {

struct ModelConfig;

struct MlaConfig {
  bool enabled = false;     // --multi-latent-attention
  int64_t q_lora_rank = 0;  // 0: None (q projected directly)
  int64_t kv_lora_rank = 32;
  int64_t qk_head_dim = 128;  // the no-RoPE part of a query/key head
  int64_t qk_pos_emb_head_dim = 64;
  int64_t v_head_dim = 128;
  float rotary_scaling_factor = 1.0f;
  std::string rope_type;  // --rope-type: "" (None: yarn with MLA), "rope" or "yarn"
  float mscale = 1.0f, mscale_all_dim = 0.0f;
  static constexpr int64_t kYarnOriginalMaxPositions = 4096;
  static constexpr double kYarnBetaFast = 32, kYarnBetaSlow = 1;
  bool yarn() const { return rope_type != "rope"; }
  static double yarn_get_mscale(double factor, double m);  // the header's get_mscale
  // YaRN's correction range [*low, *high] (pair indices) and cos/sin factor for base `base`.
  void yarn_ramp(double base, double* low, double* high) const;
  double yarn_concentration() const;
  float softmax_scale() const;  // in fp32: 1/sqrt(Dq) exactly as standard attention's at f <= 1

  int64_t q_head_dim() const { return qk_head_dim + qk_pos_emb_head_dim; }
  // Floats per token of the compressed latent a generation cache keeps (model/mla.h).
  int64_t latent_width() const { return kv_lora_rank + qk_pos_emb_head_dim; }
  // Checks the MLA flags against the rest of the model (throws naming the flag); no-op when
  // disabled.
  void validate(const ModelConfig& m) const;
  // Parameters of one layer's attention block, global: split over TP by head (q_up or
  // linear_q_proj, kv_up, linear_proj) and replicated (the down projections, the latent norms,
  // linear_proj's bias).
  int64_t tp_sharded_attention_parameters(const ModelConfig& m) const;
  int64_t replicated_attention_parameters(const ModelConfig& m) const;
  // Megatron's per-token, per-layer attention term of num_floating_point_operations without the
  // 6 (fwd + bwd, FMA): the projections plus the causal core attention at sequence length s.
  double attention_flops_term(const ModelConfig& m) const;
};

// Registers the MLA flags in group "Model".
void add_mla_flags(CLI::App& app, MlaConfig& c);
// Appends the MLA flags of `c` (when enabled) to `args`.
void mla_flag_args(const MlaConfig& c, std::vector<std::string>& args);

}  // namespace mtron
