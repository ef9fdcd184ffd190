// defines: add_fp8_flags, validate_fp8_flags
//
// Megatron's FP8 flags (its TransformerConfig fields; docs/precision.md):
//   --fp8-format e4m3|hybrid             FP8 GEMM inputs (hybrid: E5M2 output gradients)
//   --fp8-recipe delayed|tensorwise      scales from an amax history, or from each tensor's amax
//   --fp8-margin N                       (delayed) scale = fp8_max / 2^N / amax; default 0
//   --fp8-amax-history-len N             (delayed) default 1
//   --fp8-amax-compute-algo most_recent|max  (delayed) default most_recent
//   --first-last-layers-bf16             keep the first and last layers in bf16 (not delayed)
//   --num-layers-at-start-in-bf16 N, --num-layers-at-end-in-bf16 N   default 1 each
//   --fp8-param-gather                   accepted (with --use-distributed-optimizer): it changes
//                                        only what Megatron communicates, nothing here
#pragma once

#include <CLI/App.hpp>
#include <string>
#include <vector>

#include "mtron/core/model_config.h"
#include "mtron/core/parallel_config.h"
#include "mtron/core/precision.h"
#include "mtron/model/fp8.h"

namespace mtron::train {

void add_fp8_flags(CLI::App& app, model::Fp8Config& c, std::string& recipe, const char* group);

// Megatron's rules and mtron's (FP8 with bf16 or fp32, not fp16); throws mtron::Error naming the
// flag. `recipe` is --fp8-recipe's word; flags that have no effect add a note.
void validate_fp8_flags(model::Fp8Config& c,
                        const std::string& recipe,
                        Precision compute,
                        const ModelConfig& m,
                        const ParallelConfig& p,
                        std::vector<std::string>& notes);

}  // namespace mtron::train
