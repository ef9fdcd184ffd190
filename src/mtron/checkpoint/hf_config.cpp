#include "mtron/checkpoint/hf_config.h"

#include <fmt/format.h>

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
  if (c.moe_shared_expert_intermediate_size > 0)
    return name + "has no shared experts (--moe-shared-expert-intermediate-size)";
  if (c.moe_router_group_topk > 0 || c.moe_router_topk_scaling_factor > 0 ||
      c.moe_router_enable_expert_bias)
    return name + "routes without groups, scaling factor or expert bias";
  return "";
}

std::string arch_reason(const ModelConfig& c, HfArch arch) {
  const std::string name = std::string(hf_arch_name(arch)) + " ";
  switch (arch) {
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
void read_llama_family(const json& j, const std::string& file, ModelConfig& m) {
  m.hidden_size = cfg_get<int64_t>(j, "hidden_size", file);
  m.num_layers = cfg_get<int64_t>(j, "num_hidden_layers", file);
  m.num_attention_heads = cfg_get<int64_t>(j, "num_attention_heads", file);
  const auto kv = cfg_or<int64_t>(j, "num_key_value_heads", m.num_attention_heads, file);
  m.group_query_attention = kv != m.num_attention_heads;
  m.num_query_groups = kv;
  m.kv_channels = cfg_or<int64_t>(j, "head_dim", 0, file);
  m.ffn_hidden_size = cfg_get<int64_t>(j, "intermediate_size", file);
  m.max_position_embeddings = cfg_get<int64_t>(j, "max_position_embeddings", file);
  const auto act = cfg_or<std::string>(j, "hidden_act", "silu", file);
  MT_CHECK(act == "silu", file, ": hidden_act '", act, "' is not supported (SwiGLU uses silu)");
  MT_CHECK(!j.contains("rope_scaling") || j["rope_scaling"].is_null(), file,
           ": rope_scaling is not supported");
  MT_CHECK(!cfg_or<bool>(j, "use_sliding_window", false, file), file,
           ": use_sliding_window is not supported (mtron's attention is full causal)");
  m.swiglu = true;
  m.normalization = Normalization::kRMSNorm;
  m.position_embedding_type = PositionEmbedding::kRope;
  m.norm_epsilon = float(cfg_or<double>(j, "rms_norm_eps", 1e-6, file));
  m.rotary_base = float(cfg_or<double>(j, "rope_theta", 10000.0, file));
  m.untie_embeddings_and_output_weights = !cfg_or<bool>(j, "tie_word_embeddings", false, file);
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
  MT_CHECK(cfg_or<bool>(j, "norm_topk_prob", false, file), file,
           ": norm_topk_prob false is not supported (mtron's softmax router renormalises the "
           "top-k weights)");
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

}  // namespace

HfArch hf_arch_of(const ModelConfig& c) {
  MT_CHECK(c.mtp_num_layers == 0,
           "cannot convert this model to Hugging Face: mtron's Hugging Face conversion has no "
           "multi-token prediction (--mtp-num-layers) yet");
  MT_CHECK(!c.mla.enabled,
           "cannot convert this model to Hugging Face: no Hugging Face export for "
           "--multi-latent-attention (DeepSeek-V2/V3)");
  const bool gpt2 = c.normalization == Normalization::kLayerNorm &&
                    c.position_embedding_type == PositionEmbedding::kLearnedAbsolute && !c.swiglu;
  HfArch arch = HfArch::kLlama;
  if (c.qk_layernorm) {
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
    j["rope_scaling"] = nullptr;
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
    j["norm_topk_prob"] = true;
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
             "' is not supported (gpt2, llama, mixtral, qwen3, qwen3_moe)");
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
