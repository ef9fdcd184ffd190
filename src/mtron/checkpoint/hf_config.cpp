#include "mtron/checkpoint/hf_config.h"

#include <fmt/format.h>

#include <cmath>
#include <type_traits>

#include "mtron/checkpoint/file_io.h"
#include "mtron/checkpoint/safetensors.h"
#include "mtron/core/error.h"

namespace mtron::checkpoint {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

namespace {

// Why the Llama-family class `name` (ending in a space) cannot express `c`'s dense part ("" if it
// can).
std::string llama_family_reason(const ModelConfig& c, const std::string& name) {
  if (c.normalization != Normalization::kRMSNorm ||
      c.position_embedding_type != PositionEmbedding::kRope || !c.swiglu)
    return name + "is RMSNorm, RoPE and SwiGLU";
  if (c.rotary_percent != 1.0f) return name + "rotates every channel (--rotary-percent 1)";
  return "";
}

// Why the softmax top-k router of `name` (Mixtral's, Qwen3-MoE's with norm_topk_prob) cannot
// express `c`'s routing ("" if it can).
std::string softmax_router_reason(const ModelConfig& c, const std::string& name) {
  if (c.moe_router_score_function != RouterScore::kSoftmax)
    return name + "routes by softmax (not --moe-router-score-function sigmoid)";
  if (c.moe_router_load_balancing_type == RouterLoadBalancing::kSinkhorn)
    return name + "weighs by softmax (not --moe-router-load-balancing-type sinkhorn)";
  if (c.moe_shared_expert_intermediate_size > 0)
    return name + "has no shared experts (--moe-shared-expert-intermediate-size)";
  if (c.moe_router_group_topk > 0 || c.moe_router_topk_scaling_factor > 0 ||
      c.moe_router_enable_expert_bias)
    return name + "routes without groups, scaling factor or expert bias";
  return "";
}

// DeepSeek-V3's layer pattern: first_k_dense_replace dense layers, then experts in every layer
// (-1 when the model has another pattern).
int64_t first_k_dense(const ModelConfig& c) {
  int64_t k = 0;
  while (k < c.num_layers && !c.is_moe_layer(k)) ++k;
  for (int64_t l = k; l < c.num_layers; ++l)
    if (!c.is_moe_layer(l)) return -1;
  return k;
}

std::string deepseek_reason(const ModelConfig& c, const std::string& name) {
  std::string why = llama_family_reason(c, name);
  if (!why.empty()) return why;
  if (c.add_bias_linear) return name + "has no biases (--disable-bias-linear)";
  if (!c.qk_layernorm)
    return name + "has the latent norms q_a_layernorm/kv_a_layernorm (--qk-layernorm)";
  if (!c.is_moe()) return name + "has routed experts (--num-experts)";
  if (c.moe_router_score_function != RouterScore::kSigmoid)
    return name + "routes by sigmoid scores (--moe-router-score-function sigmoid)";
  if (first_k_dense(c) < 0)
    return name + "has its dense layers first, then experts in every layer (--moe-layer-freq)";
  if (c.moe_shared_expert_intermediate_size % c.moe_ffn() != 0)
    return name +
           "has shared experts of --moe-ffn-hidden-size each "
           "(--moe-shared-expert-intermediate-size a multiple of it)";
  if (c.moe_router_group_topk > 0 && c.moe_router_topk != 2 * c.moe_router_group_topk)
    return name +
           "scores a group by its top 2 experts (--moe-router-topk = 2 x "
           "--moe-router-group-topk)";
  return "";
}

std::string arch_reason(const ModelConfig& c, HfArch arch) {
  const std::string name = std::string(hf_arch_name(arch)) + " ";
  if (c.add_qkv_bias && !c.add_bias_linear && !c.mla.enabled)
    return name + "has no bias on the QKV projection alone (--add-qkv-bias)";
  if (c.rope_scaling && arch != HfArch::kLlama)
    return name +
           "is exported without Llama 3.x's rope_scaling (--use-rope-scaling): LlamaForCausalLM "
           "has it";
  switch (arch) {
    case HfArch::kDeepseekV3:
      return deepseek_reason(c, name);
    case HfArch::kGPT2:
      if (!c.add_bias_linear) return name + "needs biases (no --disable-bias-linear)";
      if (c.query_groups() != c.num_attention_heads) return name + "has no grouped-query attention";
      if (c.kv_channels * c.num_attention_heads != c.hidden_size)
        return name + "needs --kv-channels = hidden / heads";
      return "";
    case HfArch::kLlama:
      return llama_family_reason(c, name);
    case HfArch::kQwen3:
    case HfArch::kMixtral:
    case HfArch::kQwen3Moe: {
      std::string why = llama_family_reason(c, name);
      if (why.empty() && c.add_bias_linear) why = name + "has no biases (--disable-bias-linear)";
      if (arch == HfArch::kQwen3) return why;
      if (why.empty()) why = softmax_router_reason(c, name);
      if (why.empty() && arch == HfArch::kMixtral && c.num_moe_layers() != c.num_layers)
        why = name + "has experts in every layer (--moe-layer-freq 1)";
      if (why.empty() && arch == HfArch::kMixtral && c.moe_router_pre_softmax)
        why = name + "renormalises the top-k probabilities (no --moe-router-pre-softmax)";
      return why;
    }
  }
  return "";
}

json::number_float_t as_double(float x) {  // the float's shortest decimal, as config.json has it
  return std::stod(fmt::format("{}", x));
}

template <typename T>
T cfg_get(const json& j, const char* key, const std::string& file) {
  MT_CHECK(j.contains(key) && !j[key].is_null(), file, ": missing '", key, "'");
  if constexpr (std::is_same_v<T, bool>) {
    MT_CHECK(j[key].is_boolean(), file, ": '", key, "' is not a boolean");
  } else if constexpr (std::is_integral_v<T>) {  // get<int>() of a float is UB when out of range
    MT_CHECK(j[key].is_number_integer(), file, ": '", key, "' is not an integer");
  }
  try {
    return j[key].get<T>();
  } catch (const json::exception&) {
    MT_CHECK(false, file, ": '", key, "' has the wrong type");
  }
  return T{};
}
template <typename T>
T cfg_or(const json& j, const char* key, T fallback, const std::string& file) {
  return j.contains(key) && !j[key].is_null() ? cfg_get<T>(j, key, file) : fallback;
}

void read_gpt2(const json& j, const std::string& file, ModelConfig& m) {
  m.hidden_size = cfg_get<int64_t>(j, "n_embd", file);
  m.num_layers = cfg_get<int64_t>(j, "n_layer", file);
  m.num_attention_heads = cfg_get<int64_t>(j, "n_head", file);
  m.max_position_embeddings = cfg_get<int64_t>(j, "n_positions", file);
  m.ffn_hidden_size = cfg_or<int64_t>(j, "n_inner", 4 * m.hidden_size, file);
  const auto act = cfg_or<std::string>(j, "activation_function", "gelu_new", file);
  MT_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh", file, ": activation_function '", act,
           "' is not supported (mtron's GELU is the tanh approximation, gelu_new)");
  m.norm_epsilon = float(cfg_or<double>(j, "layer_norm_epsilon", 1e-5, file));
  m.untie_embeddings_and_output_weights = !cfg_or<bool>(j, "tie_word_embeddings", true, file);
}

// The Llama family's shared fields (attention, dense MLP, norms, RoPE, embeddings).
// The fields Llama-style configs share (the Llama family and DeepSeek-V3): sizes, SwiGLU, RMSNorm,
// RoPE, embeddings.
void read_llama_common(const json& j, const std::string& file, ModelConfig& m) {
  m.hidden_size = cfg_get<int64_t>(j, "hidden_size", file);
  m.num_layers = cfg_get<int64_t>(j, "num_hidden_layers", file);
  m.num_attention_heads = cfg_get<int64_t>(j, "num_attention_heads", file);
  m.ffn_hidden_size = cfg_get<int64_t>(j, "intermediate_size", file);
  m.max_position_embeddings = cfg_get<int64_t>(j, "max_position_embeddings", file);
  const auto act = cfg_or<std::string>(j, "hidden_act", "silu", file);
  MT_CHECK(act == "silu", file, ": hidden_act '", act, "' is not supported (SwiGLU uses silu)");
  m.swiglu = true;
  m.normalization = Normalization::kRMSNorm;
  m.position_embedding_type = PositionEmbedding::kRope;
  m.norm_epsilon = float(cfg_or<double>(j, "rms_norm_eps", 1e-6, file));
  m.rotary_base = float(cfg_or<double>(j, "rope_theta", 10000.0, file));
  m.untie_embeddings_and_output_weights = !cfg_or<bool>(j, "tie_word_embeddings", false, file);
}

// Llama 3.x's rope_scaling (transformers' "llama3" rope_type) with Megatron's constants, the only
// scaling mtron's standard attention has (--use-rope-scaling).
constexpr double kLlama3LowFreq = 1.0, kLlama3HighFreq = 4.0, kLlama3Context = 8192.0;

void read_llama3_rope_scaling(const json& j, const std::string& file, ModelConfig& m) {
  if (!j.contains("rope_scaling") || j["rope_scaling"].is_null()) return;
  const json& r = j["rope_scaling"];
  MT_CHECK(r.is_object(), file, ": rope_scaling is not an object");
  const std::string type =
      cfg_or<std::string>(r, "rope_type", cfg_or<std::string>(r, "type", "", file), file);
  MT_CHECK(type == "llama3", file, ": rope_scaling type '", type,
           "' is not supported (mtron's standard attention has plain RoPE or Llama 3.x's "
           "'llama3' scaling)");
  const auto want = [&](const char* key, double v) {
    const double got = cfg_or<double>(r, key, -1.0, file);
    MT_CHECK(got == v, file, ": rope_scaling ", key, " ", got,
             " is not supported (mtron's Llama 3.x scaling, as Megatron's --use-rope-scaling, has ",
             v, ")");
  };
  want("low_freq_factor", kLlama3LowFreq);
  want("high_freq_factor", kLlama3HighFreq);
  want("original_max_position_embeddings", kLlama3Context);
  m.rope_scaling = true;
  m.rope_scaling_factor = float(cfg_or<double>(r, "factor", 8.0, file));
}

ordered_json llama3_rope_scaling(const ModelConfig& c) {
  if (!c.rope_scaling) return nullptr;
  ordered_json r;
  r["factor"] = as_double(c.rope_scaling_factor);
  r["high_freq_factor"] = kLlama3HighFreq;
  r["low_freq_factor"] = kLlama3LowFreq;
  r["original_max_position_embeddings"] = int64_t(kLlama3Context);
  r["rope_type"] = "llama3";
  return r;
}

void read_llama_family(const json& j, const std::string& file, ModelConfig& m) {
  read_llama_common(j, file, m);
  read_llama3_rope_scaling(j, file, m);
  const auto kv = cfg_or<int64_t>(j, "num_key_value_heads", m.num_attention_heads, file);
  m.group_query_attention = kv != m.num_attention_heads;
  m.num_query_groups = kv;
  m.kv_channels = cfg_or<int64_t>(j, "head_dim", 0, file);
  MT_CHECK(!cfg_or<bool>(j, "use_sliding_window", false, file), file,
           ": use_sliding_window is not supported (mtron's attention is full causal)");
  const bool ab = cfg_or<bool>(j, "attention_bias", false, file);
  const bool mb = cfg_or<bool>(j, "mlp_bias", false, file);
  MT_CHECK(ab == mb, file,
           ": attention_bias and mlp_bias differ (Megatron has one switch, --disable-bias-linear)");
  m.add_bias_linear = ab;
}

void read_mixtral(const json& j, const std::string& file, ModelConfig& m) {
  m.num_experts = cfg_get<int64_t>(j, "num_local_experts", file);
  m.moe_router_topk = cfg_get<int64_t>(j, "num_experts_per_tok", file);
  m.moe_ffn_hidden_size = m.ffn_hidden_size;
  m.moe_aux_loss_coeff = float(cfg_or<double>(j, "router_aux_loss_coef", 0.0, file));
  MT_CHECK(cfg_or<double>(j, "router_jitter_noise", 0.0, file) == 0.0, file,
           ": router_jitter_noise is not supported (mtron's router has no jitter)");
  const auto window = cfg_or<int64_t>(j, "sliding_window", 0, file);
  MT_CHECK(window == 0 || window >= m.max_position_embeddings, file, ": sliding_window ", window,
           " is not supported (mtron's attention is full causal)");
}

// Qwen3-MoE: layer l has experts iff l is not in mlp_only_layers and (l + 1) is a multiple of
// decoder_sparse_step; that pattern becomes --moe-layer-freq's list.
void read_qwen3_moe(const json& j, const std::string& file, ModelConfig& m) {
  m.num_experts = cfg_get<int64_t>(j, "num_experts", file);
  m.moe_router_topk = cfg_get<int64_t>(j, "num_experts_per_tok", file);
  m.moe_ffn_hidden_size = cfg_get<int64_t>(j, "moe_intermediate_size", file);
  m.moe_aux_loss_coeff = float(cfg_or<double>(j, "router_aux_loss_coef", 0.0, file));
  // norm_topk_prob false keeps the chosen probabilities of the softmax over all experts:
  // Megatron's --moe-router-pre-softmax.
  m.moe_router_pre_softmax = !cfg_or<bool>(j, "norm_topk_prob", false, file);
  const auto step = cfg_or<int64_t>(j, "decoder_sparse_step", 1, file);
  MT_CHECK(step >= 1, file, ": decoder_sparse_step ", step, " must be at least 1");
  m.moe_layer_pattern.assign(size_t(m.num_layers), 0);
  for (int64_t l = 0; l < m.num_layers; ++l) m.moe_layer_pattern[size_t(l)] = (l + 1) % step == 0;
  if (j.contains("mlp_only_layers") && !j["mlp_only_layers"].is_null()) {
    MT_CHECK(j["mlp_only_layers"].is_array(), file, ": 'mlp_only_layers' is not a list");
    for (const json& l : j["mlp_only_layers"]) {
      MT_CHECK(l.is_number_integer() && l.get<int64_t>() >= 0 && l.get<int64_t>() < m.num_layers,
               file, ": mlp_only_layers entry ", l.dump(), " is not a layer index");
      m.moe_layer_pattern[size_t(l.get<int64_t>())] = 0;
    }
  }
}

// MLA's YaRN (core/mla_config.h) as DeepseekV3Config's rope_scaling (transformers' "yarn"):
// null at factor 1. transformers takes the cos/sin factor from mscale / mscale_all_dim only when
// both are non-zero, so attention_factor is written where Megatron's differs from that rule.
ordered_json deepseek_rope_scaling(const MlaConfig& a) {
  const double f = as_double(a.rotary_scaling_factor);
  if (f == 1.0) return nullptr;
  MT_CHECK(a.yarn(), "--rope-type rope with --rotary-scaling-factor ", f,
           " (Megatron scales MLA's softmax by YaRN's mscale without rotating by YaRN) has no "
           "Hugging Face form");
  ordered_json r;
  r["type"] = "yarn";
  r["rope_type"] = "yarn";
  r["factor"] = f;
  r["original_max_position_embeddings"] = MlaConfig::kYarnOriginalMaxPositions;
  r["beta_fast"] = MlaConfig::kYarnBetaFast;
  r["beta_slow"] = MlaConfig::kYarnBetaSlow;
  r["mscale"] = as_double(a.mscale);
  r["mscale_all_dim"] = as_double(a.mscale_all_dim);
  if ((a.mscale == 0 || a.mscale_all_dim == 0) && a.mscale != 1) {
    r["attention_factor"] = a.yarn_concentration();
  }
  return r;
}

// The reverse of deepseek_rope_scaling: HF's cos/sin factor (attention_factor, else
// get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) when both are non-zero, else
// get_mscale(factor, 1)) and softmax factor (get_mscale(factor, mscale_all_dim)^2, 1 without
// mscale_all_dim) expressed as Megatron's --mscale and --mscale-all-dim.
void read_deepseek_rope_scaling(const json& j, const std::string& file, MlaConfig& a) {
  if (!j.contains("rope_scaling") || j["rope_scaling"].is_null()) return;
  const json& r = j["rope_scaling"];
  MT_CHECK(r.is_object(), file, ": rope_scaling is not an object");
  const auto type =
      cfg_or<std::string>(r, "rope_type", cfg_or<std::string>(r, "type", "", file), file);
  MT_CHECK(type == "yarn", file, ": rope_scaling type '", type,
           "' is not supported (multi-latent attention takes yarn)");
  const double f = cfg_get<double>(r, "factor", file);
  MT_CHECK(f > 0, file, ": rope_scaling factor ", f, " must be positive");
  const auto orig = cfg_or<int64_t>(r, "original_max_position_embeddings",
                                    MlaConfig::kYarnOriginalMaxPositions, file);
  MT_CHECK(orig == MlaConfig::kYarnOriginalMaxPositions &&
               cfg_or<double>(r, "beta_fast", MlaConfig::kYarnBetaFast, file) ==
                   MlaConfig::kYarnBetaFast &&
               cfg_or<double>(r, "beta_slow", MlaConfig::kYarnBetaSlow, file) ==
                   MlaConfig::kYarnBetaSlow &&
               cfg_or<bool>(r, "truncate", true, file),
           file,
           ": rope_scaling needs original_max_position_embeddings 4096, beta_fast 32, beta_slow 1 "
           "and truncate true (Megatron's multi-latent attention fixes them)");
  const double ms = cfg_or<double>(r, "mscale", 1.0, file);
  const double mall = cfg_or<double>(r, "mscale_all_dim", 0.0, file);
  const double g_all = MlaConfig::yarn_get_mscale(f, mall);
  double conc = ms != 0 && mall != 0 ? MlaConfig::yarn_get_mscale(f, ms) / g_all
                                     : MlaConfig::yarn_get_mscale(f, 1.0);
  conc = cfg_or<double>(r, "attention_factor", conc, file);
  a.rotary_scaling_factor = float(f);
  a.mscale_all_dim = float(mall);
  a.mscale = float(ms);
  if (std::abs(MlaConfig::yarn_get_mscale(f, ms) / g_all - conc) > 1e-6 * conc) {
    MT_CHECK(f > 1, file, ": rope_scaling attention_factor ", conc, " at factor ", f,
             " has no Megatron form (get_mscale is 1 at factors <= 1)");
    a.mscale = float((conc * g_all - 1.0) / (0.1 * std::log(f)));
  }
}

// DeepseekV3Config's fields (transformers' configuration_deepseek_v3.py and DeepSeek-V3's
// config.json): no group-limited routing is one group of all experts; no scaling factor is 1.
ordered_json deepseek_config_json(const ModelConfig& c, const std::string& dtype) {
  const MlaConfig& a = c.mla;
  ordered_json j;
  j["architectures"] = {hf_arch_name(HfArch::kDeepseekV3)};
  j["model_type"] = "deepseek_v3";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.ffn();
  j["moe_intermediate_size"] = c.moe_ffn();
  j["num_hidden_layers"] = c.num_layers;
  j["num_nextn_predict_layers"] = c.mtp_num_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_attention_heads;
  j["n_shared_experts"] = c.moe_shared_expert_intermediate_size / c.moe_ffn();
  j["n_routed_experts"] = c.num_experts;
  j["routed_scaling_factor"] =
      c.moe_router_topk_scaling_factor > 0 ? as_double(c.moe_router_topk_scaling_factor) : 1.0;
  j["kv_lora_rank"] = a.kv_lora_rank;
  j["q_lora_rank"] = a.q_lora_rank > 0 ? json(a.q_lora_rank) : json(nullptr);
  j["qk_rope_head_dim"] = a.qk_pos_emb_head_dim;
  j["v_head_dim"] = a.v_head_dim;
  j["qk_nope_head_dim"] = a.qk_head_dim;
  j["topk_method"] = "noaux_tc";
  j["n_group"] = c.moe_router_num_groups > 0 ? c.moe_router_num_groups : 1;
  j["topk_group"] = c.moe_router_group_topk > 0 ? c.moe_router_group_topk : 1;
  j["num_experts_per_tok"] = c.moe_router_topk;
  j["moe_layer_freq"] = 1;
  j["first_k_dense_replace"] = first_k_dense(c);
  j["norm_topk_prob"] = true;
  j["scoring_func"] = "sigmoid";
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = as_double(c.norm_epsilon);
  j["rope_theta"] = as_double(c.rotary_base);
  j["rope_scaling"] = deepseek_rope_scaling(a);
  j["rope_interleave"] = true;
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["tie_word_embeddings"] = !c.untie_embeddings_and_output_weights;
  j["torch_dtype"] = dtype;
  return j;
}

// The reverse of deepseek_config_json; what mtron cannot express is refused by name.
void read_deepseek_v3(const json& j, const std::string& file, ModelConfig& m) {
  read_llama_common(j, file, m);
  MT_CHECK(cfg_or<int64_t>(j, "num_key_value_heads", m.num_attention_heads, file) ==
               m.num_attention_heads,
           file, ": num_key_value_heads must equal num_attention_heads (multi-latent attention)");
  m.mtp_num_layers = cfg_or<int64_t>(j, "num_nextn_predict_layers", 0, file);
  MlaConfig& a = m.mla;
  a.enabled = true;
  a.q_lora_rank = cfg_or<int64_t>(j, "q_lora_rank", 0, file);
  a.kv_lora_rank = cfg_get<int64_t>(j, "kv_lora_rank", file);
  a.qk_head_dim = cfg_get<int64_t>(j, "qk_nope_head_dim", file);
  a.qk_pos_emb_head_dim = cfg_get<int64_t>(j, "qk_rope_head_dim", file);
  a.v_head_dim = cfg_get<int64_t>(j, "v_head_dim", file);
  read_deepseek_rope_scaling(j, file, a);
  m.qk_layernorm = true;  // q_a_layernorm and kv_a_layernorm
  MT_CHECK(cfg_or<bool>(j, "rope_interleave", true, file), file,
           ": rope_interleave false is not supported");
  MT_CHECK(!cfg_or<bool>(j, "attention_bias", false, file), file,
           ": attention_bias is not supported (--disable-bias-linear)");
  m.add_bias_linear = false;
  // Routing: sigmoid scores with the expert bias (noaux_tc), groups, the normalised top k.
  MT_CHECK(cfg_or<std::string>(j, "scoring_func", "sigmoid", file) == "sigmoid", file,
           ": scoring_func must be sigmoid");
  MT_CHECK(cfg_or<std::string>(j, "topk_method", "noaux_tc", file) == "noaux_tc", file,
           ": topk_method must be noaux_tc (the expert bias)");
  MT_CHECK(cfg_or<bool>(j, "norm_topk_prob", true, file), file,
           ": norm_topk_prob false is not supported");
  MT_CHECK(cfg_or<int64_t>(j, "moe_layer_freq", 1, file) == 1, file,
           ": moe_layer_freq other than 1 is not supported");
  m.num_experts = cfg_get<int64_t>(j, "n_routed_experts", file);
  m.moe_router_topk = cfg_get<int64_t>(j, "num_experts_per_tok", file);
  m.moe_ffn_hidden_size = cfg_get<int64_t>(j, "moe_intermediate_size", file);
  m.moe_shared_expert_intermediate_size =
      cfg_or<int64_t>(j, "n_shared_experts", 0, file) * m.moe_ffn_hidden_size;
  m.moe_router_score_function = RouterScore::kSigmoid;
  m.moe_router_enable_expert_bias = true;
  const auto groups = cfg_or<int64_t>(j, "n_group", 1, file);
  const auto group_topk = cfg_or<int64_t>(j, "topk_group", 1, file);
  if (groups > 1) {
    m.moe_router_num_groups = groups;
    m.moe_router_group_topk = group_topk;
  }
  const double scale = cfg_or<double>(j, "routed_scaling_factor", 1.0, file);
  m.moe_router_topk_scaling_factor = scale == 1.0 ? 0.0f : float(scale);
  const auto k = cfg_or<int64_t>(j, "first_k_dense_replace", 0, file);
  MT_CHECK(k >= 0 && k <= m.num_layers, file, ": first_k_dense_replace ", k,
           " is not a layer count");
  m.moe_layer_pattern.assign(size_t(m.num_layers), 1);
  for (int64_t l = 0; l < k; ++l) m.moe_layer_pattern[size_t(l)] = 0;
}

}  // namespace

HfArch hf_arch_of(const ModelConfig& c) {
  MT_CHECK(!c.rotary_interleaved,
           "cannot convert this model to Hugging Face: its architectures rotate half the "
           "channels (--rotary-interleaved pairs neighbours)");
  MT_CHECK(!c.squared_relu,
           "cannot convert this model to Hugging Face: none of the converter's architectures has "
           "a squared-ReLU MLP (--squared-relu)");
  MT_CHECK(c.mtp_num_layers == 0 || c.mla.enabled,
           "cannot convert this model to Hugging Face: only DeepseekV3ForCausalLM "
           "(--multi-latent-attention) holds multi-token prediction layers (--mtp-num-layers)");
  const bool gpt2 = c.normalization == Normalization::kLayerNorm &&
                    c.position_embedding_type == PositionEmbedding::kLearnedAbsolute && !c.swiglu;
  HfArch arch = HfArch::kLlama;
  if (c.mla.enabled) {
    arch = HfArch::kDeepseekV3;
  } else if (c.qk_layernorm) {
    arch = c.is_moe() ? HfArch::kQwen3Moe : HfArch::kQwen3;
  } else if (c.is_moe()) {
    arch = HfArch::kMixtral;
  } else if (gpt2) {
    arch = HfArch::kGPT2;
  } else if (c.normalization == Normalization::kLayerNorm || !c.swiglu ||
             c.position_embedding_type != PositionEmbedding::kRope) {
    MT_CHECK(false,
             "cannot convert this model to Hugging Face: neither GPT2LMHeadModel "
             "(LayerNorm, learned positions, GELU) nor LlamaForCausalLM (RMSNorm, RoPE, "
             "SwiGLU)");
  }
  const std::string why = arch_reason(c, arch);
  MT_CHECK(why.empty(), "cannot convert this model to Hugging Face: ", why);
  return arch;
}

ordered_json hf_config_json(const ModelConfig& c, HfArch arch, const std::string& dtype) {
  ordered_json j;
  j["architectures"] = {hf_arch_name(arch)};
  if (arch == HfArch::kGPT2) {
    j["model_type"] = "gpt2";
    j["vocab_size"] = c.vocab_size;
    j["n_positions"] = c.max_position_embeddings;
    j["n_embd"] = c.hidden_size;
    j["n_layer"] = c.num_layers;
    j["n_head"] = c.num_attention_heads;
    j["n_inner"] = c.ffn() == 4 * c.hidden_size ? json(nullptr) : json(c.ffn());
    j["activation_function"] = "gelu_new";
    j["layer_norm_epsilon"] = as_double(c.norm_epsilon);
    j["tie_word_embeddings"] = !c.untie_embeddings_and_output_weights;
    j["torch_dtype"] = dtype;
    return j;
  }
  if (arch == HfArch::kDeepseekV3) return deepseek_config_json(c, dtype);
  const bool mixtral = arch == HfArch::kMixtral, qwen3_moe = arch == HfArch::kQwen3Moe;
  j["model_type"] = mixtral                  ? "mixtral"
                    : qwen3_moe              ? "qwen3_moe"
                    : arch == HfArch::kQwen3 ? "qwen3"
                                             : "llama";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = mixtral ? c.moe_ffn() : c.ffn();
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.query_groups();
  j["head_dim"] = c.kv_channels;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = as_double(c.norm_epsilon);
  j["rope_theta"] = as_double(c.rotary_base);
  const double aux = c.moe_router_load_balancing_type == RouterLoadBalancing::kNone
                         ? 0.0
                         : as_double(c.moe_aux_loss_coeff);
  if (mixtral) {
    j["sliding_window"] = nullptr;
    j["num_local_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.moe_router_topk;
    j["router_aux_loss_coef"] = aux;
    j["output_router_logits"] = false;
    j["router_jitter_noise"] = 0.0;
  } else {
    j["rope_scaling"] = llama3_rope_scaling(c);
    j["attention_bias"] = c.add_bias_linear;
    if (arch == HfArch::kLlama) j["mlp_bias"] = c.add_bias_linear;
  }
  if (arch == HfArch::kQwen3 || qwen3_moe) {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
  }
  if (qwen3_moe) {
    j["num_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.moe_router_topk;
    j["moe_intermediate_size"] = c.moe_ffn();
    j["norm_topk_prob"] = !c.moe_router_pre_softmax;
    j["decoder_sparse_step"] = 1;
    json dense = json::array();
    for (int64_t l = 0; l < c.num_layers; ++l)
      if (!c.is_moe_layer(l)) dense.push_back(l);
    j["mlp_only_layers"] = dense;
    j["router_aux_loss_coef"] = aux;
    j["output_router_logits"] = false;
  }
  j["tie_word_embeddings"] = !c.untie_embeddings_and_output_weights;
  j["torch_dtype"] = dtype;
  return j;
}

json read_json_file(const fs::path& p) {
  const std::string text = read_small_file(p.string(), 64 << 20);
  MT_CHECK(json_depth_ok(text, 16), p.string(), " nests too deeply");
  json j = json::parse(text, nullptr, false);
  MT_CHECK(!j.is_discarded() && j.is_object(), p.string(), " is not a JSON object");
  return j;
}

std::pair<ModelConfig, HfArch> hf_model_config(const fs::path& dir, const HfImportOptions& o) {
  const std::string file = (dir / "config.json").string();
  const json j = read_json_file(dir / "config.json");
  const std::string type = cfg_or<std::string>(j, "model_type", "", file);
  ModelConfig m;
  HfArch arch = HfArch::kLlama;
  if (type == "gpt2") {
    arch = HfArch::kGPT2;
    read_gpt2(j, file, m);
  } else if (type == "deepseek_v3") {
    arch = HfArch::kDeepseekV3;
    read_deepseek_v3(j, file, m);
  } else if (type == "llama" || type == "mixtral" || type == "qwen3" || type == "qwen3_moe") {
    arch = type == "mixtral"     ? HfArch::kMixtral
           : type == "qwen3"     ? HfArch::kQwen3
           : type == "qwen3_moe" ? HfArch::kQwen3Moe
                                 : HfArch::kLlama;
    read_llama_family(j, file, m);
    m.qk_layernorm = arch == HfArch::kQwen3 || arch == HfArch::kQwen3Moe;
    if (arch == HfArch::kMixtral) read_mixtral(j, file, m);
    if (arch == HfArch::kQwen3Moe) read_qwen3_moe(j, file, m);
  } else {
    MT_CHECK(false, file, ": model_type '", type,
             "' is not supported (gpt2, llama, mixtral, qwen3, qwen3_moe, deepseek_v3)");
  }
  m.vocab_size = cfg_get<int64_t>(j, "vocab_size", file);
  m.make_vocab_size_divisible_by = o.make_vocab_size_divisible_by;
  m.seq_length = o.seq_length > 0 ? o.seq_length : m.max_position_embeddings;
  try {
    m.finalize();
  } catch (const Error& e) {
    throw Error(file + ": " + e.what());
  }
  return {m, arch};
}

}  // namespace mtron::checkpoint
