// defines: hf_arch_of, hf_config_json, hf_model_config, read_json_file
//
// Hugging Face config.json <-> ModelConfig (the architecture-level half of hf.h): which
// transformers class expresses a model (or why none does), the config.json written on export,
// and the ModelConfig read back on import, with every unsupported setting refused by name.
//   GPT2LMHeadModel      LayerNorm, learned positions, GELU, biases
//   LlamaForCausalLM     RMSNorm, RoPE, SwiGLU
//   Qwen3ForCausalLM     Llama with --qk-layernorm (q_norm/k_norm per head, before RoPE)
//   MixtralForCausalLM   Llama with experts in every layer, softmax top-k routing
//   Qwen3MoeForCausalLM  Qwen3 with experts; dense layers (--moe-layer-freq) as mlp_only_layers
//   DeepseekV3ForCausalLM  multi-latent attention with its latent norms (--qk-layernorm),
//                        dense layers first, sigmoid routing with the expert bias
//                        (e_score_correction_bias), groups, a scaling factor, shared experts;
//                        the MTP depths as DeepSeek's checkpoints store them (layers N + k)
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "mtron/checkpoint/hf.h"
#include "mtron/core/model_config.h"

namespace mtron::checkpoint {

// The class that expresses `c`; throws mtron::Error with the reason when none does.
HfArch hf_arch_of(const ModelConfig& c);

// config.json of an export (`dtype`: "float32" or "bfloat16").
nlohmann::ordered_json hf_config_json(const ModelConfig& c, HfArch arch, const std::string& dtype);

// The model of the folder's config.json.
std::pair<ModelConfig, HfArch> hf_model_config(const std::filesystem::path& dir,
                                               const HfImportOptions& o);

// A JSON object file of at most 64 MiB, nesting at most 16 deep.
nlohmann::json read_json_file(const std::filesystem::path& p);

}  // namespace mtron::checkpoint
