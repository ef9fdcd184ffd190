// defines: ModelConfig, Normalization, PositionEmbedding, RouterLoadBalancing
//
// The shape of a GPT/Llama/MoE model in Megatron's terms. It lives in core, not model/, because
// the planner (plan/, which depends on core only) and the trainer must share one definition and
// one set of formulas (core/formulas.h). Fields named as Megatron's flags, minus the dashes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "mtron/core/mla_config.h"

namespace mtron {

enum class Normalization { kLayerNorm, kRMSNorm };
enum class PositionEmbedding { kLearnedAbsolute, kRope, kNone };
enum class RouterLoadBalancing { kAuxLoss, kSeqAuxLoss, kSinkhorn, kNone };
enum class RouterScore { kSoftmax, kSigmoid };
enum class TokenDropPolicy { kProbs, kPosition };
// The MLP's activation: GELU (tanh approximation), SwiGLU (--swiglu: fc1 twice as wide, gate
// and up) or squared ReLU (--squared-relu).
enum class MlpActivation { kGelu, kSwiglu, kSquaredRelu };

struct ModelConfig {
  int64_t num_layers = 0;
  int64_t hidden_size = 0;
  int64_t num_attention_heads = 0;
  bool group_query_attention = false;
  int64_t num_query_groups = 1;  // used only with group_query_attention (Megatron's rule)
  int64_t kv_channels = 0;       // 0: hidden_size / num_attention_heads
  int64_t ffn_hidden_size = 0;   // 0: 4h, or int(8h/3/64)*64 with --swiglu
  bool swiglu = false;
  bool squared_relu = false;  // --squared-relu: relu(x)^2 instead of GELU (Nemotron-4)
  Normalization normalization = Normalization::kLayerNorm;
  float norm_epsilon = 1e-5f;
  // --apply-layernorm-1p: norm weights are stored zero-centred (initialised to 0) and applied as
  // 1 + weight (Megatron's LayerNorm1P, TransformerConfig.layernorm_zero_centered_gamma).
  bool apply_layernorm_1p = false;
  // --qk-layernorm: each head's query and key rows normalised over head_dim (the model's
  // normalization, weights of size head_dim shared by all heads) before RoPE.
  bool qk_layernorm = false;
  PositionEmbedding position_embedding_type = PositionEmbedding::kLearnedAbsolute;
  float rotary_base = 10000.0f;
  float rotary_percent = 1.0f;
  bool rope_scaling = false;         // --use-rope-scaling: Llama 3.x's frequencies
  bool rotary_interleaved = false;   // --rotary-interleaved: RoPE pairs (2i, 2i + 1)
  float rope_scaling_factor = 8.0f;  // --rope-scaling-factor
  // --no-position-embedding clears it: Megatron's deprecated switch, valid with rope only
  // (where there is no learned position table to drop).
  bool add_position_embedding = true;
  bool untie_embeddings_and_output_weights = false;
  bool add_bias_linear = true;  // --disable-bias-linear clears it
  bool add_qkv_bias = false;    // --add-qkv-bias: the QKV projection's bias without the others'
  int64_t make_vocab_size_divisible_by = 128;
  float init_method_std = 0.02f;
  int64_t seq_length = 0;
  int64_t max_position_embeddings = 0;
  int64_t vocab_size = 0;       // the tokenizer's vocabulary, before padding
  float hidden_dropout = 0.0f;  // the flags default both to Megatron's 0.1 (model_flags.h)
  float attention_dropout = 0.0f;

  // Mixture of experts (num_experts == 0: dense).
  int64_t num_experts = 0;
  int64_t moe_ffn_hidden_size = 0;  // 0: ffn_hidden_size
  int64_t moe_router_topk = 2;
  int64_t moe_layer_freq = 1;  // every k-th layer is MoE
  // --moe-layer-freq as a list (core/moe_layer_freq.h): 1 MoE, 0 dense, per layer; empty: the
  // integer form.
  std::vector<int64_t> moe_layer_pattern;
  int64_t moe_shared_expert_intermediate_size = 0;
  RouterLoadBalancing moe_router_load_balancing_type = RouterLoadBalancing::kAuxLoss;
  RouterScore moe_router_score_function = RouterScore::kSoftmax;
  float moe_aux_loss_coeff = 0.0f;
  float moe_z_loss_coeff = 0.0f;
  float moe_expert_capacity_factor = 0.0f;  // <= 0: dropless
  TokenDropPolicy moe_token_drop_policy = TokenDropPolicy::kProbs;
  // DeepSeek-style routing (Megatron's TopKRouter): group-limited top-k (0: off), a factor on
  // the routing weights (0: none), the aux-loss-free expert bias and its update rate.
  int64_t moe_router_num_groups = 0;
  int64_t moe_router_group_topk = 0;
  float moe_router_topk_scaling_factor = 0.0f;
  // --moe-router-pre-softmax: with softmax scores, the softmax over all experts before the top-k
  // (the chosen probabilities, not renormalised) instead of a softmax over the top-k logits; no
  // effect with sigmoid scores (as in Megatron).
  bool moe_router_pre_softmax = false;
  bool moe_router_enable_expert_bias = false;
  float moe_router_bias_update_rate = 1e-3f;

  MlaConfig mla;  // multi-latent attention (mla.enabled), replacing the QKV projection

  // Multi-token prediction (DeepSeek-V3; Megatron-Core's MultiTokenPredictionBlock): this many
  // extra depths on the last pipeline stage, each predicting one token further (0: none,
  // Megatron's None). Their mean loss times mtp_loss_scaling_factor joins the gradient only.
  int64_t mtp_num_layers = 0;
  float mtp_loss_scaling_factor = 0.1f;

  // Fills defaults (ffn size, query groups, kv channels, max positions) and checks the shape,
  // throwing mtron::Error with a message naming the flag. Call once after parsing.
  void finalize();

  int64_t query_groups() const {
    return group_query_attention ? num_query_groups : num_attention_heads;
  }
  int64_t head_dim() const { return kv_channels; }
  // The attention kernel's query/key and value head dims: kv_channels, or MLA's.
  int64_t qk_dim() const { return mla.enabled ? mla.q_head_dim() : kv_channels; }
  int64_t v_dim() const { return mla.enabled ? mla.v_head_dim : kv_channels; }
  int64_t q_size() const { return num_attention_heads * kv_channels; }
  // Whether the (non-MLA) QKV projection has a bias: with every linear layer's, or alone
  // (--add-qkv-bias), as Megatron's SelfAttention.
  bool qkv_bias() const { return add_bias_linear || add_qkv_bias; }
  int64_t kv_size() const { return query_groups() * kv_channels; }
  // Per token, the widths of the q, k, v and output tensors the attention kernel reads and writes
  // (what context parallelism exchanges): heads x head dims; k and v GQA's groups, or MLA's
  // per-head expanded keys and values.
  int64_t attention_q_width() const { return num_attention_heads * qk_dim(); }
  int64_t attention_o_width() const { return num_attention_heads * v_dim(); }
  int64_t attention_k_width() const { return mla.enabled ? attention_q_width() : kv_size(); }
  int64_t attention_v_width() const { return mla.enabled ? attention_o_width() : kv_size(); }
  int64_t ffn() const { return ffn_hidden_size; }
  MlpActivation activation() const {
    return swiglu ? MlpActivation::kSwiglu
                  : (squared_relu ? MlpActivation::kSquaredRelu : MlpActivation::kGelu);
  }
  int64_t moe_ffn() const { return moe_ffn_hidden_size; }
  bool is_moe() const { return num_experts > 0; }
  // Layers from num_layers up are the MTP depths' layers: of the last decoder layer's kind
  // (Megatron builds them from the last layer's spec).
  bool is_moe_layer(int64_t layer) const {
    if (!is_moe()) return false;
    layer = std::min(layer, num_layers - 1);
    return moe_layer_pattern.empty() ? layer % moe_layer_freq == 0
                                     : moe_layer_pattern[size_t(layer)] == 1;
  }
  // MoE layers of the decoder, and of the MTP depths (0 or mtp_num_layers).
  int64_t num_moe_layers() const;
  int64_t num_mtp_moe_layers() const { return is_moe_layer(num_layers) ? mtp_num_layers : 0; }
  int64_t rotary_dim() const;
  // Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by * TP.
  int64_t padded_vocab_size(int64_t tp) const;
  // Total parameters (global, unsharded, unpadded by TP=1's padded vocab), with and without the
  // embedding tables.
  int64_t num_parameters(int64_t tp = 1) const;
  std::string summary() const;
};

}  // namespace mtron
