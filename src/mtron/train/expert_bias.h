// defines: update_expert_bias
//
// The trainer's side of the aux-loss-free expert bias (--moe-router-enable-expert-bias,
// model/moe.h), as Megatron's finalize_model_grads does it (_update_router_expert_bias,
// get_updated_expert_bias): once per global batch, every MoE layer's kept pairs per expert,
// counted over all its micro-batches, are summed over TP x CP x DP (the whole global batch: the
// ranks of one pipeline stage); each expert's bias then moves by
// rate * sign(mean over experts of the counts - the expert's count), and the counts restart.
// Every rank of the stage computes the same sums, so every replica of a bias stays equal.
#pragma once

#include <memory>
#include <vector>

#include "mtron/checkpoint/checkpoint.h"
#include "mtron/model/gpt.h"
#include "mtron/parallel/parallel_state.h"

namespace mtron::train {

// Collective over TP x CP x DP; no-op without MoE layers. Returns this stage's share of
// StepResult::expert_bias_hash (the same on every rank of the stage).
double update_expert_bias(std::vector<std::unique_ptr<model::GPTChunk>>& chunks,
                          const ParallelState& ps,
                          float rate);

}  // namespace mtron::train
