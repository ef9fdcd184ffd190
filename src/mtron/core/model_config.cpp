#include "mtron/core/model_config.h"

#include <fmt/core.h>

#include "mtron/core/error.h"

namespace mtron {

void ModelConfig::finalize() {
  MT_CHECK(num_layers > 0, "--num-layers must be positive (got ", num_layers, ")");
  MT_CHECK(hidden_size > 0, "--hidden-size must be positive (got ", hidden_size, ")");
  MT_CHECK(num_attention_heads > 0, "--num-attention-heads must be positive (got ",
           num_attention_heads, ")");
  MT_CHECK(seq_length > 0, "--seq-length must be positive (got ", seq_length, ")");
  MT_CHECK(vocab_size > 0, "vocabulary size must be positive (got ", vocab_size,
           "); set --vocab-size for --tokenizer-type NullTokenizer");
  MT_CHECK(make_vocab_size_divisible_by > 0,
           "--make-vocab-size-divisible-by must be positive (got ", make_vocab_size_divisible_by,
           ")");
  MT_CHECK(init_method_std > 0, "--init-method-std must be positive (got ", init_method_std, ")");
  MT_CHECK(norm_epsilon > 0, "--norm-epsilon must be positive (got ", norm_epsilon, ")");
  MT_CHECK(hidden_dropout >= 0 && hidden_dropout < 1, "--hidden-dropout must be in [0, 1) (got ",
           hidden_dropout, ")");
  MT_CHECK(attention_dropout >= 0 && attention_dropout < 1,
           "--attention-dropout must be in [0, 1) (got ", attention_dropout, ")");
  // Megatron asserts `not args.swiglu` with --squared-relu.
  MT_CHECK(!(squared_relu && swiglu), "--squared-relu and --swiglu exclude each other");
  if (kv_channels == 0) {
    MT_CHECK(hidden_size % num_attention_heads == 0, "--hidden-size (", hidden_size,
             ") must be divisible by --num-attention-heads (", num_attention_heads, ")");
    kv_channels = hidden_size / num_attention_heads;
  }
  MT_CHECK(kv_channels > 0, "--kv-channels must be positive (got ", kv_channels, ")");
  if (group_query_attention) {
    MT_CHECK(num_query_groups > 0, "--num-query-groups must be positive (got ", num_query_groups,
             ")");
    MT_CHECK(num_attention_heads % num_query_groups == 0, "--num-attention-heads (",
             num_attention_heads, ") must be divisible by --num-query-groups (", num_query_groups,
             ")");
  }
  if (ffn_hidden_size == 0) {
    ffn_hidden_size = swiglu ? int64_t(8 * hidden_size / 3 / 64) * 64 : 4 * hidden_size;
  }
  MT_CHECK(ffn_hidden_size > 0, "--ffn-hidden-size must be positive (got ", ffn_hidden_size, ")");
  // Megatron's validate_args: it would need a 'NoPE' position embedding type.
  MT_CHECK(add_position_embedding || position_embedding_type == PositionEmbedding::kRope,
           "--no-position-embedding is deprecated, use --position-embedding-type");
  if (max_position_embeddings == 0) max_position_embeddings = seq_length;
  MT_CHECK(max_position_embeddings >= seq_length, "--max-position-embeddings (",
           max_position_embeddings, ") must be >= --seq-length (", seq_length, ")");
  if (position_embedding_type == PositionEmbedding::kRope) {
    MT_CHECK(rotary_percent > 0 && rotary_percent <= 1, "--rotary-percent must be in (0, 1] (got ",
             rotary_percent, ")");
    MT_CHECK(rotary_dim() % 2 == 0 && rotary_dim() > 0, "rotary dimension (kv channels ",
             kv_channels, " x --rotary-percent ", rotary_percent, ") must be even and positive");
  }
  if (rope_scaling) {
    MT_CHECK(position_embedding_type == PositionEmbedding::kRope && !mla.enabled,
             "--use-rope-scaling (Llama 3.x's RoPE frequencies) needs --position-embedding-type "
             "rope without --multi-latent-attention (whose RoPE is YaRN: --rotary-scaling-factor)");
    MT_CHECK(rope_scaling_factor > 0, "--rope-scaling-factor must be positive (got ",
             rope_scaling_factor, ")");
  }
  // Megatron's TransformerConfig rule and message; without RoPE the flag has no effect there.
  MT_CHECK(!(rotary_interleaved && mla.enabled),
           "rotary_interleaved does not work with multi_latent_attention.");
  mla.validate(*this);
  if (is_moe()) {
    MT_CHECK(num_experts > 0, "--num-experts must be positive (got ", num_experts, ")");
    if (moe_ffn_hidden_size == 0) moe_ffn_hidden_size = ffn_hidden_size;
    MT_CHECK(moe_router_topk >= 1 && moe_router_topk <= num_experts, "--moe-router-topk (",
             moe_router_topk, ") must be in [1, --num-experts (", num_experts, ")]");
    MT_CHECK(moe_layer_freq >= 1, "--moe-layer-freq must be >= 1 (got ", moe_layer_freq, ")");
    if (!moe_layer_pattern.empty()) {
      std::string p = "[";  // as Python prints a list
      for (const int64_t v : moe_layer_pattern) {
        if (p.size() > 1) p += ", ";
        p += std::to_string(v);
      }
      // Megatron's messages (gpt_layer_specs.py); it takes any non-zero entry as MoE.
      MT_CHECK(int64_t(moe_layer_pattern.size()) == num_layers,
               "Invalid length of moe_layer_pattern: ", moe_layer_pattern.size(), ", expected ",
               num_layers, ", current moe layer pattern: ", p, "]");
      for (const int64_t v : moe_layer_pattern)
        MT_CHECK(v == 0 || v == 1,
                 "--moe-layer-freq: a layer pattern holds 0 (dense) and 1 (MoE) "
                 "only, got ",
                 p, "]");
    }
    // Megatron's TransformerConfig checks.
    if (moe_router_group_topk > 0) {
      MT_CHECK(moe_router_num_groups > 0,
               "When using group limited routing, moe_router_num_groups must be specified.");
      MT_CHECK(num_experts % moe_router_num_groups == 0, "num_moe_experts (", num_experts,
               ") should be divisible by moe_router_num_groups (", moe_router_num_groups, ").");
      MT_CHECK(moe_router_group_topk <= moe_router_num_groups, "moe_router_group_topk (",
               moe_router_group_topk, ") should be smaller than moe_router_num_groups (",
               moe_router_num_groups, ").");
      // (group scores sum each group's top topk / group_topk; the chosen groups must hold
      // topk experts)
      MT_CHECK(moe_router_topk >= moe_router_group_topk &&
                   moe_router_topk <= moe_router_group_topk * (num_experts / moe_router_num_groups),
               "--moe-router-topk (", moe_router_topk, ") must be in [--moe-router-group-topk (",
               moe_router_group_topk, "), --moe-router-group-topk x experts per group (",
               moe_router_group_topk * (num_experts / moe_router_num_groups), ")]");
    }
    MT_CHECK(moe_router_num_groups >= 0, "--moe-router-num-groups must be positive");
    MT_CHECK(moe_router_topk_scaling_factor >= 0,
             "--moe-router-topk-scaling-factor must be positive");
    MT_CHECK(!moe_router_pre_softmax || moe_router_score_function == RouterScore::kSigmoid ||
                 moe_router_group_topk == 0,
             "--moe-router-pre-softmax with softmax scores and group-limited routing "
             "(--moe-router-group-topk) is not implemented: the groups would be scored by "
             "probabilities");
    MT_CHECK(!moe_router_enable_expert_bias || moe_router_score_function == RouterScore::kSigmoid,
             "Expert bias for aux-loss-free routing only supports 'sigmoid' and 'sqrtsoftplus' "
             "score functions. Please set --moe-router-score-function to 'sigmoid' or "
             "'sqrtsoftplus', or unset --moe-router-enable-expert-bias.");
    MT_CHECK(moe_aux_loss_coeff >= 0, "--moe-aux-loss-coeff must be >= 0");
    MT_CHECK(moe_z_loss_coeff >= 0, "--moe-z-loss-coeff must be >= 0");
    // Megatron's TransformerConfig rules and its router's assertion on Sinkhorn routing.
    const bool sinkhorn = moe_router_load_balancing_type == RouterLoadBalancing::kSinkhorn;
    MT_CHECK(moe_router_topk != 1 || moe_router_score_function != RouterScore::kSoftmax ||
                 moe_router_pre_softmax || sinkhorn,
             "Please use --moe-router-pre-softmax when topk is 1.");
    MT_CHECK(moe_expert_capacity_factor <= 0 || !sinkhorn,
             "moe_expert_capacity_factor only works with aux_loss, seq_aux_loss, global_aux_loss "
             "or none load balancing");
    if (sinkhorn) {
      MT_CHECK(moe_aux_loss_coeff == 0, "Sinkhorn routing does not support aux loss.");
      // Megatron's Sinkhorn routing ignores these options: refused rather than ignored.
      const char* ignored = moe_router_enable_expert_bias ? "--moe-router-enable-expert-bias"
                            : moe_router_score_function != RouterScore::kSoftmax
                                ? "--moe-router-score-function sigmoid"
                            : moe_router_pre_softmax    ? "--moe-router-pre-softmax"
                            : moe_router_group_topk > 0 ? "--moe-router-group-topk"
                            : moe_router_topk_scaling_factor > 0
                                ? "--moe-router-topk-scaling-factor"
                                : nullptr;
      MT_CHECK(!ignored,
               "--moe-router-load-balancing-type sinkhorn chooses the experts by the "
               "Sinkhorn-balanced logits and weighs them by the sigmoid (top-1) or the softmax "
               "over all experts (top-k), as Megatron, which ignores ",
               ignored, ": drop it");
    }
  }
  MT_CHECK(mtp_num_layers >= 0, "--mtp-num-layers must be positive (got ", mtp_num_layers, ")");
  if (mtp_num_layers > 0) {
    MT_CHECK(mtp_num_layers < seq_length, "--mtp-num-layers (", mtp_num_layers,
             ") must be below --seq-length (", seq_length, ")");
    MT_CHECK(position_embedding_type != PositionEmbedding::kLearnedAbsolute,
             "--mtp-num-layers with --position-embedding-type learned_absolute is not supported "
             "(use rope or none)");
  }
}

int64_t ModelConfig::num_moe_layers() const {
  if (!is_moe()) return 0;
  int64_t n = 0;
  for (int64_t l = 0; l < num_layers; ++l) n += is_moe_layer(l);
  return n;
}

int64_t ModelConfig::rotary_dim() const {
  return int64_t(kv_channels * rotary_percent);
}

int64_t ModelConfig::padded_vocab_size(int64_t tp) const {
  int64_t m = make_vocab_size_divisible_by * tp;
  return (vocab_size + m - 1) / m * m;
}

int64_t ModelConfig::num_parameters(int64_t tp) const {
  const int64_t h = hidden_size;
  const int64_t norm = normalization == Normalization::kLayerNorm ? 2 * h : h;
  const int64_t qk_norm = qk_layernorm && !mla.enabled
                              ? (normalization == Normalization::kLayerNorm ? 4 : 2) * kv_channels
                              : 0;
  const int64_t bias = add_bias_linear ? 1 : 0, qkv_b = qkv_bias() ? 1 : 0;
  const int64_t attn =
      mla.enabled
          ? mla.tp_sharded_attention_parameters(*this) + mla.replicated_attention_parameters(*this)
          : (h + qkv_b) * (q_size() + 2 * kv_size()) + q_size() * h + bias * h;
  auto mlp = [&](int64_t f) {
    const int64_t up = swiglu ? 2 * f : f;
    return h * up + bias * up + f * h + bias * h;
  };
  // The decoder's layers, then each MTP depth's: a layer of the last layer's kind (is_moe_layer),
  // enorm, hnorm, eh_proj [h, 2h] and the final norm.
  int64_t layers = mtp_num_layers * (3 * norm + 2 * h * h);
  for (int64_t l = 0; l < num_layers + mtp_num_layers; ++l) {
    layers += 2 * norm + attn + qk_norm;
    if (is_moe_layer(l)) {
      layers += num_experts * mlp(moe_ffn()) + h * num_experts;
      if (moe_shared_expert_intermediate_size > 0)
        layers += mlp(moe_shared_expert_intermediate_size);
    } else {
      layers += mlp(ffn());
    }
  }
  const int64_t V = padded_vocab_size(tp);
  int64_t emb = V * h * (untie_embeddings_and_output_weights ? 2 : 1);
  if (position_embedding_type == PositionEmbedding::kLearnedAbsolute)
    emb += max_position_embeddings * h;
  return layers + emb + norm;
}

std::string ModelConfig::summary() const {
  const std::string heads = mla.enabled
                                ? fmt::format("{} heads", num_attention_heads)
                                : fmt::format("{} heads ({} query groups, head dim {})",
                                              num_attention_heads, query_groups(), kv_channels);
  return fmt::format(
      "{} layers, hidden {}, {}, ffn {}{}, {}, {}, vocab {} (padded {}), seq {}{}{}", num_layers,
      hidden_size, heads, ffn_hidden_size,
      swiglu ? " SwiGLU" : (squared_relu ? " squared ReLU" : " GELU"),
      normalization == Normalization::kLayerNorm ? "LayerNorm" : "RMSNorm",
      position_embedding_type == PositionEmbedding::kRope
          ? (rotary_interleaved ? "RoPE (interleaved)" : "RoPE")
      : position_embedding_type == PositionEmbedding::kLearnedAbsolute ? "learned positions"
                                                                       : "no positions",
      vocab_size, padded_vocab_size(1), seq_length,
      !is_moe()
          ? ""
          : fmt::format(
                ", MoE {} experts top-{}{}{}", num_experts, moe_router_topk,
                moe_router_load_balancing_type == RouterLoadBalancing::kSinkhorn ? " (Sinkhorn)"
                                                                                 : "",
                num_moe_layers() < num_layers ? fmt::format(" in {} layers", num_moe_layers())
                                              : ""),
      mla.enabled
          ? fmt::format(", MLA (q rank {}, kv rank {}, qk {}+{}, v {})", mla.q_lora_rank,
                        mla.kv_lora_rank, mla.qk_head_dim, mla.qk_pos_emb_head_dim, mla.v_head_dim)
          : "");
}

}  // namespace mtron
