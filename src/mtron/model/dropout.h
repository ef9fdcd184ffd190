// defines: StepDropout, hidden_dropout, attention_dropout
//
// Dropout as Megatron applies it: hidden dropout (--hidden-dropout) on the embeddings' output
// and on each layer's attention and MLP (or MoE) output before its residual add, attention
// dropout (--attention-dropout) on the softmax probabilities; inverted scaling 1/(1-p); only
// in training (evaluation and generation run without). Masks are counter-based
// (core/philox.h): keyed by (seed, iteration, layer, kind), indexed by global coordinates
// (sample in the global batch, token position, feature; for attention: sample, head, query and
// key position), so every TP/SP/CP/PP/DP layout drops exactly what the 1-process run drops, and
// recompute and backward regenerate the forward's mask instead of keeping it.
#pragma once

#include <cstdint>
#include <string_view>

#include "mtron/core/model_config.h"
#include "mtron/kernels/attention.h"
#include "mtron/model/linear.h"

namespace mtron::model {

struct TokenLayout;  // layer.h

// What a micro-batch's masks depend on besides the coordinates.
struct StepDropout {
  bool on = false;  // a training forward/backward
  uint64_t seed = 0;
  int64_t iteration = 0;
  int64_t sample0 = 0;  // index in the global batch of the micro-batch's first sequence
};

// Which mask: the global layer index (-1: the embeddings) and what it drops.
struct DropoutSite {
  int64_t layer;
  std::string_view kind;
};

// Whether hidden dropout drops anything in micro-batch tl (tl.drop on, --hidden-dropout > 0).
bool hidden_dropout_on(const ModelConfig& cfg, const TokenLayout& tl);

// x[Nl, h] *= its hidden-dropout mask, for this rank's Nl rows (with SP: its block) of the
// micro-batch tl (tl.pos: the rows' global positions, on the run's device). Nothing when
// tl.drop is off or --hidden-dropout is 0. The backward applies the same call to the gradient.
void hidden_dropout(
    const RunCtx& rc, const ModelConfig& cfg, const TokenLayout& tl, DropoutSite site, float* x);

// The attention dropout of `layer` for this rank's heads (TP rank r holds heads [r Hl, (r+1)
// Hl)); q0 = k0 = 0 (ring attention sets the chunks'). p = 0 when d is off.
kernels::AttnDropout attention_dropout(
    const RunCtx& rc, const ModelConfig& cfg, const StepDropout& d, int64_t layer, int64_t Hl);

}  // namespace mtron::model
