// defines: Cluster, Layout, layout_name, recompute_name, recompute_label, recompute_module_list
//
// The planner's vocabulary: the machine a job runs on, and one candidate layout (a finalized
// ParallelConfig plus the knobs Megatron sets beside it).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mtron/core/formulas.h"
#include "mtron/core/hardware.h"
#include "mtron/core/parallel_config.h"

namespace mtron::plan {

struct Cluster {
  Hardware hardware;             // a GPU entry, or a CPU node description
  int64_t num_devices = 1;       // GPUs (CPU: MPI ranks) in the job
  int64_t devices_per_node = 1;  // GPUs per node (CPU: ranks per node)

  int64_t nodes() const { return (num_devices + devices_per_node - 1) / devices_per_node; }
  // What one rank sees (rank_device()): a GPU, or a CPU rank's share of its node.
  Hardware device() const { return rank_device(hardware, int(devices_per_node)); }
};

struct Layout {
  ParallelConfig parallel;  // finalized against the model
  RecomputeGranularity recompute = RecomputeGranularity::kNone;
  // --recompute-modules: what selective recompute drops and rebuilds (Megatron's default
  // core_attn); meaningless with the other granularities.
  RecomputeModules recompute_modules;
  Precision precision = Precision::kBF16;
  bool grads_fp32 = true;        // false: --grad-reduce-in-bf16
  bool tp_comm_overlap = false;  // --tp-comm-overlap (TP collectives hidden behind GEMMs)
  // --overlap-moe-expert-parallel-comm: the 1F1B schedule runs one micro-batch's expert-parallel
  // all-to-alls behind another's computation (Megatron; mtron's trainer runs them in line).
  bool ep_comm_overlap = false;
  // Fused (flash) attention where the device has it; false: the s x s scores are materialised
  // (Megatron's --attention-backend unfused, and Megatron before flash attention).
  bool fused_attention = true;
  // --fp8-param-gather with fp8: GEMM weights live in fp8 (1 byte, plus a 1-byte transposed
  // copy) instead of bf16 with fp8 copies, and the parameter all-gather moves fp8.
  bool fp8_params = false;
  // --fp8-amax-history-len (Megatron's default 1): TE's delayed-scaling state per GEMM module.
  int64_t fp8_amax_history_len = 1;
  // --fp8-format with fp8: hybrid (E4M3 inputs and weights, E5M2 output gradients) or e4m3.
  bool fp8_hybrid = true;
};

// "TP2 PP4 VPP5 CP1 DP8 mbs1 recompute-selective(mla_up_proj mlp)" style one-line name.
std::string layout_name(const Layout& l);
std::string_view recompute_name(RecomputeGranularity r);
// The layout's recompute: "none", "full", "selective", or with modules other than Megatron's
// default "selective(mla_up_proj mlp)".
std::string recompute_label(const Layout& l);
// The names of the modules in `r`, in Megatron's order of its choices.
std::vector<std::string_view> recompute_module_list(const RecomputeModules& r);

}  // namespace mtron::plan
