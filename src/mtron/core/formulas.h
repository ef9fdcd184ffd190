// defines: flops_per_iteration, RecomputeGranularity, RecomputeModule, RecomputeModules,
//          recompute_module_names, StateBytes, state_bytes_per_parameter,
//          TheoreticalMemory, megatron_theoretical_memory, format_theoretical_memory,
//          korthikanti_activation_bytes_per_layer, lm_head_rows_per_chunk
//
// Megatron's analytic formulas, shared by the trainer's log lines (TFLOP/s, MFU, "Theoretical
// memory footprints") and the planner. One piece of code, so a plan's prediction and a run's
// measurement use the same numerators.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mtron/core/hardware.h"
#include "mtron/core/model_config.h"
#include "mtron/core/parallel_config.h"

namespace mtron {

// Megatron's num_floating_point_operations for one iteration of `global_batch` sequences
// (forward + backward, causal attention counted once, recompute not counted, so it gives MFU).
// `padded_vocab` is the vocabulary as padded for the run's TP size.
double flops_per_iteration(const ModelConfig& m, int64_t global_batch, int64_t padded_vocab);

// Token rows per chunk of mtron's fused output layer + cross-entropy (model/lm_head.h): the
// logits of at most this many rows x vocab_local columns exist at a time, within the device's
// chunk of chunk_elems floats (kernels::chunk_elems: 2^22 on a CPU, cache-sized GEMMs; 2^26 on
// a GPU, large GEMMs and few host synchronisations for the loss), at least 16 rows and at most
// chunk_elems / 4096.
int64_t lm_head_rows_per_chunk(int64_t vocab_local, int64_t chunk_elems);

// --recompute-granularity (none: the flag is absent).
enum class RecomputeGranularity { kNone, kSelective, kFull };

// Megatron's --recompute-modules: the parts of every transformer layer that selective recompute
// drops after the forward pass and rebuilds in the backward pass.
enum class RecomputeModule : uint32_t {
  kCoreAttn = 1u << 0,       // core_attn: core attention
  kMoeAct = 1u << 1,         // moe_act: the routed experts' activation function
  kLayernorm = 1u << 2,      // layernorm: input_layernorm and pre_mlp_layernorm
  kMlaUpProj = 1u << 3,      // mla_up_proj: multi-latent attention's up projections and RoPE
  kMlp = 1u << 4,            // mlp: a dense layer's MLP
  kMoe = 1u << 5,            // moe: an MoE layer's MLP (routed and shared experts)
  kSharedExperts = 1u << 6,  // shared_experts: an MoE layer's shared expert
};
struct RecomputeModules {
  uint32_t bits = uint32_t(RecomputeModule::kCoreAttn);  // Megatron's default: core_attn
  bool has(RecomputeModule m) const { return (bits & uint32_t(m)) != 0; }
  void add(RecomputeModule m) { bits |= uint32_t(m); }
  // "layernorm mla_up_proj", in Megatron's order of the choices; "none" when empty
  std::string describe() const;
};
// Megatron's names of the modules, in the order of its choices.
const std::vector<std::pair<std::string_view, RecomputeModule>>& recompute_module_names();
// The modules of --recompute-modules' words (none: an empty list, as Megatron's nargs='*');
// throws mtron::Error naming a word that is not a module and the choices.
RecomputeModules parse_recompute_modules(const std::vector<std::string>& words);
// Megatron's rule on the modules that needs only the model (TransformerConfig, its message):
// mla_up_proj needs multi-latent attention.
void check_recompute_modules(const RecomputeModules& r, const ModelConfig& m);

// Bytes of model state per parameter held by one rank (Megatron's table in
// docs/.../dist_optimizer.md): bf16 params with fp32 grads 18, or 6 + 12/d with the distributed
// optimizer sharding the fp32 master copy and Adam moments over d ranks; fp32 16 or 8 + 8/d.
// fp16 counts as bf16: mtron's fp16 keeps fp32 gradients (the fp16 params with fp16 grads and an
// fp32 main-grad copy of Megatron's table, 20 or 4 + 16/d, are not what mtron trains). fp8
// training keeps bf16 params (as bf16).
// grads_fp32 = false is --grad-reduce-in-bf16 (bf16 gradient buffers).
struct StateBytes {
  double param = 0, grad = 0, optimizer = 0;
  double total() const { return param + grad + optimizer; }
};
StateBytes state_bytes_per_parameter(Precision params,
                                     bool distributed_optimizer,
                                     int64_t shards,
                                     bool grads_fp32 = true);

// Megatron's theoretical_memory_usage.py (HEAD d98e8a6), reproduced term by term, for the
// "Theoretical memory footprints" line: the most loaded rank (first pipeline stage), bytes.
// Like Megatron it assumes bf16 (18 or 6 + 12/d bytes per parameter with d = DP, not DP x CP),
// ignores biases, position embeddings and CP, and picks the SP + selective formula only when
// both are on (else the "without SP" formula, which includes a 1.05 overhead).
struct TheoreticalMemory {
  double weight_and_optimizer = 0;
  double activation = 0;
  double total() const { return weight_and_optimizer + activation; }
};
TheoreticalMemory megatron_theoretical_memory(const ModelConfig& m,
                                              const ParallelConfig& p,
                                              RecomputeGranularity recompute);
// "Theoretical memory footprints: weight and optimizer=X MB, activation=Y MB, total=Z MB"
std::string format_theoretical_memory(const TheoreticalMemory& t);

// Korthikanti et al. 2022, Table 2: activation bytes of one transformer layer for one
// micro-batch (s tokens x b sequences, hidden h, a heads, TP size t), 16-bit activations,
// dropout masks included, attention scores materialised (no flash attention).
double korthikanti_activation_bytes_per_layer(int64_t s,
                                              int64_t b,
                                              int64_t h,
                                              int64_t a,
                                              int64_t t,
                                              bool sequence_parallel,
                                              RecomputeGranularity recompute);

}  // namespace mtron
