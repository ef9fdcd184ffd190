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
#include "mtron/checkpoint/hf_config.h"
#include "mtron/checkpoint/reader.h"
#include "mtron/checkpoint/safetensors.h"
#include "mtron/comm/single.h"
#include "mtron/core/log.h"
#include "mtron/core/model_flags.h"
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
  kRopeRows,    // rows in blocks of `a`; a block's rows from `b` on are RoPE channels, `part` of
                // them, interleaved pairs in HF (rope_interleave) and rotate-half halves here
  kZeros,       // no Megatron tensor: zeros (export only)
};

struct Link {
  std::string hf, key;
  Shape hf_shape;
  LinkKind kind = LinkKind::kCopy;
  int64_t offset = 0, a = 0, b = 0, part = 0, cols = 0;
  bool export_only = false;  // a copy of a tensor another link reads back
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
    case LinkKind::kRopeRows: {
      const int64_t row = e / l.cols, block = row / l.a, w = row % l.a;
      int64_t here = w;
      if (w >= l.b) {  // HF's interleaved channel j: pair j / 2, member j % 2
        const int64_t j = w - l.b;
        here = l.b + (j % 2 == 0 ? j / 2 : l.part / 2 + j / 2);
      }
      return (block * l.a + here) * l.cols + e % l.cols;
    }
    case LinkKind::kZeros:
      return 0;
  }
  return 0;
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
  auto rope_rows = [&](std::string hf, std::string key, int64_t rows, int64_t block,
                       int64_t rope_at, int64_t cols) {
    ls.push_back({std::move(hf),
                  std::move(key),
                  {rows, cols},
                  LinkKind::kRopeRows,
                  0,
                  block,
                  rope_at,
                  c.mla.qk_pos_emb_head_dim,
                  cols});
  };
  // Multi-latent attention as DeepSeek-V3 names it (t: "<layer>.self_attn.", m: mtron's
  // "<layer>.self_attention."): RoPE rows interleaved (rope_interleave), the latent norms.
  auto mla = [&](const std::string& t, const std::string& m) {
    const MlaConfig& a = c.mla;
    const int64_t Dq = a.q_head_dim(), qr = a.q_lora_rank, kvr = a.kv_lora_rank;
    if (qr > 0) {
      copy(t + "q_a_proj.weight", m + "linear_q_down_proj.weight", {qr, h});
      copy(t + "q_a_layernorm.weight", m + "q_layernorm.weight", {qr});
      rope_rows(t + "q_b_proj.weight", m + "linear_q_up_proj.weight", H * Dq, Dq, a.qk_head_dim,
                qr);
    } else {
      rope_rows(t + "q_proj.weight", m + "linear_q_proj.weight", H * Dq, Dq, a.qk_head_dim, h);
    }
    rope_rows(t + "kv_a_proj_with_mqa.weight", m + "linear_kv_down_proj.weight",
              kvr + a.qk_pos_emb_head_dim, kvr + a.qk_pos_emb_head_dim, kvr, h);
    copy(t + "kv_a_layernorm.weight", m + "kv_layernorm.weight", {kvr});
    copy(t + "kv_b_proj.weight", m + "linear_kv_up_proj.weight",
         {H * (a.qk_head_dim + a.v_head_dim), kvr});
    copy(t + "o_proj.weight", m + "linear_proj.weight", {h, H * a.v_head_dim});
  };
  // SwiGLU MLP [gate; up] fc1 of width f as gate_proj/up_proj, fc2 as down_proj.
  auto swiglu = [&](const std::string& t, const std::string& m, int64_t f, const char* gate,
                    const char* up, const char* down) {
    copy(t + gate + ".weight", m + "linear_fc1.weight", {f, h}, 0);
    copy(t + up + ".weight", m + "linear_fc1.weight", {f, h}, f * h);
    copy(t + down + ".weight", m + "linear_fc2.weight", {h, f});
  };
  // One Llama-family layer (t: HF prefix, m: mtron's).
  auto llama_layer = [&](const std::string& t, const std::string& m, bool moe_layer) {
    copy(t + "input_layernorm.weight", m + "input_layernorm.weight", {h});
    if (c.mla.enabled) {
      mla(t + "self_attn.", m + "self_attention.");
    } else {
      const std::string qkv = m + "self_attention.linear_qkv.";
      const char* names[3] = {"q_proj", "k_proj", "v_proj"};
      for (int64_t p = 0; p < 3; ++p) {
        qkv_rows(t + "self_attn." + names[p] + ".weight", qkv + "weight", p, h);
        if (bias) qkv_rows(t + "self_attn." + names[p] + ".bias", qkv + "bias", p, 1);
      }
      if (c.qk_layernorm) {
        copy(t + "self_attn.q_norm.weight", m + "self_attention.q_layernorm.weight", {D});
        copy(t + "self_attn.k_norm.weight", m + "self_attention.k_layernorm.weight", {D});
      }
      copy(t + "self_attn.o_proj.weight", m + "self_attention.linear_proj.weight", {h, H * D});
      if (bias) copy(t + "self_attn.o_proj.bias", m + "self_attention.linear_proj.bias", {h});
    }
    copy(t + "post_attention_layernorm.weight", m + "pre_mlp_layernorm.weight", {h});
    if (!moe_layer) {
      swiglu(t + "mlp.", m + "mlp.", F, "gate_proj", "up_proj", "down_proj");
      if (bias) {
        copy(t + "mlp.gate_proj.bias", m + "mlp.linear_fc1.bias", {F}, 0);
        copy(t + "mlp.up_proj.bias", m + "mlp.linear_fc1.bias", {F}, F);
        copy(t + "mlp.down_proj.bias", m + "mlp.linear_fc2.bias", {h});
      }
      return;
    }
    // Mixtral's block_sparse_moe; Qwen3-MoE's and DeepSeek-V3's mlp (DeepSeek-V3 also: the
    // expert bias as mlp.gate.e_score_correction_bias, zeros without --moe-router-enable-
    // expert-bias, and the shared experts as one MLP).
    const int64_t E = c.num_experts, Fm = c.moe_ffn();
    const bool mixtral = arch == HfArch::kMixtral;
    const std::string moe = t + (mixtral ? "block_sparse_moe." : "mlp.");
    copy(moe + "gate.weight", m + "mlp.router.weight", {E, h});
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = fmt::format("{}experts.{}.", moe, e),
                        y = fmt::format("{}mlp.experts.local_experts.{}.", m, e);
      if (mixtral) {
        swiglu(x, y, Fm, "w1", "w3", "w2");
      } else {
        swiglu(x, y, Fm, "gate_proj", "up_proj", "down_proj");
      }
    }
    if (arch != HfArch::kDeepseekV3) return;
    if (c.moe_router_enable_expert_bias) {
      copy(moe + "gate.e_score_correction_bias", m + "mlp.router.expert_bias", {E});
    } else {
      ls.push_back({moe + "gate.e_score_correction_bias", "", {E}, LinkKind::kZeros});
      ls.back().export_only = true;
    }
    if (const int64_t Fs = c.moe_shared_expert_intermediate_size; Fs > 0)
      swiglu(moe + "shared_experts.", m + "mlp.shared_experts.", Fs, "gate_proj", "up_proj",
             "down_proj");
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
      llama_layer(fmt::format("model.layers.{}.", i), fmt::format("decoder.layers.{}.", i),
                  c.is_moe_layer(i));
    }
    copy("model.norm.weight", "decoder.final_layernorm.weight", {h});
    // DeepSeek-V3's checkpoints hold MTP depth k as layer L + k: its transformer layer, enorm,
    // hnorm, eh_proj, shared_head.norm (the depth's final norm), and copies of the word
    // embeddings and the output layer (written, not read back).
    for (int64_t k = 0; k < c.mtp_num_layers; ++k) {
      const std::string t = fmt::format("model.layers.{}.", L + k),
                        m = fmt::format("mtp.layers.{}.", k);
      llama_layer(t, m + "transformer_layer.", c.is_moe_layer(L - 1));
      copy(t + "enorm.weight", m + "enorm.weight", {h});
      copy(t + "hnorm.weight", m + "hnorm.weight", {h});
      copy(t + "eh_proj.weight", m + "eh_proj.weight", {h, 2 * h});
      copy(t + "shared_head.norm.weight", m + "final_layernorm.weight", {h});
      copy(t + "embed_tokens.weight", "embedding.word_embeddings.weight", {V, h});
      copy(t + "shared_head.head.weight",
           c.untie_embeddings_and_output_weights ? "output_layer.weight"
                                                 : "embedding.word_embeddings.weight",
           {V, h});
      ls[ls.size() - 2].export_only = ls.back().export_only = true;
    }
  }
  if (c.untie_embeddings_and_output_weights) copy("lm_head.weight", "output_layer.weight", {V, h});
  return ls;
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
  std::string f;
  for (const std::string& a : model_flag_args(c)) f += (f.empty() ? "" : " ") + a;
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
    case HfArch::kQwen3:
      return "Qwen3ForCausalLM";
    case HfArch::kQwen3Moe:
      return "Qwen3MoeForCausalLM";
    case HfArch::kDeepseekV3:
      return "DeepseekV3ForCausalLM";
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
  const HfArch arch = hf_arch_of(c);
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
      if (l.kind != LinkKind::kZeros && l.key != cached_key) {
        cached = reader.read_global(l.key);
        cached_key = l.key;
      }
      std::vector<float>& x = f32[k];
      x.assign(size_t(numel(l.hf_shape)), 0.0f);
      if (l.kind != LinkKind::kZeros) {
        for (int64_t e = 0; e < int64_t(x.size()); ++e)
          x[size_t(e)] = cached.f32()[link_index(l, q, e)];
      }
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
  write_file_atomic((tmp / "config.json").string(),
                    hf_config_json(c, arch, o.dtype).dump(2) + "\n");
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
  auto [cfg, arch] = hf_model_config(src, o);
  MT_CHECK(hf_arch_of(cfg) == arch, "internal: architecture mismatch");
  const HfWeights w(src);
  model::GPTChunk chunk(cfg, {0, cfg.num_layers, true, true}, parallel::TensorParallel{}, {});
  model::ParamBuffer& p = chunk.params();
  model::ParamBuffer& experts = chunk.expert_params();
  p.allocate(Precision::kFP32, 1);  // zeros: the vocabulary padding rows stay 0
  if (cfg.is_moe()) experts.allocate(Precision::kFP32, 1);
  // Where each Megatron tensor goes: parameters, and the expert biases (states of the dense
  // buffer).
  std::map<std::string, std::pair<float*, int64_t>> dest;
  for (model::ParamBuffer* b : {&p, &experts}) {
    for (size_t i = 0; i < b->specs().size(); ++i)
      dest[b->spec(int(i)).name] = {b->master(int(i)), b->spec(int(i)).numel()};
  }
  ChunkState dense{&p, {}, {}, {{0, p.size()}}, false, {}};
  if (cfg.moe_router_enable_expert_bias) add_expert_bias_states(dense, chunk);
  for (const StateTensor& t : dense.states) dest[t.name] = {t.data, numel(t.shape)};

  const std::vector<Link> ls = links(cfg, arch);
  const Qkv q{cfg.num_attention_heads, cfg.query_groups(), cfg.kv_channels};
  std::map<std::string, int64_t> covered;
  for (const Link& l : ls) {
    if (l.export_only) continue;
    const auto it = dest.find(l.key);
    MT_ASSERT(it != dest.end(), "no parameter ", l.key);
    float* dst = it->second.first;
    const std::vector<float> x = w.read(l.hf, l.hf_shape);
    for (int64_t e = 0; e < int64_t(x.size()); ++e) dst[link_index(l, q, e)] = x[size_t(e)];
    covered[l.key] += int64_t(x.size());
  }
  for (const auto& [name, where] : dest) {
    const int64_t n = where.second;
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
  std::vector<ChunkState> bufs = {dense};
  if (cfg.is_moe()) bufs.push_back({&experts, {}, {}, {{0, experts.size()}}, true, {}});
  const std::string d = save_checkpoint(
      out, bufs, info, Progress{}, RankGroups{world.get(), world.get(), 0, world.get(), 0}, {});
  log_info("imported {} ({}, {}) into {}", hf_dir, hf_arch_name(arch), cfg.summary(), d);
  log_info("continue with: mtron train --load {} {} (vocabulary {}: {})", out, model_flags(cfg),
           cfg.vocab_size,
           info.tokenizer.type.empty() ? "--tokenizer-type NullTokenizer --vocab-size N"
                                       : "tokenizer files saved in the checkpoint's tokenizer/");
  return arch;
}

}  // namespace mtron::checkpoint
