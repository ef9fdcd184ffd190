#include "mtron/core/model_flags.h"

#include <fmt/core.h>
#include <CLI/CLI.hpp>
#include <map>

#include "mtron/core/model_names.h"
#include "mtron/core/moe_layer_freq.h"

namespace mtron {
namespace {

const char* group(const std::string& flag) {
  return flag.rfind("--moe-", 0) == 0 || flag == "--num-experts" ? "Mixture of experts" : "Model";
}

template <typename T>
CLI::Option* opt(CLI::App& app, const std::string& name, T& var, T dflt, const std::string& help) {
  return app.add_option(name, var, help)
      ->default_val(dflt)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->group(group(name));
}

CLI::Option* flag(CLI::App& app, const std::string& name, bool& var, const std::string& help) {
  var = false;
  return app.add_flag(name, var, help)->group(group(name));
}

// A flag taking one of the names of `table` (core/model_names.h).
template <typename E, size_t N>
CLI::Option* choice(CLI::App& app,
                    const std::string& name,
                    E& var,
                    E dflt,
                    const EnumName<E> (&table)[N],
                    const std::string& help) {
  var = dflt;
  std::map<std::string, E> choices;
  for (const EnumName<E>& n : table) choices.emplace(n.name, n.value);
  std::string dflt_name, names;
  for (const auto& [k, v] : choices) {
    if (v == dflt) dflt_name = k;
    names += (names.empty() ? "{" : ",") + k;
  }
  return app.add_option(name, var, help)
      ->transform(CLI::CheckedTransformer(choices).description(names + "}"))
      ->type_name("TEXT")
      ->default_str(dflt_name)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->group(group(name));
}

}  // namespace

void add_model_flags(CLI::App& app, ModelConfig& m) {
  // Network size.
  opt<int64_t>(app, "--num-layers", m.num_layers, 0, "Number of transformer layers.");
  opt<int64_t>(app, "--hidden-size", m.hidden_size, 0, "Transformer hidden size.");
  opt<int64_t>(app, "--ffn-hidden-size", m.ffn_hidden_size, 0,
               "Transformer Feed-Forward Network hidden size. This is set to 4*hidden-size if "
               "not provided (int(8*hidden-size/3/64)*64 with --swiglu). 0: the default.");
  opt<int64_t>(app, "--num-attention-heads", m.num_attention_heads, 0,
               "Number of transformer attention heads.");
  opt<int64_t>(app, "--kv-channels", m.kv_channels, 0,
               "Projection weights dimension in multi-head attention. This is set to "
               "hidden-size // num-attention-heads if not provided. 0: the default.");
  flag(app, "--group-query-attention", m.group_query_attention, "Use group-query attention.");
  opt<int64_t>(app, "--num-query-groups", m.num_query_groups, 1,
               "Number of query groups (key/value heads) with --group-query-attention.");
  opt<int64_t>(app, "--max-position-embeddings", m.max_position_embeddings, 0,
               "Maximum number of position embeddings to use. This is the size of position "
               "embedding. 0: --seq-length.");
  choice(app, "--position-embedding-type", m.position_embedding_type,
         PositionEmbedding::kLearnedAbsolute, kPositionEmbeddingNames, "Position embedding type.");
  app.add_flag_callback(
         "--no-position-embedding", [&m] { m.add_position_embedding = false; },
         "Disable position embedding. Deprecated: use --position-embedding-type (only valid with "
         "rope, where it changes nothing).")
      ->group("Model");
  m.add_position_embedding = true;
  // Megatron's legacy flag: rope whatever --position-embedding-type says (its callback runs after
  // that option's).
  app.add_flag_callback(
         "--use-rotary-position-embeddings",
         [&m] { m.position_embedding_type = PositionEmbedding::kRope; },
         "Use rotary positional embeddings. Deprecated: use --position-embedding-type rope.")
      ->group("Model");
  opt<float>(app, "--rotary-base", m.rotary_base, 10000.0f,
             "Base to use for rotary positional "
             "embeddings.");
  opt<float>(app, "--rotary-percent", m.rotary_percent, 1.0f,
             "Percent of rotary dimension to use.");
  flag(app, "--use-rope-scaling", m.rope_scaling, "Apply rope scaling as used in llama3.x");
  flag(app, "--rotary-interleaved", m.rotary_interleaved, "Use interleaved rotary embedding.");
  opt<float>(app, "--rope-scaling-factor", m.rope_scaling_factor, 8.0f,
             "Rope scaling factor in llama3.x models");
  opt<int64_t>(app, "--make-vocab-size-divisible-by", m.make_vocab_size_divisible_by, 128,
               "Pad the vocab size to be divisible by this value (times the tensor parallel "
               "size). This is added for computational efficiency reasons.");
  choice(app, "--normalization", m.normalization, Normalization::kLayerNorm, kNormalizationNames,
         "Which normalization technique to use.");
  opt<float>(app, "--norm-epsilon", m.norm_epsilon, 1e-5f, "Epsilon for layer norm and RMS norm.");
  flag(app, "--apply-layernorm-1p", m.apply_layernorm_1p,
       "Adjust LayerNorm weights such that they are centered around zero. This improves "
       "numerical stability.");
  flag(app, "--qk-layernorm", m.qk_layernorm,
       "Whether to layer normalize the q and k attention embeddings.");
  flag(app, "--swiglu", m.swiglu, "Use gated linear units and SiLU activation instead of GeLU.");
  flag(app, "--squared-relu", m.squared_relu,
       "Use squared relu activation instead of default gelu");
  flag(app, "--untie-embeddings-and-output-weights", m.untie_embeddings_and_output_weights,
       "Untie embeddings and output weights.");
  app.add_flag_callback(
         "--disable-bias-linear", [&m] { m.add_bias_linear = false; },
         "Disable bias in the linear layers.")
      ->group("Model");
  m.add_bias_linear = true;
  flag(app, "--add-qkv-bias", m.add_qkv_bias,
       "Enable bias only in the QKV linear layers (with --disable-bias-linear; not with MLA).");
  opt<int64_t>(app, "--seq-length", m.seq_length, 0, "Maximum sequence length to process.");
  opt<float>(app, "--init-method-std", m.init_method_std, 0.02f,
             "Standard deviation of the zero mean normal distribution used for weight "
             "initialization.");
  opt<float>(app, "--hidden-dropout", m.hidden_dropout, 0.1f,
             "Dropout probability for hidden state transformer (the embeddings' output and each "
             "attention and MLP output before its residual add; training only; the same Philox "
             "masks on --device cpu and cuda).");
  opt<float>(app, "--attention-dropout", m.attention_dropout, 0.1f,
             "Post attention dropout probability (on the softmax probabilities; training only; "
             "the same Philox masks on --device cpu and cuda).");

  add_mla_flags(app, m.mla);

  // Mixture of experts.
  opt<int64_t>(app, "--num-experts", m.num_experts, 0,
               "Number of Experts in MoE (None means no MoE). 0: dense.");
  opt<int64_t>(app, "--moe-ffn-hidden-size", m.moe_ffn_hidden_size, 0,
               "The hidden size of each expert. 0: --ffn-hidden-size.");
  opt<int64_t>(app, "--moe-router-topk", m.moe_router_topk, 2,
               "Number of experts to route to for each token.");
  m.moe_layer_freq = 1;
  m.moe_layer_pattern.clear();
  app.add_option_function<std::string>(
         "--moe-layer-freq",
         [&m](const std::string& s) {
           parse_moe_layer_freq(s, m.moe_layer_freq, m.moe_layer_pattern);
         },
         "Frequency between MoE layers and Dense layers. Accepts either: an integer N: one expert "
         "layer every N layers (from layer 0), or a Python list expression of 1 (MoE) and 0 "
         "(dense) per layer, e.g. \"([0]*3+[1]*58)\" or \"[0,1,1]\".")
      ->default_str("1")
      ->type_name("TEXT")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->group(group("--moe-layer-freq"));
  opt<int64_t>(app, "--moe-shared-expert-intermediate-size", m.moe_shared_expert_intermediate_size,
               0, "Shared expert total ffn hidden size. 0: no shared experts.");
  choice(app, "--moe-router-load-balancing-type", m.moe_router_load_balancing_type,
         RouterLoadBalancing::kAuxLoss, kRouterLoadBalancingNames,
         "Determines the load balancing strategy for the router.");
  choice(app, "--moe-router-score-function", m.moe_router_score_function, RouterScore::kSoftmax,
         kRouterScoreNames, "Score function for MoE TopK routing.");
  opt<float>(app, "--moe-aux-loss-coeff", m.moe_aux_loss_coeff, 0.0f,
             "Scaling coefficient for the aux loss: a starting value of 1e-2 is recommended.");
  opt<float>(app, "--moe-z-loss-coeff", m.moe_z_loss_coeff, 0.0f,
             "Scaling coefficient for the z-loss: a starting value of 1e-3 is recommended.");
  opt<float>(app, "--moe-expert-capacity-factor", m.moe_expert_capacity_factor, 0.0f,
             "The capacity factor for each expert. 0 (None): no token will be dropped.");
  choice(app, "--moe-token-drop-policy", m.moe_token_drop_policy, TokenDropPolicy::kProbs,
         kTokenDropPolicyNames,
         "The policy to drop tokens: 'probs' drops those with the lowest probabilities, "
         "'position' those at the end of each batch.");
  opt<int64_t>(app, "--moe-router-num-groups", m.moe_router_num_groups, 0,
               "Number of groups to divide experts into for group-limited routing. 0: None.");
  opt<int64_t>(app, "--moe-router-group-topk", m.moe_router_group_topk, 0,
               "Number of selected groups for group-limited routing. 0: None.");
  opt<float>(app, "--moe-router-topk-scaling-factor", m.moe_router_topk_scaling_factor, 0.0f,
             "Scaling factor for routing score in top-k selection. 0: None (no scaling).");
  flag(app, "--moe-router-pre-softmax", m.moe_router_pre_softmax,
       "Enable pre-softmax routing for MoE, which means softmax is before the top-k selection "
       "(softmax scores; no effect with sigmoid).");
  flag(app, "--moe-router-enable-expert-bias", m.moe_router_enable_expert_bias,
       "TopK routing with dynamic per-expert bias in the aux-loss-free load balancing strategy "
       "(sigmoid scores only).");
  opt<float>(app, "--moe-router-bias-update-rate", m.moe_router_bias_update_rate, 1e-3f,
             "The expert bias update rate: after each global batch the bias of each expert moves "
             "by this much towards the mean load.");
  opt<int64_t>(app, "--mtp-num-layers", m.mtp_num_layers, 0,
               "Number of Multi-Token Prediction (MTP) Layers. MTP extends the prediction scope "
               "to multiple future tokens at each position. 0: None (no MTP).");
  opt<float>(app, "--mtp-loss-scaling-factor", m.mtp_loss_scaling_factor, 0.1f,
             "Scaling factor of Multi-Token Prediction (MTP) loss. We compute the average of the "
             "MTP losses across all depths, and multiply it the scaling factor to obtain the "
             "overall MTP loss, which serves as an additional training objective.");
}

std::vector<std::string> model_flag_args(const ModelConfig& m) {
  std::vector<std::string> a;
  auto add = [&](const char* flag, auto v) {
    a.push_back(flag);
    a.push_back(fmt::format("{}", v));
  };
  auto on = [&](const char* flag, bool v) {
    if (v) a.push_back(flag);
  };
  add("--num-layers", m.num_layers);
  add("--hidden-size", m.hidden_size);
  add("--ffn-hidden-size", m.ffn_hidden_size);
  add("--num-attention-heads", m.num_attention_heads);
  add("--kv-channels", m.kv_channels);
  on("--group-query-attention", m.group_query_attention);
  if (m.group_query_attention) add("--num-query-groups", m.num_query_groups);
  add("--max-position-embeddings", m.max_position_embeddings);
  add("--position-embedding-type", name_of(kPositionEmbeddingNames, m.position_embedding_type));
  if (m.position_embedding_type == PositionEmbedding::kRope) {
    add("--rotary-base", m.rotary_base);
    add("--rotary-percent", m.rotary_percent);
    on("--use-rope-scaling", m.rope_scaling);
    if (m.rope_scaling) add("--rope-scaling-factor", m.rope_scaling_factor);
    on("--rotary-interleaved", m.rotary_interleaved);
  }
  add("--make-vocab-size-divisible-by", m.make_vocab_size_divisible_by);
  add("--normalization", name_of(kNormalizationNames, m.normalization));
  add("--norm-epsilon", m.norm_epsilon);
  on("--apply-layernorm-1p", m.apply_layernorm_1p);
  on("--qk-layernorm", m.qk_layernorm);
  on("--swiglu", m.swiglu);
  on("--squared-relu", m.squared_relu);
  on("--untie-embeddings-and-output-weights", m.untie_embeddings_and_output_weights);
  on("--disable-bias-linear", !m.add_bias_linear);
  on("--add-qkv-bias", m.add_qkv_bias && !m.add_bias_linear);
  add("--seq-length", m.seq_length);
  add("--vocab-size", m.vocab_size);
  add("--init-method-std", m.init_method_std);
  add("--hidden-dropout", m.hidden_dropout);
  add("--attention-dropout", m.attention_dropout);
  mla_flag_args(m.mla, a);
  if (m.mtp_num_layers > 0) {
    add("--mtp-num-layers", m.mtp_num_layers);
    add("--mtp-loss-scaling-factor", m.mtp_loss_scaling_factor);
  }
  if (!m.is_moe()) return a;
  add("--num-experts", m.num_experts);
  add("--moe-ffn-hidden-size", m.moe_ffn_hidden_size);
  add("--moe-router-topk", m.moe_router_topk);
  add("--moe-layer-freq", moe_layer_freq_string(m.moe_layer_freq, m.moe_layer_pattern));
  if (m.moe_shared_expert_intermediate_size > 0)
    add("--moe-shared-expert-intermediate-size", m.moe_shared_expert_intermediate_size);
  add("--moe-router-load-balancing-type",
      name_of(kRouterLoadBalancingNames, m.moe_router_load_balancing_type));
  add("--moe-router-score-function", name_of(kRouterScoreNames, m.moe_router_score_function));
  add("--moe-aux-loss-coeff", m.moe_aux_loss_coeff);
  if (m.moe_z_loss_coeff > 0) add("--moe-z-loss-coeff", m.moe_z_loss_coeff);
  if (m.moe_expert_capacity_factor > 0) {
    add("--moe-expert-capacity-factor", m.moe_expert_capacity_factor);
    add("--moe-token-drop-policy", name_of(kTokenDropPolicyNames, m.moe_token_drop_policy));
  }
  if (m.moe_router_group_topk > 0) {
    add("--moe-router-num-groups", m.moe_router_num_groups);
    add("--moe-router-group-topk", m.moe_router_group_topk);
  }
  if (m.moe_router_topk_scaling_factor > 0)
    add("--moe-router-topk-scaling-factor", m.moe_router_topk_scaling_factor);
  if (m.moe_router_pre_softmax) a.push_back("--moe-router-pre-softmax");
  if (m.moe_router_enable_expert_bias) {
    a.push_back("--moe-router-enable-expert-bias");
    add("--moe-router-bias-update-rate", m.moe_router_bias_update_rate);
  }
  return a;
}

}  // namespace mtron
