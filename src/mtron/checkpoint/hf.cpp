#include "mtron/checkpoint/hf.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "mtron/checkpoint/checkpoint.h"
#include "mtron/checkpoint/file_io.h"
#include "mtron/checkpoint/reader.h"
#include "mtron/checkpoint/safetensors.h"
#include "mtron/comm/single.h"
#include "mtron/core/log.h"
#include "mtron/model/gpt.h"

namespace mtron::checkpoint {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

namespace {

// How one Hugging Face tensor's elements sit in one Megatron-Core tensor: HF element e is
// Megatron element index(e). Export gathers through it, import scatters through it.
enum class LinkKind {
  kCopy,        // index = offset + e (also a vocabulary slice: the first rows)
  kTranspose,   // HF [a, b] = Megatron [b, a]^T
  kQkvRows,     // HF rows are the `part` (0 q, 1 k, 2 v) rows of the fused QKV; `cols` per row
  kQkvColumns,  // HF [cols, q|k|v] (GPT-2's Conv1D c_attn and its bias with cols = 1)
};

struct Link {
  std::string hf, key;
  Shape hf_shape;
  LinkKind kind = LinkKind::kCopy;
  int64_t offset = 0, a = 0, b = 0, part = 0, cols = 0;
};

struct Qkv {
  int64_t H, G, D;
  // Megatron's fused QKV row of element `i` of part p (q: head*D + d, k/v: group*D + d).
  int64_t row(int64_t p, int64_t i) const {
    const int64_t hpg = H / G;
    if (p == 0) {
      const int64_t head = i / D, g = head / hpg;
      return g * (hpg + 2) * D + (head % hpg) * D + i % D;
    }
    const int64_t g = i / D;
    return g * (hpg + 2) * D + (hpg + p - 1) * D + i % D;
  }
  int64_t width(int64_t p) const { return p == 0 ? H * D : G * D; }
};

int64_t link_index(const Link& l, const Qkv& q, int64_t e) {
  switch (l.kind) {
    case LinkKind::kCopy:
      return l.offset + e;
    case LinkKind::kTranspose:
      return (e % l.b) * l.a + e / l.b;
    case LinkKind::kQkvRows:
      return q.row(l.part, e / l.cols) * l.cols + e % l.cols;
    case LinkKind::kQkvColumns: {
      const int64_t all = q.width(0) + 2 * q.width(1);
      const int64_t r = e / all;
      int64_t c = e % all, p = 0;
      while (c >= q.width(p)) c -= q.width(p++);
      return q.row(p, c) * l.cols + r;
    }
  }
  return 0;
}

// Why Mixtral cannot express this MoE model ("" if it can).
std::string mixtral_reason(const ModelConfig& c) {
  const char* no = "MixtralForCausalLM ";
  if (c.normalization != Normalization::kRMSNorm ||
      c.position_embedding_type != PositionEmbedding::kRope || !c.swiglu)
    return std::string(no) + "is RMSNorm, RoPE and SwiGLU experts";
  if (c.rotary_percent != 1.0f)
    return std::string(no) + "rotates every channel (--rotary-percent 1)";
  if (c.add_bias_linear) return std::string(no) + "has no biases (--disable-bias-linear)";
  if (c.moe_router_score_function != RouterScore::kSoftmax)
    return std::string(no) + "routes by softmax (not --moe-router-score-function sigmoid)";
  if (c.moe_shared_expert_intermediate_size > 0)
    return std::string(no) + "has no shared experts (--moe-shared-expert-intermediate-size)";
  if (c.num_moe_layers() != c.num_layers)
    return std::string(no) + "has experts in every layer (--moe-layer-freq 1)";
  if (c.moe_router_group_topk > 0 || c.moe_router_topk_scaling_factor > 0 ||
      c.moe_router_enable_expert_bias)
    return std::string(no) + "routes without groups, scaling factor or expert bias";
  return "";
}

std::string arch_reason(const ModelConfig& c) {
  if (c.mtp_num_layers > 0)
    return "mtron's Hugging Face conversion has no multi-token prediction (--mtp-num-layers) yet";
  if (c.qk_layernorm) return "mtron's Hugging Face conversion has no --qk-layernorm (Qwen3) yet";
  if (c.is_moe()) return mixtral_reason(c);
  const bool gpt2 = c.normalization == Normalization::kLayerNorm &&
                    c.position_embedding_type == PositionEmbedding::kLearnedAbsolute && !c.swiglu;
  const bool llama = c.normalization == Normalization::kRMSNorm &&
                     c.position_embedding_type == PositionEmbedding::kRope && c.swiglu;
  if (gpt2) {
    if (!c.add_bias_linear) return "GPT2LMHeadModel needs biases (no --disable-bias-linear)";
    if (c.query_groups() != c.num_attention_heads)
      return "GPT2LMHeadModel has no grouped-query attention";
    if (c.kv_channels * c.num_attention_heads != c.hidden_size) {
      return "GPT2LMHeadModel needs --kv-channels = hidden / heads";
    }
    return "";
  }
  if (llama) {
    if (c.rotary_percent != 1.0f)
      return "LlamaForCausalLM rotates every channel (--rotary-percent 1)";
    return "";
  }
  return "neither GPT2LMHeadModel (LayerNorm, learned positions, GELU) nor LlamaForCausalLM "
         "(RMSNorm, RoPE, SwiGLU)";
}

HfArch arch_of(const ModelConfig& c) {
  const std::string why = arch_reason(c);
  MT_CHECK(why.empty(), "cannot convert this model to Hugging Face: ", why);
  if (c.is_moe()) return HfArch::kMixtral;
  return c.normalization == Normalization::kLayerNorm ? HfArch::kGPT2 : HfArch::kLlama;
}

// Every HF tensor of the model and where it lives in the Megatron-Core tensors.
std::vector<Link> links(const ModelConfig& c, HfArch arch) {
  const int64_t h = c.hidden_size, V = c.vocab_size, F = c.ffn(), L = c.num_layers;
  const int64_t H = c.num_attention_heads, G = c.query_groups(), D = c.kv_channels;
  const bool bias = c.add_bias_linear;
  std::vector<Link> ls;
  auto copy = [&](std::string hf, std::string key, Shape s, int64_t offset = 0) {
    ls.push_back({std::move(hf), std::move(key), std::move(s), LinkKind::kCopy, offset});
  };
  auto transpose = [&](std::string hf, std::string key, int64_t a, int64_t b) {
    ls.push_back({std::move(hf), std::move(key), {a, b}, LinkKind::kTranspose, 0, a, b});
  };
  auto qkv_rows = [&](std::string hf, std::string key, int64_t part, int64_t cols) {
    const int64_t rows = part == 0 ? H * D : G * D;
    Shape s = cols == 1 ? Shape{rows} : Shape{rows, cols};
    ls.push_back({std::move(hf), std::move(key), s, LinkKind::kQkvRows, 0, 0, 0, part, cols});
  };
  if (arch == HfArch::kGPT2) {
    copy("transformer.wte.weight", "embedding.word_embeddings.weight", {V, h});
    copy("transformer.wpe.weight", "embedding.position_embeddings.weight",
         {c.max_position_embeddings, h});
    for (int64_t i = 0; i < L; ++i) {
      const std::string m = fmt::format("decoder.layers.{}.", i),
                        t = fmt::format("transformer.h.{}.", i);
      copy(t + "ln_1.weight", m + "input_layernorm.weight", {h});
      copy(t + "ln_1.bias", m + "input_layernorm.bias", {h});
      ls.push_back({t + "attn.c_attn.weight",
                    m + "self_attention.linear_qkv.weight",
                    {h, 3 * h},
                    LinkKind::kQkvColumns,
                    0,
                    0,
                    0,
                    0,
                    h});
      ls.push_back({t + "attn.c_attn.bias",
                    m + "self_attention.linear_qkv.bias",
                    {3 * h},
                    LinkKind::kQkvColumns,
                    0,
                    0,
                    0,
                    0,
                    1});
      transpose(t + "attn.c_proj.weight", m + "self_attention.linear_proj.weight", H * D, h);
      copy(t + "attn.c_proj.bias", m + "self_attention.linear_proj.bias", {h});
      copy(t + "ln_2.weight", m + "pre_mlp_layernorm.weight", {h});
      copy(t + "ln_2.bias", m + "pre_mlp_layernorm.bias", {h});
      transpose(t + "mlp.c_fc.weight", m + "mlp.linear_fc1.weight", h, F);
      copy(t + "mlp.c_fc.bias", m + "mlp.linear_fc1.bias", {F});
      transpose(t + "mlp.c_proj.weight", m + "mlp.linear_fc2.weight", F, h);
      copy(t + "mlp.c_proj.bias", m + "mlp.linear_fc2.bias", {h});
    }
    copy("transformer.ln_f.weight", "decoder.final_layernorm.weight", {h});
    copy("transformer.ln_f.bias", "decoder.final_layernorm.bias", {h});
  } else {
    copy("model.embed_tokens.weight", "embedding.word_embeddings.weight", {V, h});
    for (int64_t i = 0; i < L; ++i) {
      const std::string m = fmt::format("decoder.layers.{}.", i),
                        t = fmt::format("model.layers.{}.", i);
      copy(t + "input_layernorm.weight", m + "input_layernorm.weight", {h});
      const std::string qkv = m + "self_attention.linear_qkv.";
      const char* names[3] = {"q_proj", "k_proj", "v_proj"};
      for (int64_t p = 0; p < 3; ++p) {
        qkv_rows(t + "self_attn." + names[p] + ".weight", qkv + "weight", p, h);
        if (bias) qkv_rows(t + "self_attn." + names[p] + ".bias", qkv + "bias", p, 1);
      }
      copy(t + "self_attn.o_proj.weight", m + "self_attention.linear_proj.weight", {h, H * D});
      if (bias) copy(t + "self_attn.o_proj.bias", m + "self_attention.linear_proj.bias", {h});
      copy(t + "post_attention_layernorm.weight", m + "pre_mlp_layernorm.weight", {h});
      if (arch == HfArch::kMixtral) {
        const int64_t E = c.num_experts, Fm = c.moe_ffn();
        copy(t + "block_sparse_moe.gate.weight", m + "mlp.router.weight", {E, h});
        for (int64_t e = 0; e < E; ++e) {
          const std::string x = fmt::format("{}block_sparse_moe.experts.{}.", t, e),
                            y = fmt::format("{}mlp.experts.local_experts.{}.", m, e);
          copy(x + "w1.weight", y + "linear_fc1.weight", {Fm, h}, 0);       // gate
          copy(x + "w3.weight", y + "linear_fc1.weight", {Fm, h}, Fm * h);  // up
          copy(x + "w2.weight", y + "linear_fc2.weight", {h, Fm});          // down
        }
        continue;
      }
      copy(t + "mlp.gate_proj.weight", m + "mlp.linear_fc1.weight", {F, h}, 0);
      copy(t + "mlp.up_proj.weight", m + "mlp.linear_fc1.weight", {F, h}, F * h);
      copy(t + "mlp.down_proj.weight", m + "mlp.linear_fc2.weight", {h, F});
      if (bias) {
        copy(t + "mlp.gate_proj.bias", m + "mlp.linear_fc1.bias", {F}, 0);
        copy(t + "mlp.up_proj.bias", m + "mlp.linear_fc1.bias", {F}, F);
        copy(t + "mlp.down_proj.bias", m + "mlp.linear_fc2.bias", {h});
      }
    }
    copy("model.norm.weight", "decoder.final_layernorm.weight", {h});
  }
  if (c.untie_embeddings_and_output_weights) copy("lm_head.weight", "output_layer.weight", {V, h});
  return ls;
}

ordered_json hf_config(const ModelConfig& c, HfArch arch, const std::string& dtype) {
  ordered_json j;
  if (arch == HfArch::kGPT2) {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["model_type"] = "gpt2";
    j["vocab_size"] = c.vocab_size;
    j["n_positions"] = c.max_position_embeddings;
    j["n_embd"] = c.hidden_size;
    j["n_layer"] = c.num_layers;
    j["n_head"] = c.num_attention_heads;
    j["n_inner"] = c.ffn() == 4 * c.hidden_size ? json(nullptr) : json(c.ffn());
    j["activation_function"] = "gelu_new";
    j["layer_norm_epsilon"] = std::stod(fmt::format("{}", c.norm_epsilon));
    j["tie_word_embeddings"] = !c.untie_embeddings_and_output_weights;
  } else {
    const bool mixtral = arch == HfArch::kMixtral;
    j["architectures"] = {hf_arch_name(arch)};
    j["model_type"] = mixtral ? "mixtral" : "llama";
    j["vocab_size"] = c.vocab_size;
    j["hidden_size"] = c.hidden_size;
    j["intermediate_size"] = mixtral ? c.moe_ffn() : c.ffn();
    j["num_hidden_layers"] = c.num_layers;
    j["num_attention_heads"] = c.num_attention_heads;
    j["num_key_value_heads"] = c.query_groups();
    j["head_dim"] = c.kv_channels;
    j["hidden_act"] = "silu";
    j["max_position_embeddings"] = c.max_position_embeddings;
    j["rms_norm_eps"] = std::stod(fmt::format("{}", c.norm_epsilon));
    j["rope_theta"] = std::stod(fmt::format("{}", c.rotary_base));
    if (mixtral) {
      j["sliding_window"] = nullptr;
      j["num_local_experts"] = c.num_experts;
      j["num_experts_per_tok"] = c.moe_router_topk;
      j["router_aux_loss_coef"] = c.moe_router_load_balancing_type == RouterLoadBalancing::kNone
                                      ? 0.0
                                      : std::stod(fmt::format("{}", c.moe_aux_loss_coeff));
      j["output_router_logits"] = false;
      j["router_jitter_noise"] = 0.0;
    } else {
      j["rope_scaling"] = nullptr;
      j["attention_bias"] = c.add_bias_linear;
      j["mlp_bias"] = c.add_bias_linear;
    }
    j["tie_word_embeddings"] = !c.untie_embeddings_and_output_weights;
  }
  j["torch_dtype"] = dtype;
  return j;
}

// Copies the tokenizer files the run named into the exported folder (what transformers loads).
void export_tokenizer(const TokenizerRecord& t, const fs::path& out, const ModelConfig& c) {
  auto copy = [&](const std::string& from, const char* to) {
    if (from.empty() || !fs::is_regular_file(from)) {
      log_warn("tokenizer file '{}' not found: {} is not exported", from, to);
      return false;
    }
    fs::copy_file(from, out / to, fs::copy_options::overwrite_existing);
    return true;
  };
  if (t.type == "GPT2BPETokenizer") {
    if (copy(t.vocab_file, "vocab.json") && copy(t.merge_file, "merges.txt")) {
      const ordered_json tc = {{"tokenizer_class", "GPT2Tokenizer"},
                               {"bos_token", "<|endoftext|>"},
                               {"eos_token", "<|endoftext|>"},
                               {"unk_token", "<|endoftext|>"},
                               {"model_max_length", c.max_position_embeddings}};
      write_file_atomic((out / "tokenizer_config.json").string(), tc.dump(2) + "\n");
    }
  } else if (t.type == "HuggingFaceTokenizer") {
    const fs::path p(t.model);
    const fs::path dir = fs::is_directory(p) ? p : p.parent_path();
    copy(fs::is_directory(p) ? (p / "tokenizer.json").string() : t.model, "tokenizer.json");
    for (const char* f : {"tokenizer_config.json", "special_tokens_map.json"}) {
      if (fs::is_regular_file(dir / f)) fs::copy_file(dir / f, out / f);
    }
  } else if (t.type == "SentencePieceTokenizer" || t.type == "GPTSentencePieceTokenizer" ||
             t.type == "Llama2Tokenizer") {
    copy(t.model, "tokenizer.model");
  } else {
    log_info("note: tokenizer '{}' has no Hugging Face files; the folder holds the model only",
             t.type.empty() ? "NullTokenizer" : t.type);
  }
}

std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = float_to_bf16(x[i]).bits;
  return y;
}

json read_json_file(const fs::path& p) {
  const std::string text = read_small_file(p.string(), 64 << 20);
  MT_CHECK(json_depth_ok(text, 16), p.string(), " nests too deeply");
  json j = json::parse(text, nullptr, false);
  MT_CHECK(!j.is_discarded() && j.is_object(), p.string(), " is not a JSON object");
  return j;
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

std::pair<ModelConfig, HfArch> config_from_hf(const fs::path& dir, const HfImportOptions& o) {
  const std::string file = (dir / "config.json").string();
  const json j = read_json_file(dir / "config.json");
  const std::string type = cfg_or<std::string>(j, "model_type", "", file);
  ModelConfig m;
  HfArch arch;
  if (type == "gpt2") {
    arch = HfArch::kGPT2;
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
  } else if (type == "llama" || type == "mixtral") {
    arch = type == "llama" ? HfArch::kLlama : HfArch::kMixtral;
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
    m.swiglu = true;
    m.normalization = Normalization::kRMSNorm;
    m.position_embedding_type = PositionEmbedding::kRope;
    m.norm_epsilon = float(cfg_or<double>(j, "rms_norm_eps", 1e-6, file));
    m.rotary_base = float(cfg_or<double>(j, "rope_theta", 10000.0, file));
    m.untie_embeddings_and_output_weights = !cfg_or<bool>(j, "tie_word_embeddings", false, file);
    const bool ab = cfg_or<bool>(j, "attention_bias", false, file);
    const bool mb = cfg_or<bool>(j, "mlp_bias", false, file);
    MT_CHECK(ab == mb, file,
             ": attention_bias and mlp_bias differ (Megatron has one switch, "
             "--disable-bias-linear)");
    m.add_bias_linear = ab;
    if (arch == HfArch::kMixtral) {
      m.num_experts = cfg_get<int64_t>(j, "num_local_experts", file);
      m.moe_router_topk = cfg_get<int64_t>(j, "num_experts_per_tok", file);
      m.moe_ffn_hidden_size = m.ffn_hidden_size;
      m.moe_aux_loss_coeff = float(cfg_or<double>(j, "router_aux_loss_coef", 0.0, file));
      MT_CHECK(cfg_or<double>(j, "router_jitter_noise", 0.0, file) == 0.0, file,
               ": router_jitter_noise is not supported (mtron's router has no jitter)");
      const auto window = cfg_or<int64_t>(j, "sliding_window", 0, file);
      MT_CHECK(window == 0 || window >= m.max_position_embeddings, file, ": sliding_window ",
               window, " is not supported (mtron's attention is full causal)");
    }
  } else {
    MT_CHECK(false, file, ": model_type '", type, "' is not supported (gpt2, llama, mixtral)");
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

// The weight files of an HF folder: name -> (file, entry).
class HfWeights {
 public:
  explicit HfWeights(const fs::path& dir) {
    std::vector<std::string> names;
    if (fs::exists(dir / "model.safetensors.index.json")) {
      const json idx = read_json_file(dir / "model.safetensors.index.json");
      MT_CHECK(idx.contains("weight_map") && idx["weight_map"].is_object(),
               (dir / "model.safetensors.index.json").string(), ": no weight_map");
      for (const auto& [k, v] : idx["weight_map"].items()) {
        MT_CHECK(v.is_string(), "model.safetensors.index.json: bad entry for ", k);
        const std::string f = v.get<std::string>();
        MT_CHECK(f.find('/') == std::string::npos && f != ".." && !f.empty(),
                 "model.safetensors.index.json: invalid file name '", f, "'");
        if (std::find(names.begin(), names.end(), f) == names.end()) names.push_back(f);
      }
    } else {
      MT_CHECK(fs::exists(dir / "model.safetensors"), "no model.safetensors (or index) in ",
               dir.string());
      names.push_back("model.safetensors");
    }
    for (const std::string& n : names) {
      files_.push_back(std::make_unique<SafetensorsFile>((dir / n).string()));
      for (const SafetensorsEntry& e : files_.back()->header().entries) {
        MT_CHECK(!index_.count(e.name), "tensor '", e.name, "' appears in two files of ",
                 dir.string());
        index_[e.name] = {files_.back().get(), &e};
      }
    }
  }
  bool has(const std::string& name) const { return index_.count(name) > 0; }
  std::vector<std::string> names() const {
    std::vector<std::string> v;
    for (const auto& kv : index_) v.push_back(kv.first);
    return v;
  }
  // As fp32, checking the shape.
  std::vector<float> read(const std::string& name, const Shape& shape) const {
    const auto it = index_.find(name);
    MT_CHECK(it != index_.end(), "the Hugging Face model has no tensor '", name, "'");
    const auto& [f, e] = it->second;
    MT_CHECK(e->shape == shape, f->path(), ": tensor '", name, "' has shape ", shape_str(e->shape),
             "; config.json implies ", shape_str(shape));
    const size_t n = size_t(e->numel());
    std::vector<float> out(n);
    if (e->dtype == "F32") {
      f->read(*e, 0, n * 4, out.data());
    } else if (e->dtype == "BF16" || e->dtype == "F16") {
      std::vector<uint16_t> raw(n);
      f->read(*e, 0, n * 2, raw.data());
      for (size_t i = 0; i < n; ++i)
        out[i] = e->dtype == "BF16" ? bf16_to_float(bf16{raw[i]}) : f16_to_float(f16{raw[i]});
    } else {
      MT_CHECK(false, f->path(), ": tensor '", name, "' has dtype ", e->dtype,
               " (expected F32, BF16 or F16)");
    }
    return out;
  }

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::pair<const SafetensorsFile*, const SafetensorsEntry*>> index_;
};

// The tokenizer files of an HF folder (the checkpoint saves a copy of them).
TokenizerRecord import_tokenizer(const fs::path& hf) {
  TokenizerRecord t;
  const fs::path src = fs::absolute(hf);
  if (fs::exists(src / "tokenizer.json")) {
    t.type = "HuggingFaceTokenizer";
    t.model = (src / "tokenizer.json").string();
  } else if (fs::exists(src / "vocab.json") && fs::exists(src / "merges.txt")) {
    t.type = "GPT2BPETokenizer";
    t.vocab_file = (src / "vocab.json").string();
    t.merge_file = (src / "merges.txt").string();
  } else if (fs::exists(src / "tokenizer.model")) {
    t.type = "SentencePieceTokenizer";
    t.model = (src / "tokenizer.model").string();
  }
  return t;
}

// The `mtron train` flags that build this model.
std::string model_flags(const ModelConfig& c) {
  std::string f = fmt::format(
      "--num-layers {} --hidden-size {} --num-attention-heads {} --ffn-hidden-size {} "
      "--max-position-embeddings {} --seq-length {} --norm-epsilon {}",
      c.num_layers, c.hidden_size, c.num_attention_heads, c.ffn(), c.max_position_embeddings,
      c.seq_length, c.norm_epsilon);
  if (c.kv_channels * c.num_attention_heads != c.hidden_size) {
    f += fmt::format(" --kv-channels {}", c.kv_channels);
  }
  if (c.group_query_attention) {
    f += fmt::format(" --group-query-attention --num-query-groups {}", c.num_query_groups);
  }
  if (c.swiglu) f += " --swiglu";
  if (c.normalization == Normalization::kRMSNorm) f += " --normalization RMSNorm";
  if (c.position_embedding_type == PositionEmbedding::kRope) {
    f += fmt::format(" --position-embedding-type rope --rotary-base {}", c.rotary_base);
  }
  if (c.untie_embeddings_and_output_weights) f += " --untie-embeddings-and-output-weights";
  if (!c.add_bias_linear) f += " --disable-bias-linear";
  if (c.make_vocab_size_divisible_by != 128) {
    f += fmt::format(" --make-vocab-size-divisible-by {}", c.make_vocab_size_divisible_by);
  }
  if (c.is_moe()) {
    f += fmt::format(
        " --num-experts {} --moe-ffn-hidden-size {} --moe-router-topk {} --moe-aux-loss-coeff {}",
        c.num_experts, c.moe_ffn(), c.moe_router_topk, c.moe_aux_loss_coeff);
  }
  return f;
}

// Weight buffers that were never model state (old exports carry them).
bool is_buffer(const std::string& name) {
  auto ends = [&](const char* s) {
    const std::string e(s);
    return name.size() >= e.size() && name.compare(name.size() - e.size(), e.size(), e) == 0;
  };
  return ends(".attn.bias") || ends(".attn.masked_bias") || ends("rotary_emb.inv_freq");
}

}  // namespace

const char* hf_arch_name(HfArch a) {
  switch (a) {
    case HfArch::kGPT2:
      return "GPT2LMHeadModel";
    case HfArch::kLlama:
      return "LlamaForCausalLM";
    case HfArch::kMixtral:
      return "MixtralForCausalLM";
  }
  return "";
}

uint64_t parse_byte_size(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  MT_CHECK(i > 0, "invalid size '", s, "' (e.g. 5GB, 500MB)");
  const double v = std::stod(s.substr(0, i));
  std::string unit = s.substr(i);
  for (char& c : unit) c = char(std::toupper(static_cast<unsigned char>(c)));
  const std::map<std::string, double> units = {
      {"", 1},      {"B", 1},        {"KB", 1e3},        {"MB", 1e6},          {"GB", 1e9},
      {"TB", 1e12}, {"KIB", 1024.0}, {"MIB", 1048576.0}, {"GIB", 1073741824.0}};
  const auto it = units.find(unit);
  MT_CHECK(it != units.end(), "invalid size unit in '", s, "' (B, KB, MB, GB, KiB, MiB, GiB)");
  MT_CHECK(v * it->second >= 1, "size '", s, "' must be at least one byte");
  return uint64_t(v * it->second);
}

HfArch export_hf(const std::string& load_dir, const std::string& out, const HfExportOptions& o) {
  MT_CHECK(o.dtype == "float32" || o.dtype == "bfloat16",
           "--dtype must be float32 or bfloat16 (got ", o.dtype, ")");
  const std::optional<std::string> dir = find_checkpoint(load_dir);
  MT_CHECK(dir, "no checkpoint in --load ", load_dir);
  const CheckpointReader reader(*dir);
  const ModelConfig& c = reader.manifest().model;
  const HfArch arch = arch_of(c);
  // "hf/" names the folder hf: the temporary folder goes beside it, not into it.
  std::string name = out;
  while (name.size() > 1 && name.back() == '/') name.pop_back();
  const fs::path dst(name);
  MT_CHECK(!fs::exists(dst) || (fs::is_directory(dst) && fs::is_empty(dst)), "--output ", out,
           " exists and is not an empty directory");
  const fs::path tmp = dst.string() + ".tmp-export";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  // A failed export leaves nothing behind: the temporary folder goes with the exception.
  struct RemoveOnFailure {
    fs::path dir;
    bool done = false;
    ~RemoveOnFailure() {
      std::error_code ec;
      if (!done) fs::remove_all(dir, ec);
    }
  } guard{tmp};

  const std::vector<Link> ls = links(c, arch);
  const Qkv q{c.num_attention_heads, c.query_groups(), c.kv_channels};
  const size_t es = o.dtype == "float32" ? 4 : 2;
  // Shards: consecutive tensors up to max_shard_bytes each (at least one tensor per shard).
  std::vector<std::vector<size_t>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (size_t i = 0; i < ls.size(); ++i) {
    const uint64_t b = uint64_t(numel(ls[i].hf_shape)) * es;
    if (!shards.back().empty() && in_shard + b > o.max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(i);
    in_shard += b;
    total += b;
  }
  json weight_map = json::object();
  std::string cached_key;
  Tensor cached;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string name = shards.size() == 1 ? "model.safetensors"
                                                : fmt::format("model-{:05d}-of-{:05d}.safetensors",
                                                              s + 1, shards.size());
    std::vector<std::vector<float>> f32(shards[s].size());
    std::vector<std::vector<uint16_t>> b16(shards[s].size());
    std::vector<SafetensorsTensor> ts;
    for (size_t k = 0; k < shards[s].size(); ++k) {
      const Link& l = ls[shards[s][k]];
      if (l.key != cached_key) {
        cached = reader.read_global(l.key);
        cached_key = l.key;
      }
      std::vector<float>& x = f32[k];
      x.resize(size_t(numel(l.hf_shape)));
      for (int64_t e = 0; e < int64_t(x.size()); ++e)
        x[size_t(e)] = cached.f32()[link_index(l, q, e)];
      // Zero-centred norm weights (--apply-layernorm-1p): Hugging Face applies the weight itself.
      if (c.apply_layernorm_1p && l.key.ends_with("layernorm.weight")) {
        for (float& v : x) v += 1.0f;
      }
      if (es == 2) {
        b16[k] = to_bf16(x);
        x = {};
      }
      ts.push_back({l.hf, es == 4 ? "F32" : "BF16", l.hf_shape,
                    es == 4 ? static_cast<const void*>(f32[k].data()) : b16[k].data()});
      weight_map[l.hf] = name;
    }
    write_safetensors((tmp / name).string(), ts, {{"format", "pt"}}, /*sync=*/true);
  }
  if (shards.size() > 1) {
    const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_file_atomic((tmp / "model.safetensors.index.json").string(), index.dump(2) + "\n");
  }
  write_file_atomic((tmp / "config.json").string(), hf_config(c, arch, o.dtype).dump(2) + "\n");
  export_tokenizer(reader.manifest().tokenizer, tmp, c);
  fs::remove(dst);  // empty or absent
  fs::rename(tmp, dst);
  guard.done = true;
  log_info("exported {} (iteration {}) to {} as {}: {} tensors, {:.1f} MB in {} file(s)", *dir,
           reader.manifest().iteration, out, hf_arch_name(arch), ls.size(), double(total) / 1e6,
           shards.size());
  return arch;
}

HfArch import_hf(const std::string& hf_dir, const std::string& out, const HfImportOptions& o) {
  const fs::path src(hf_dir);
  MT_CHECK(fs::is_directory(src), "--input ", hf_dir, " is not a directory");
  auto [cfg, arch] = config_from_hf(src, o);
  MT_CHECK(arch_of(cfg) == arch, "internal: architecture mismatch");
  const HfWeights w(src);
  model::GPTChunk chunk(cfg, {0, cfg.num_layers, true, true}, parallel::TensorParallel{}, {});
  model::ParamBuffer& p = chunk.params();
  model::ParamBuffer& experts = chunk.expert_params();
  p.allocate(Precision::kFP32, 1);  // zeros: the vocabulary padding rows stay 0
  if (cfg.is_moe()) experts.allocate(Precision::kFP32, 1);
  std::map<std::string, std::pair<model::ParamBuffer*, int>> handle;
  for (model::ParamBuffer* b : {&p, &experts}) {
    for (size_t i = 0; i < b->specs().size(); ++i) handle[b->spec(int(i)).name] = {b, int(i)};
  }

  const std::vector<Link> ls = links(cfg, arch);
  const Qkv q{cfg.num_attention_heads, cfg.query_groups(), cfg.kv_channels};
  std::map<std::string, int64_t> covered;
  for (const Link& l : ls) {
    const auto it = handle.find(l.key);
    MT_ASSERT(it != handle.end(), "no parameter ", l.key);
    float* dst = it->second.first->master(it->second.second);
    const std::vector<float> x = w.read(l.hf, l.hf_shape);
    for (int64_t e = 0; e < int64_t(x.size()); ++e) dst[link_index(l, q, e)] = x[size_t(e)];
    covered[l.key] += int64_t(x.size());
  }
  for (const auto& [name, where] : handle) {
    const int64_t n = where.first->spec(where.second).numel();
    const int64_t want = is_vocab_parameter(name) ? cfg.vocab_size * cfg.hidden_size : n;
    MT_ASSERT(covered[name] == want, "parameter ", name, " filled ", covered[name], " of ", want);
  }
  std::vector<std::string> ignored;
  for (const std::string& n : w.names()) {
    const bool used = std::any_of(ls.begin(), ls.end(), [&](const Link& l) { return l.hf == n; });
    const bool tied_head = n == "lm_head.weight" && !cfg.untie_embeddings_and_output_weights;
    if (!used && !tied_head && !is_buffer(n)) ignored.push_back(n);
  }
  MT_CHECK(ignored.empty(), hf_dir, " has tensors this architecture does not use (first: '",
           ignored.front(), "')");
  p.refresh_compute();

  RunInfo info;
  info.model = cfg;
  info.tokenizer = import_tokenizer(src);
  auto world = make_single_comm();
  std::vector<ChunkState> bufs = {{&p, nullptr, nullptr, {{0, p.size()}}, false, {}}};
  if (cfg.is_moe()) bufs.push_back({&experts, nullptr, nullptr, {{0, experts.size()}}, true, {}});
  const std::string d = save_checkpoint(out, bufs, info, Progress{},
                                        RankGroups{world.get(), world.get(), 0, world.get(), 0}, 0);
  log_info("imported {} ({}, {}) into {}", hf_dir, hf_arch_name(arch), cfg.summary(), d);
  log_info("continue with: mtron train --load {} {} (vocabulary {}: {})", out, model_flags(cfg),
           cfg.vocab_size,
           info.tokenizer.type.empty() ? "--tokenizer-type NullTokenizer --vocab-size N"
                                       : "tokenizer files saved in the checkpoint's tokenizer/");
  return arch;
}

}  // namespace mtron::checkpoint
