#include "mtron/core/model_flags.h"

#include <map>
#include <string>

namespace mtron {

void add_model_flags(CLI::App& app, ModelConfig& m) {
  const char* g = "Model";
  app.add_option("--num-layers", m.num_layers, "Number of transformer layers")->group(g);
  app.add_option("--hidden-size", m.hidden_size, "Transformer hidden size")->group(g);
  app.add_option("--num-attention-heads", m.num_attention_heads, "Number of attention heads")
      ->group(g);
  app.add_option("--ffn-hidden-size", m.ffn_hidden_size,
                 "MLP hidden size (default 4h, or int(8h/3/64)*64 with --swiglu)")
      ->group(g);
  app.add_option("--kv-channels", m.kv_channels, "Attention head dimension (default h/heads)")
      ->group(g);
  app.add_flag("--group-query-attention", m.group_query_attention, "Use grouped-query attention")
      ->group(g);
  app.add_option("--num-query-groups", m.num_query_groups,
                 "Number of key/value groups (with --group-query-attention)")
      ->group(g);
  app.add_flag("--swiglu", m.swiglu, "SwiGLU MLP instead of GELU")->group(g);
  app.add_option("--normalization", m.normalization, "LayerNorm or RMSNorm")
      ->transform(CLI::CheckedTransformer(std::map<std::string, Normalization>{
          {"LayerNorm", Normalization::kLayerNorm}, {"RMSNorm", Normalization::kRMSNorm}}))
      ->group(g);
  app.add_option("--norm-epsilon", m.norm_epsilon, "Epsilon of the norms (default 1e-5)")->group(g);
  app.add_option("--position-embedding-type", m.position_embedding_type,
                 "learned_absolute, rope or none")
      ->transform(CLI::CheckedTransformer(std::map<std::string, PositionEmbedding>{
          {"learned_absolute", PositionEmbedding::kLearnedAbsolute},
          {"rope", PositionEmbedding::kRope},
          {"none", PositionEmbedding::kNone}}))
      ->group(g);
  app.add_option("--rotary-base", m.rotary_base, "RoPE base (default 10000)")->group(g);
  app.add_option("--rotary-percent", m.rotary_percent, "Fraction of head dims rotated by RoPE")
      ->group(g);
  app.add_flag("--untie-embeddings-and-output-weights", m.untie_embeddings_and_output_weights,
               "Separate output layer instead of the tied word embeddings")
      ->group(g);
  app.add_flag_callback(
         "--disable-bias-linear", [&m] { m.add_bias_linear = false; },
         "No biases in the linear layers")
      ->group(g);
  app.add_option("--make-vocab-size-divisible-by", m.make_vocab_size_divisible_by,
                 "Pad the vocabulary to a multiple of this times TP (default 128)")
      ->group(g);
  app.add_option("--init-method-std", m.init_method_std, "Std of the normal init (default 0.02)")
      ->group(g);
  app.add_option("--seq-length", m.seq_length, "Sequence length")->group(g);
  app.add_option("--max-position-embeddings", m.max_position_embeddings,
                 "Positions of the learned position table (default: --seq-length)")
      ->group(g);
  app.add_option("--hidden-dropout", m.hidden_dropout, "Hidden dropout (mtron default 0.0)")
      ->group(g);
  app.add_option("--attention-dropout", m.attention_dropout,
                 "Attention dropout (mtron default 0.0)")
      ->group(g);

  const char* e = "Mixture of experts";
  app.add_option("--num-experts", m.num_experts, "Experts per MoE layer (default: dense)")
      ->group(e);
  app.add_option("--moe-ffn-hidden-size", m.moe_ffn_hidden_size, "Expert MLP hidden size")
      ->group(e);
  app.add_option("--moe-router-topk", m.moe_router_topk, "Experts per token (default 2)")->group(e);
  app.add_option("--moe-layer-freq", m.moe_layer_freq, "Every k-th layer is MoE (default 1)")
      ->group(e);
  app.add_option("--moe-shared-expert-intermediate-size", m.moe_shared_expert_intermediate_size,
                 "Shared expert hidden size (default: none)")
      ->group(e);
  app.add_option("--moe-router-load-balancing-type", m.moe_router_load_balancing_type,
                 "aux_loss, seq_aux_loss or none")
      ->transform(CLI::CheckedTransformer(std::map<std::string, RouterLoadBalancing>{
          {"aux_loss", RouterLoadBalancing::kAuxLoss},
          {"seq_aux_loss", RouterLoadBalancing::kSeqAuxLoss},
          {"none", RouterLoadBalancing::kNone}}))
      ->group(e);
  app.add_option("--moe-router-score-function", m.moe_router_score_function, "softmax or sigmoid")
      ->transform(CLI::CheckedTransformer(std::map<std::string, RouterScore>{
          {"softmax", RouterScore::kSoftmax}, {"sigmoid", RouterScore::kSigmoid}}))
      ->group(e);
  app.add_option("--moe-aux-loss-coeff", m.moe_aux_loss_coeff, "Aux loss coefficient (default 0)")
      ->group(e);
  app.add_option("--moe-z-loss-coeff", m.moe_z_loss_coeff, "Router z-loss coefficient")->group(e);
  app.add_option("--moe-expert-capacity-factor", m.moe_expert_capacity_factor,
                 "Capacity factor (default: dropless)")
      ->group(e);
  app.add_option("--moe-token-drop-policy", m.moe_token_drop_policy, "probs or position")
      ->transform(CLI::CheckedTransformer(std::map<std::string, TokenDropPolicy>{
          {"probs", TokenDropPolicy::kProbs}, {"position", TokenDropPolicy::kPosition}}))
      ->group(e);
}

}  // namespace mtron
