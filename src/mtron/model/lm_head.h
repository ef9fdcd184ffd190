// defines: LmHeadArgs, lm_head_loss
//
// The output layer fused with softmax cross-entropy, chunk by chunk over token rows, so the
// full [N, V] logits never exist (at most a device-sized chunk of rows x V_local floats at a
// time: kernels::chunk_elems). The weight is this rank's vocabulary shard [Vl, h] (global ids
// [col_start, col_start + Vl)); the loss is Megatron's vocab-parallel cross-entropy
// (parallel/cross_entropy.h), so logits are never gathered. Columns at or beyond vocab_valid
// (padding) are excluded from the softmax.
//
// In training the backward runs in the same pass: each chunk's dlogits give its rows of dh
// (written) and add to dW, while the chunk is hot in cache; the loss's gradient needs nothing
// from later layers, so this is exact.
//
// In bf16 mode the logits are the GEMM's bf16 output, as Megatron's are (the loss and its
// gradient computed in fp32 from their values), and their gradient overwrites them; fp32 logits
// only where the caller asks for them (LmHeadArgs::logits).
#pragma once

#include <cstdint>

#include "mtron/core/arena.h"
#include "mtron/model/linear.h"

namespace mtron::model {

struct LmHeadArgs {
  Act h;                        // [N, hidden] as a GEMM input
  Act w;                        // [Vl, hidden]
  float* dw = nullptr;          // [Vl, hidden], += (training only)
  float* dh = nullptr;          // [N, hidden], written (training only; null: forward only)
  const int32_t* targets;       // [N]
  const float* mask = nullptr;  // [N] on the device: 1 where the token's loss counts, 0 where
                                // it is masked (--eod-mask-loss); null: every token counts
  double* loss_sum = nullptr;   // += the sum of the N token losses (device memory)
  float* logits = nullptr;      // [N, Vl] the logits, optional, on the run's device (tests, eval)
  int64_t N, hidden, Vl, col_start, vocab_valid;
  float dloss = 1.0f;  // d(total loss)/d(token loss), e.g. 1 / tokens in the global batch
};

// Adds the sum of the N token losses (those a.mask keeps) to *a.loss_sum on the device (no host
// round trip).
void lm_head_loss(const RunCtx& rc, Arena& scratch, const LmHeadArgs& a);

}  // namespace mtron::model
