// defines: HfArch, HfExportOptions, export_hf, HfImportOptions, import_hf, parse_byte_size
//
// Hugging Face interchange (transformers' config.json and safetensors weights):
//   mtron export --load DIR --output OUT   checkpoint -> GPT2LMHeadModel, LlamaForCausalLM,
//                                          Qwen3ForCausalLM (--qk-layernorm) or (mixture of
//                                          experts) MixtralForCausalLM, Qwen3MoeForCausalLM
//   mtron import --input HF --output DIR   the reverse: a checkpoint `mtron train --load` continues
//
// OUT holds model.safetensors (or model-0000i-of-0000N.safetensors and
// model.safetensors.index.json above --max-shard-size), config.json, and the tokenizer files the
// checkpoint's run named (vocab.json + merges.txt, tokenizer.json, tokenizer.model). The weight
// conversions, all exact:
// - GPT-2's Conv1D layers store [in, out]: Megatron's [out, in] weights are transposed.
// - Megatron's fused QKV is interleaved per query group ([q heads of g | k_g | v_g] rows); GPT-2's
//   c_attn wants [Q | K | V] columns and Llama separate q/k/v_proj: the rows are regrouped.
// - SwiGLU's fc1 is [gate; up]: split into gate_proj and up_proj (Mixtral: each expert's w1 and
//   w3; fc2 is w2; the router is block_sparse_moe.gate; Qwen3-MoE: mlp.gate and each expert's
//   gate_proj, up_proj, down_proj). Mixtral's router and Qwen3-MoE's with norm_topk_prob
//   (softmax over all logits, top-k, the k weights renormalised) are mtron's softmax router
//   (top-k of the logits, softmax over the k), exactly; other MoE configurations are refused with
//   the reason (hf_config.h says which class expresses which model).
// - --qk-layernorm's q_layernorm/k_layernorm are Qwen3's self_attn.q_norm/k_norm.
// - The vocabulary padding (Megatron pads to a multiple of 128 x TP) is sliced off; import pads
//   with zero rows (padding never affects the loss).
// Both RoPEs rotate halves (Megatron-Core's default, HF Llama's rotate_half), so q and k need no
// permutation. Import reads F32, BF16 and F16 weights through the bounds-checked safetensors
// reader; nothing from the folder is ever executed.
#pragma once

#include <cstdint>
#include <string>

namespace mtron::checkpoint {

enum class HfArch { kGPT2, kLlama, kMixtral, kQwen3, kQwen3Moe, kDeepseekV3 };

// "GPT2LMHeadModel", "LlamaForCausalLM", "MixtralForCausalLM", "Qwen3ForCausalLM",
// "Qwen3MoeForCausalLM", "DeepseekV3ForCausalLM"
const char* hf_arch_name(HfArch a);

struct HfExportOptions {
  std::string dtype = "float32";             // or "bfloat16"
  uint64_t max_shard_bytes = 5'000'000'000;  // Hugging Face's default "5GB"
};

// Writes the folder `out` (which must not exist or be empty). Returns the architecture.
HfArch export_hf(const std::string& load_dir, const std::string& out, const HfExportOptions& o);

struct HfImportOptions {
  int64_t make_vocab_size_divisible_by = 128;
  int64_t seq_length = 0;  // 0: the model's max_position_embeddings
};

// Writes an mtron checkpoint (iteration 0, no optimizer state) into the --save style directory
// `out`. Returns the architecture.
HfArch import_hf(const std::string& hf_dir, const std::string& out, const HfImportOptions& o);

// "5GB", "500MB", "10KiB", "123" -> bytes.
uint64_t parse_byte_size(const std::string& s);

// `mtron export` / `mtron import` entry points (hf_cli.cpp): return the exit code.
int export_main(int argc, char** argv);
int import_main(int argc, char** argv);

}  // namespace mtron::checkpoint
