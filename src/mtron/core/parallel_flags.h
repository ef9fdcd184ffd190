// defines: ParallelFlags, add_parallel_flags, parallel_flag_args, PrecisionFlags,
//          add_precision_flags, precision_flag_args
//
// Megatron's parallel-layout, batch and precision flags (Megatron's arguments.py),
// defined once: `mtron train` registers them, `mtron plan` registers the layout sizes it can fix,
// and the planner's launch scripts write them with parallel_flag_args / precision_flag_args, so
// an emitted script always parses in `mtron train`. The sizes keep whatever value the config
// holds when registered (ParallelConfig's defaults for the trainer; 0, "searched", for the
// planner).
#pragma once

#include <CLI/App.hpp>
#include <string>
#include <vector>

#include "mtron/core/model_config.h"
#include "mtron/core/parallel_config.h"
#include "mtron/core/precision.h"

namespace mtron {

enum class ParallelFlags {
  kSizes,  // the parallel sizes, micro and global batch, the pipeline split (virtual and uneven
           // stages, the embedding and loss counted as layers, the layout string) and the CP
           // communication (--cp-comm-type, --hierarchical-context-parallel-sizes)
  kAll,    // and the execution switches (SP, distributed optimizer, overlaps, rank order)
};

// Registers the flags in `group`, bound to `p`'s fields (which keep their current values as
// defaults).
void add_parallel_flags(CLI::App& app, ParallelConfig& p, ParallelFlags which, const char* group);

// The inverse for a finalized config: every flag with its value, expert sizes only for MoE
// models. Parsing the result with add_parallel_flags (kAll) gives the same layout.
std::vector<std::string> parallel_flag_args(const ParallelConfig& p, bool moe);

// The precision flags `mtron train` has: --bf16 and --fp16 (bf16 / fp16 weights and activations
// in compute, fp32 master weights and gradients; they exclude each other) and
// --grad-reduce-in-bf16 (Megatron: with --bf16, reduce the gradients over data parallel in bf16).
struct PrecisionFlags {
  Precision compute = Precision::kFP32;  // --bf16: kBF16, --fp16: kFP16
  bool grad_reduce_in_bf16 = false;
};
void add_precision_flags(CLI::App& app, PrecisionFlags& f, const char* group);
std::vector<std::string> precision_flag_args(const PrecisionFlags& f);

}  // namespace mtron
