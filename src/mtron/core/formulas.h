// defines: flops_per_iteration
//
// Megatron's analytic formulas, shared by the trainer's log line (TFLOP/s, MFU) and the planner.
// One piece of code, so a plan's prediction and a run's measurement use the same numerator.
#pragma once

#include <cstdint>

#include "mtron/core/model_config.h"

namespace mtron {

// Megatron's num_floating_point_operations for one iteration of `global_batch` sequences
// (forward + backward, causal attention counted once, recompute not counted, so it gives MFU).
// `padded_vocab` is the vocabulary as padded for the run's TP size.
double flops_per_iteration(const ModelConfig& m, int64_t global_batch, int64_t padded_vocab);

}  // namespace mtron
