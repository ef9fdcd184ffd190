// defines: update_fp8_scales, add_fp8_states
//
// The trainer's side of the FP8 scaling state (model/fp8.h): the once-per-iteration amax
// reduction, as Transformer Engine's amax reduction group does it, and the state's place in
// checkpoints.
#pragma once

#include "mtron/checkpoint/checkpoint.h"
#include "mtron/model/fp8.h"
#include "mtron/model/params.h"
#include "mtron/parallel/parallel_state.h"

namespace mtron::train {

// Delayed scaling after the global batch: every layer's recorded amaxes MAX-reduced over the
// ranks that share the layer (dense: TP and DP x CP; experts: expert TP and expert DP), so that
// every layout quantises with the same scales; then the histories roll and the scales update.
void update_fp8_scales(model::Fp8State& fp8, ParallelState& ps);

// The FP8 scaling state of the linear layers in buffer p (its experts' buffer when `experts`),
// per role, into c.states: "fp8.<weight>.<role>.amax_history" and ".scale".
void add_fp8_states(checkpoint::ChunkState& c,
                    model::Fp8State& fp8,
                    const model::ParamBuffer& p,
                    bool experts);

}  // namespace mtron::train
