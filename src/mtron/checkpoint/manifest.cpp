#include "mtron/checkpoint/manifest.h"

#include <fmt/format.h>

#include <filesystem>
#include <optional>
#include <string>

#include "mtron/checkpoint/file_io.h"
#include "mtron/checkpoint/safetensors.h"
#include "mtron/core/error.h"
#include "mtron/core/model_names.h"
#include "mtron/core/moe_layer_freq.h"

namespace mtron::checkpoint {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

// A float as the shortest decimal that reads back to it (1e-05, not 9.99999974737875e-06).
double tidy(float f) {
  return std::stod(fmt::format("{}", f));
}

// Typed field access that reports the file and the field instead of nlohmann's exception text.
template <typename T>
T field(const json& j, const char* key, const std::string& file) {
  MT_CHECK(j.contains(key), file, ": missing field '", key, "'");
  const json& v = j[key];
  if constexpr (std::is_same_v<T, bool>) {
    MT_CHECK(v.is_boolean(), file, ": field '", key, "' is not a boolean");
  } else if constexpr (std::is_integral_v<T>) {
    MT_CHECK(v.is_number_integer(), file, ": field '", key, "' is not an integer");
  } else if constexpr (std::is_floating_point_v<T>) {
    MT_CHECK(v.is_number(), file, ": field '", key, "' is not a number");
  } else {
    MT_CHECK(v.is_string(), file, ": field '", key, "' is not a string");
  }
  return v.get<T>();
}
template <typename T>
T field_or(const json& j, const char* key, T fallback, const std::string& file) {
  return j.contains(key) ? field<T>(j, key, file) : fallback;
}

// A field holding one of the names of `table` (core/model_names.h); `what` names it in the
// error for any other name.
template <typename E, size_t N>
E named_field(const json& j,
              const char* key,
              const EnumName<E> (&table)[N],
              const char* what,
              const std::string& file) {
  const auto s = field<std::string>(j, key, file);
  const std::optional<E> v = value_of(table, s);
  MT_CHECK(v.has_value(), file, ": unknown ", what, " '", s, "'");
  return *v;
}

// --lr-decay-style's names.
constexpr EnumName<optim::LrDecayStyle> kLrDecayStyleNames[] = {
    {optim::LrDecayStyle::kConstant, "constant"},
    {optim::LrDecayStyle::kLinear, "linear"},
    {optim::LrDecayStyle::kCosine, "cosine"},
    {optim::LrDecayStyle::kInverseSquareRoot, "inverse-square-root"},
    {optim::LrDecayStyle::kWsd, "WSD"}};

// --lr-wsd-decay-style's names.
constexpr EnumName<optim::WsdDecayStyle> kWsdDecayStyleNames[] = {
    {optim::WsdDecayStyle::kExponential, "exponential"},
    {optim::WsdDecayStyle::kLinear, "linear"},
    {optim::WsdDecayStyle::kCosine, "cosine"},
    {optim::WsdDecayStyle::kMinusSqrt, "minus_sqrt"}};

}  // namespace

std::string lr_style_name(optim::LrDecayStyle s) {
  return name_of(kLrDecayStyleNames, s);
}

std::string wsd_style_name(optim::WsdDecayStyle s) {
  return name_of(kWsdDecayStyleNames, s);
}

ordered_json model_config_to_json(const ModelConfig& m) {
  ordered_json j;
  j["num_layers"] = m.num_layers;
  j["hidden_size"] = m.hidden_size;
  j["num_attention_heads"] = m.num_attention_heads;
  j["group_query_attention"] = m.group_query_attention;
  j["num_query_groups"] = m.num_query_groups;
  j["kv_channels"] = m.kv_channels;
  j["ffn_hidden_size"] = m.ffn_hidden_size;
  j["swiglu"] = m.swiglu;
  if (m.squared_relu) j["squared_relu"] = true;  // older manifests: GELU or SwiGLU
  j["normalization"] = name_of(kNormalizationNames, m.normalization);
  j["norm_epsilon"] = tidy(m.norm_epsilon);
  j["apply_layernorm_1p"] = m.apply_layernorm_1p;
  j["qk_layernorm"] = m.qk_layernorm;
  j["position_embedding_type"] = name_of(kPositionEmbeddingNames, m.position_embedding_type);
  j["rotary_base"] = tidy(m.rotary_base);
  j["rotary_percent"] = tidy(m.rotary_percent);
  if (m.rope_scaling) j["rope_scaling_factor"] = tidy(m.rope_scaling_factor);
  if (m.rotary_interleaved) j["rotary_interleaved"] = true;  // older manifests: rotate-half
  j["untie_embeddings_and_output_weights"] = m.untie_embeddings_and_output_weights;
  j["add_bias_linear"] = m.add_bias_linear;
  j["add_qkv_bias"] = m.add_qkv_bias;
  j["make_vocab_size_divisible_by"] = m.make_vocab_size_divisible_by;
  j["init_method_std"] = tidy(m.init_method_std);
  j["seq_length"] = m.seq_length;
  j["max_position_embeddings"] = m.max_position_embeddings;
  j["vocab_size"] = m.vocab_size;
  j["hidden_dropout"] = tidy(m.hidden_dropout);
  j["attention_dropout"] = tidy(m.attention_dropout);
  if (m.mtp_num_layers > 0) {  // manifests without MTP carry neither
    j["mtp_num_layers"] = m.mtp_num_layers;
    j["mtp_loss_scaling_factor"] = tidy(m.mtp_loss_scaling_factor);
  }
  j["num_experts"] = m.num_experts;
  if (m.is_moe()) {  // Megatron's flag names; dense manifests carry num_experts 0 only
    j["moe_ffn_hidden_size"] = m.moe_ffn_hidden_size;
    j["moe_router_topk"] = m.moe_router_topk;
    j["moe_layer_freq"] = m.moe_layer_freq;
    if (!m.moe_layer_pattern.empty())
      j["moe_layer_pattern"] = moe_layer_freq_string(m.moe_layer_freq, m.moe_layer_pattern);
    j["moe_router_num_groups"] = m.moe_router_num_groups;
    j["moe_router_group_topk"] = m.moe_router_group_topk;
    j["moe_router_topk_scaling_factor"] = tidy(m.moe_router_topk_scaling_factor);
    j["moe_router_pre_softmax"] = m.moe_router_pre_softmax;
    j["moe_router_enable_expert_bias"] = m.moe_router_enable_expert_bias;
    j["moe_router_bias_update_rate"] = tidy(m.moe_router_bias_update_rate);
    j["moe_shared_expert_intermediate_size"] = m.moe_shared_expert_intermediate_size;
    j["moe_router_score_function"] = name_of(kRouterScoreNames, m.moe_router_score_function);
    j["moe_router_load_balancing_type"] =
        name_of(kRouterLoadBalancingNames, m.moe_router_load_balancing_type);
    j["moe_aux_loss_coeff"] = tidy(m.moe_aux_loss_coeff);
    j["moe_z_loss_coeff"] = tidy(m.moe_z_loss_coeff);
    j["moe_expert_capacity_factor"] = tidy(m.moe_expert_capacity_factor);
    j["moe_token_drop_policy"] = name_of(kTokenDropPolicyNames, m.moe_token_drop_policy);
  }
  if (m.mla.enabled) {  // Megatron's flag names; other manifests carry none of them
    j["multi_latent_attention"] = true;
    j["q_lora_rank"] = m.mla.q_lora_rank;
    j["kv_lora_rank"] = m.mla.kv_lora_rank;
    j["qk_head_dim"] = m.mla.qk_head_dim;
    j["qk_pos_emb_head_dim"] = m.mla.qk_pos_emb_head_dim;
    j["v_head_dim"] = m.mla.v_head_dim;
    j["rotary_scaling_factor"] = tidy(m.mla.rotary_scaling_factor);
    j["rope_type"] = m.mla.yarn() ? "yarn" : "rope";
    j["mscale"] = tidy(m.mla.mscale);
    j["mscale_all_dim"] = tidy(m.mla.mscale_all_dim);
  }
  return j;
}

ModelConfig model_config_from_json(const json& j, const std::string& file) {
  MT_CHECK(j.is_object(), file, ": 'model' is not an object");
  ModelConfig m;
  m.num_layers = field<int64_t>(j, "num_layers", file);
  m.hidden_size = field<int64_t>(j, "hidden_size", file);
  m.num_attention_heads = field<int64_t>(j, "num_attention_heads", file);
  m.group_query_attention = field<bool>(j, "group_query_attention", file);
  m.num_query_groups = field<int64_t>(j, "num_query_groups", file);
  m.kv_channels = field<int64_t>(j, "kv_channels", file);
  m.ffn_hidden_size = field<int64_t>(j, "ffn_hidden_size", file);
  m.swiglu = field<bool>(j, "swiglu", file);
  m.squared_relu = field_or<bool>(j, "squared_relu", false, file);
  m.normalization = named_field(j, "normalization", kNormalizationNames, "normalization", file);
  m.norm_epsilon = field<float>(j, "norm_epsilon", file);
  m.apply_layernorm_1p = field_or<bool>(j, "apply_layernorm_1p", false, file);
  m.qk_layernorm = field_or<bool>(j, "qk_layernorm", false, file);
  m.position_embedding_type = named_field(j, "position_embedding_type", kPositionEmbeddingNames,
                                          "position_embedding_type", file);
  m.rotary_base = field<float>(j, "rotary_base", file);
  m.rotary_percent = field<float>(j, "rotary_percent", file);
  m.rope_scaling = j.contains("rope_scaling_factor");
  if (m.rope_scaling) m.rope_scaling_factor = field<float>(j, "rope_scaling_factor", file);
  m.rotary_interleaved = field_or<bool>(j, "rotary_interleaved", false, file);
  m.untie_embeddings_and_output_weights =
      field<bool>(j, "untie_embeddings_and_output_weights", file);
  m.add_bias_linear = field<bool>(j, "add_bias_linear", file);
  m.add_qkv_bias = field_or<bool>(j, "add_qkv_bias", false, file);
  m.make_vocab_size_divisible_by = field<int64_t>(j, "make_vocab_size_divisible_by", file);
  m.init_method_std = field_or<float>(j, "init_method_std", 0.02f, file);
  m.seq_length = field<int64_t>(j, "seq_length", file);
  m.max_position_embeddings = field<int64_t>(j, "max_position_embeddings", file);
  m.vocab_size = field<int64_t>(j, "vocab_size", file);
  m.hidden_dropout = field_or<float>(j, "hidden_dropout", 0.0f, file);
  m.attention_dropout = field_or<float>(j, "attention_dropout", 0.0f, file);
  m.mtp_num_layers = field_or<int64_t>(j, "mtp_num_layers", 0, file);
  m.mtp_loss_scaling_factor = field_or<float>(j, "mtp_loss_scaling_factor", 0.1f, file);
  m.num_experts = field_or<int64_t>(j, "num_experts", 0, file);
  if (m.is_moe()) {
    m.moe_ffn_hidden_size = field<int64_t>(j, "moe_ffn_hidden_size", file);
    m.moe_router_topk = field<int64_t>(j, "moe_router_topk", file);
    m.moe_layer_freq = field<int64_t>(j, "moe_layer_freq", file);
    const std::string pattern = field_or<std::string>(j, "moe_layer_pattern", "", file);
    if (!pattern.empty()) parse_moe_layer_freq(pattern, m.moe_layer_freq, m.moe_layer_pattern);
    m.moe_router_num_groups = field_or<int64_t>(j, "moe_router_num_groups", 0, file);
    m.moe_router_group_topk = field_or<int64_t>(j, "moe_router_group_topk", 0, file);
    m.moe_router_topk_scaling_factor =
        field_or<float>(j, "moe_router_topk_scaling_factor", 0.0f, file);
    m.moe_router_pre_softmax = field_or<bool>(j, "moe_router_pre_softmax", false, file);
    m.moe_router_enable_expert_bias =
        field_or<bool>(j, "moe_router_enable_expert_bias", false, file);
    m.moe_router_bias_update_rate = field_or<float>(j, "moe_router_bias_update_rate", 1e-3f, file);
    m.moe_shared_expert_intermediate_size =
        field<int64_t>(j, "moe_shared_expert_intermediate_size", file);
    m.moe_router_score_function = named_field(j, "moe_router_score_function", kRouterScoreNames,
                                              "router score function", file);
    m.moe_router_load_balancing_type =
        named_field(j, "moe_router_load_balancing_type", kRouterLoadBalancingNames,
                    "router load balancing type", file);
    m.moe_aux_loss_coeff = field<float>(j, "moe_aux_loss_coeff", file);
    m.moe_z_loss_coeff = field<float>(j, "moe_z_loss_coeff", file);
    m.moe_expert_capacity_factor = field<float>(j, "moe_expert_capacity_factor", file);
    m.moe_token_drop_policy =
        named_field(j, "moe_token_drop_policy", kTokenDropPolicyNames, "token drop policy", file);
  }
  m.mla.enabled = field_or<bool>(j, "multi_latent_attention", false, file);
  if (m.mla.enabled) {
    m.mla.q_lora_rank = field<int64_t>(j, "q_lora_rank", file);
    m.mla.kv_lora_rank = field<int64_t>(j, "kv_lora_rank", file);
    m.mla.qk_head_dim = field<int64_t>(j, "qk_head_dim", file);
    m.mla.qk_pos_emb_head_dim = field<int64_t>(j, "qk_pos_emb_head_dim", file);
    m.mla.v_head_dim = field<int64_t>(j, "v_head_dim", file);
    m.mla.rotary_scaling_factor = field<float>(j, "rotary_scaling_factor", file);
    // manifests written before YaRN: plain RoPE (factor 1), Megatron's defaults
    m.mla.rope_type = field_or<std::string>(j, "rope_type", "yarn", file);
    m.mla.mscale = field_or<float>(j, "mscale", 1.0f, file);
    m.mla.mscale_all_dim = field_or<float>(j, "mscale_all_dim", 0.0f, file);
  }
  // Bounds far beyond any real model keep derived sizes (4h, V x h, ...) from overflowing.
  for (const int64_t v : {m.num_layers,
                          m.hidden_size,
                          m.num_attention_heads,
                          m.num_query_groups,
                          m.kv_channels,
                          m.ffn_hidden_size,
                          m.make_vocab_size_divisible_by,
                          m.seq_length,
                          m.max_position_embeddings,
                          m.vocab_size,
                          m.num_experts,
                          m.moe_ffn_hidden_size,
                          m.moe_router_topk,
                          m.moe_layer_freq,
                          m.moe_shared_expert_intermediate_size,
                          m.mla.q_lora_rank,
                          m.mla.kv_lora_rank,
                          m.mla.qk_head_dim,
                          m.mla.qk_pos_emb_head_dim,
                          m.mla.v_head_dim}) {
    MT_CHECK(v >= 0 && v <= (int64_t(1) << 30), file, ": model size ", v, " out of range");
  }
  try {
    m.finalize();
  } catch (const Error& e) {
    throw Error(file + ": invalid model configuration: " + e.what());
  }
  return m;
}

std::string manifest_to_json(const Manifest& m) {
  ordered_json j;
  j["format"] = "mtron-checkpoint";
  j["format_version"] = m.format_version;
  j["mtron_version"] = m.mtron_version;
  j["iteration"] = m.iteration;
  j["consumed_samples"] = m.consumed_samples;
  j["model"] = model_config_to_json(m.model);
  const LayoutRecord& l = m.layout;
  j["layout"] = {{"world_size", l.world_size},
                 {"tensor_model_parallel_size", l.tp},
                 {"pipeline_model_parallel_size", l.pp},
                 {"context_parallel_size", l.cp},
                 {"expert_model_parallel_size", l.ep},
                 {"expert_tensor_parallel_size", l.etp},
                 {"data_parallel_size", l.dp},
                 {"virtual_pipeline_stages", l.vpp},
                 {"sequence_parallel", l.sequence_parallel},
                 {"use_distributed_optimizer", l.distributed_optimizer}};
  j["precision"] = std::string(precision_name(m.precision));
  if (m.has_optimizer) {
    j["optimizer"] = {{"type", m.muon ? "muon" : "adamw"},
                      {"steps", m.optimizer_steps},
                      {"beta1", tidy(m.adam.beta1)},
                      {"beta2", tidy(m.adam.beta2)},
                      {"eps", tidy(m.adam.eps)},
                      {"weight_decay", tidy(m.adam.weight_decay)},
                      {"clip_grad", tidy(m.adam.clip_grad)}};
    if (m.muon) {
      j["optimizer"]["muon"] = {{"momentum", tidy(m.muon->momentum)},
                                {"nesterov", m.muon->nesterov},
                                {"scale_mode", name_of(optim::kMuonScaleNames, m.muon->scale)},
                                {"extra_scale_factor", tidy(m.muon->extra_scale)},
                                {"coefficient_type", m.muon->coefficients},
                                {"num_ns_steps", m.muon->ns_steps},
                                {"bf16_newton_schulz", m.muon->bf16},
                                {"split_qkv", m.muon->split_qkv}};
    }
    if (m.grad_scaler) {
      j["optimizer"]["grad_scaler"] = {{"scale", m.grad_scaler->scale},
                                       {"growth_tracker", m.grad_scaler->growth_tracker},
                                       {"hysteresis_tracker", m.grad_scaler->hysteresis_tracker}};
    }
  } else {
    j["optimizer"] = nullptr;
  }
  if (m.lr_schedule) {
    const optim::LrSchedule& s = *m.lr_schedule;
    j["lr_scheduler"] = {{"lr", s.lr},
                         {"min_lr", s.min_lr},
                         {"warmup_init", s.warmup_init},
                         {"warmup_samples", s.warmup_samples},
                         {"decay_samples", s.decay_samples},
                         {"decay_style", lr_style_name(s.style)},
                         {"num_samples", m.lr_samples}};
    if (s.style == optim::LrDecayStyle::kWsd) {
      j["lr_scheduler"]["wsd_decay_samples"] = s.wsd_decay_samples;
      j["lr_scheduler"]["wsd_decay_style"] = wsd_style_name(s.wsd_style);
    }
  } else {
    j["lr_scheduler"] = nullptr;
  }
  if (m.seed) {
    j["rng"] = {{"generator", "philox4x32-10"}, {"seed", *m.seed}};
  } else {
    j["rng"] = nullptr;
  }
  j["tokenizer"] = {{"type", m.tokenizer.type},
                    {"vocab_file", m.tokenizer.vocab_file},
                    {"merge_file", m.tokenizer.merge_file},
                    {"tokenizer_model", m.tokenizer.model}};
  ordered_json files = ordered_json::array();
  for (const FileRecord& f : m.files) {
    files.push_back({{"name", f.name},
                     {"bytes", f.bytes},
                     {"header_crc32c", f.header_crc32c},
                     {"tensors", f.tensors}});
  }
  j["files"] = files;
  j["saved_at"] = m.saved_at;
  return j.dump(2) + "\n";
}

Manifest manifest_from_json(std::string_view text, const std::string& file) {
  MT_CHECK(json_depth_ok(text, 8), file, ": manifest nests too deeply");
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  MT_CHECK(!j.is_discarded() && j.is_object(), file, ": manifest is not a JSON object");
  MT_CHECK(field<std::string>(j, "format", file) == "mtron-checkpoint", file,
           ": not an mtron checkpoint manifest");
  Manifest m;
  m.format_version = field<int>(j, "format_version", file);
  MT_CHECK(m.format_version >= 1 && m.format_version <= kFormatVersion, file,
           ": checkpoint format version ", m.format_version, " is newer than this mtron reads (",
           kFormatVersion, "); upgrade mtron");
  m.mtron_version = field_or<std::string>(j, "mtron_version", "", file);
  m.iteration = field<int64_t>(j, "iteration", file);
  m.consumed_samples = field<int64_t>(j, "consumed_samples", file);
  MT_CHECK(m.iteration >= 0 && m.consumed_samples >= 0, file,
           ": negative iteration or consumed samples");
  MT_CHECK(j.contains("model"), file, ": missing field 'model'");
  m.model = model_config_from_json(j["model"], file);
  m.dropout_recorded = j["model"].contains("hidden_dropout");
  if (j.contains("layout") && j["layout"].is_object()) {
    const json& l = j["layout"];
    m.layout.world_size = field_or<int64_t>(l, "world_size", 1, file);
    m.layout.tp = field_or<int64_t>(l, "tensor_model_parallel_size", 1, file);
    m.layout.pp = field_or<int64_t>(l, "pipeline_model_parallel_size", 1, file);
    m.layout.cp = field_or<int64_t>(l, "context_parallel_size", 1, file);
    m.layout.ep = field_or<int64_t>(l, "expert_model_parallel_size", 1, file);
    m.layout.etp = field_or<int64_t>(l, "expert_tensor_parallel_size", m.layout.tp, file);
    m.layout.dp = field_or<int64_t>(l, "data_parallel_size", 1, file);
    m.layout.vpp = field_or<int64_t>(l, "virtual_pipeline_stages", 1, file);
    m.layout.sequence_parallel = field_or<bool>(l, "sequence_parallel", false, file);
    m.layout.distributed_optimizer = field_or<bool>(l, "use_distributed_optimizer", false, file);
  }
  m.precision = parse_precision(field_or<std::string>(j, "precision", "fp32", file));
  if (j.contains("optimizer") && !j["optimizer"].is_null()) {
    const json& o = j["optimizer"];
    MT_CHECK(o.is_object(), file, ": optimizer is not an object");
    const std::string type = field<std::string>(o, "type", file);
    MT_CHECK(type == "adamw" || type == "muon", file, ": unknown optimizer type '", type,
             "' (expected adamw or muon)");
    if (type == "muon") {
      MT_CHECK(o.contains("muon") && o["muon"].is_object(), file,
               ": optimizer.muon is missing or not an object");
      const json& u = o["muon"];
      optim::MuonConfig c;
      c.momentum = field<float>(u, "momentum", file);
      c.nesterov = field<bool>(u, "nesterov", file);
      c.scale = named_field(u, "scale_mode", optim::kMuonScaleNames, "Muon scale mode", file);
      c.extra_scale = field<float>(u, "extra_scale_factor", file);
      c.coefficients = field<std::string>(u, "coefficient_type", file);
      c.ns_steps = field<int>(u, "num_ns_steps", file);
      c.bf16 = field<bool>(u, "bf16_newton_schulz", file);
      c.split_qkv = field<bool>(u, "split_qkv", file);
      m.muon = c;
    }
    m.has_optimizer = true;
    m.optimizer_steps = field<int64_t>(o, "steps", file);
    m.adam.beta1 = field<float>(o, "beta1", file);
    m.adam.beta2 = field<float>(o, "beta2", file);
    m.adam.eps = field<float>(o, "eps", file);
    m.adam.weight_decay = field<float>(o, "weight_decay", file);
    m.adam.clip_grad = field<float>(o, "clip_grad", file);
    if (o.contains("grad_scaler")) {
      const json& g = o["grad_scaler"];
      MT_CHECK(g.is_object(), file, ": optimizer.grad_scaler is not an object");
      m.grad_scaler = optim::GradScalerState{field<float>(g, "scale", file),
                                             field<int64_t>(g, "growth_tracker", file),
                                             field<int64_t>(g, "hysteresis_tracker", file)};
      MT_CHECK(m.grad_scaler->scale > 0, file, ": optimizer.grad_scaler.scale must be > 0");
    }
  }
  if (j.contains("lr_scheduler") && !j["lr_scheduler"].is_null()) {
    const json& s = j["lr_scheduler"];
    optim::LrSchedule lr;
    lr.lr = field<double>(s, "lr", file);
    lr.min_lr = field<double>(s, "min_lr", file);
    lr.warmup_init = field<double>(s, "warmup_init", file);
    lr.warmup_samples = field<int64_t>(s, "warmup_samples", file);
    lr.decay_samples = field<int64_t>(s, "decay_samples", file);
    lr.style = named_field(s, "decay_style", kLrDecayStyleNames, "lr decay style", file);
    if (lr.style == optim::LrDecayStyle::kWsd) {
      lr.wsd_decay_samples = field<int64_t>(s, "wsd_decay_samples", file);
      lr.wsd_style =
          named_field(s, "wsd_decay_style", kWsdDecayStyleNames, "WSD decay style", file);
    }
    m.lr_schedule = lr;
    m.lr_samples = field_or<int64_t>(s, "num_samples", m.consumed_samples, file);
  }
  if (j.contains("rng") && !j["rng"].is_null()) {
    const json& r = j["rng"];
    MT_CHECK(r.is_object() && r.contains("seed") && r["seed"].is_number_unsigned(), file,
             ": rng.seed is not a non-negative integer");
    m.seed = r["seed"].get<uint64_t>();
  }
  if (j.contains("tokenizer") && j["tokenizer"].is_object()) {
    const json& t = j["tokenizer"];
    m.tokenizer.type = field_or<std::string>(t, "type", "", file);
    m.tokenizer.vocab_file = field_or<std::string>(t, "vocab_file", "", file);
    m.tokenizer.merge_file = field_or<std::string>(t, "merge_file", "", file);
    m.tokenizer.model = field_or<std::string>(t, "tokenizer_model", "", file);
    // Files the checkpoint carries are named relative to its directory.
    const std::filesystem::path dir = std::filesystem::path(file).parent_path();
    for (std::string* f : {&m.tokenizer.vocab_file, &m.tokenizer.merge_file, &m.tokenizer.model}) {
      if (!f->empty() && std::filesystem::path(*f).is_relative()) *f = (dir / *f).string();
    }
  }
  MT_CHECK(j.contains("files") && j["files"].is_array(), file, ": missing 'files' list");
  for (const json& f : j["files"]) {
    MT_CHECK(f.is_object(), file, ": 'files' entry is not an object");
    FileRecord r;
    r.name = field<std::string>(f, "name", file);
    // Files live inside the checkpoint directory: no absolute paths, no "..", no subfolders.
    MT_CHECK(
        !r.name.empty() && r.name.find('/') == std::string::npos && r.name != "." && r.name != "..",
        file, ": invalid file name '", r.name, "'");
    MT_CHECK(f.contains("bytes") && f["bytes"].is_number_unsigned(), file, ": ", r.name,
             ": 'bytes' is not a non-negative integer");
    r.bytes = f["bytes"].get<uint64_t>();
    MT_CHECK(f.contains("header_crc32c") && f["header_crc32c"].is_number_unsigned() &&
                 f["header_crc32c"].get<uint64_t>() <= 0xFFFFFFFFu,
             file, ": ", r.name, ": invalid header_crc32c");
    r.header_crc32c = uint32_t(f["header_crc32c"].get<uint64_t>());
    r.tensors = field_or<int64_t>(f, "tensors", 0, file);
    m.files.push_back(std::move(r));
  }
  m.saved_at = field_or<std::string>(j, "saved_at", "", file);
  return m;
}

Manifest read_manifest(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "manifest.json").string();
  return manifest_from_json(read_small_file(path, 64 << 20), path);
}

}  // namespace mtron::checkpoint
