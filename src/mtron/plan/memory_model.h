// defines: StageParams, stage_parameters, layer_activation_bytes, MemoryBreakdown,
//          estimate_memory
//
// Memory per rank: weights, gradients and optimizer state (distributed optimizer over DP x CP
// for dense parameters and over the expert-data-parallel group for experts), the saved
// activations of the micro-batches a pipeline stage holds at once (Korthikanti et al. 2022
// generalised to GQA, SwiGLU, MoE, CP, fused attention and Megatron's --recompute-modules), and
// framework overhead. Every stage is evaluated and the most loaded one reported. Where it models
// what Megatron's theoretical_memory_usage.py models, it gives the same numbers
// (tests/plan/test_memory.cpp); docs/planning.md lists the differences.
#pragma once

#include <cstdint>
#include <string>

#include "mtron/core/model_config.h"
#include "mtron/plan/layout.h"

namespace mtron::plan {

// Parameters one rank holds for pipeline stage `stage`, by how they are sharded.
struct StageParams {
  double tp_sharded = 0;  // split over TP (attention, dense MLP, shared experts, vocabulary)
  double replicated = 0;  // norms, row-parallel biases, router, position embeddings
  double expert = 0;      // routed experts, split over EP x ETP
  double total() const { return tp_sharded + replicated + expert; }
};
StageParams stage_parameters(const ModelConfig& m, const ParallelConfig& p, int64_t stage);

// Saved activation bytes of one transformer layer for one micro-batch on one rank, less what the
// layout's recompute drops (full: all but the layer's input; selective: what its modules drop).
// fused_attention: flash-style attention keeps no s x s scores (GPU kernels and mtron's CPU
// kernels; false models kernels that materialise them, as Megatron's before flash attention).
double layer_activation_bytes(const ModelConfig& m,
                              const Layout& l,
                              bool fused_attention,
                              bool moe_layer);

struct MemoryBreakdown {
  int64_t stage = 0;      // the pipeline stage with the largest total
  double parameters = 0;  // parameters held by the rank (all shardings)
  double weights = 0;     // bytes: model-precision parameters
  double gradients = 0;   // gradient buffers
  double optimizer =
      0;  // fp32 master copy and Adam moments (sharded with --use-distributed-optimizer)
  double fp8_weights = 0;  // fp8 weight copies (--fp8-format)
  double fp8_state = 0;    // TE's amax histories and scales (--fp8-format)
  double activations = 0;  // saved activations of the in-flight micro-batches
  double working = 0;      // transient peak: a recomputed layer and its CP buffers, or logits
  double overhead = 0;     // runtime, communication buffers, allocator fragmentation
  double in_flight = 0;    // micro-batch-layers held by the stage (layers x micro-batches)
  double capacity = 0;     // device memory (per rank)

  double model_state() const { return weights + gradients + optimizer + fp8_weights + fp8_state; }
  double total() const { return model_state() + activations + working + overhead; }
  // Fits with `margin` (e.g. 0.1) of the capacity left free.
  bool fits(double margin) const { return total() <= capacity * (1 - margin); }
};

MemoryBreakdown estimate_memory(const ModelConfig& m, const Layout& l, const Cluster& c);

// Context parallelism's buffers during one layer's attention (T tokens of the micro-batch on this
// rank, e bytes an element; the largest over the layers' --cp-comm-type), which come on top of
// what the layer's backward rebuilds: p2p: the ring's K/V block in use and the one arriving, and
// backward also a dK/dV partial in use and one arriving, each the size of this rank's K and V;
// all_gather: the whole sequence's K and V, and backward their gradients too; a2a: the
// all-to-all's copies of q, k, v and the output (the head-sharded ones replace the local ones in
// the stash); a2a+p2p: both levels'.
double cp_transient_bytes(const ModelConfig& m, const ParallelConfig& p, double T, double e);

// Multi-line human-readable breakdown (GiB), as `mtron plan` prints it.
std::string format_memory(const MemoryBreakdown& b);

}  // namespace mtron::plan
