// defines: VocabParallelCrossEntropy
//
// Megatron's vocab_parallel_cross_entropy (tensor_parallel/cross_entropy.py), chunk by chunk
// over token rows. Each TP rank holds the logits [n, Vl] of its vocabulary shard (global ids
// [col_start, col_start + Vl)); a row's loss needs the max over the whole vocabulary, the sum of
// exp(logit - max) and the target's logit, which are reduced over the TP group (the sums rescaled
// to the global max first), so the logits are never gathered. Columns at or beyond vocab_valid
// (Megatron's vocabulary padding) are excluded from the softmax, so the loss does not depend on
// the padding. The statistics stay on the device: the TP reduction works on them there, the
// backward reads them, and the losses are summed into a device accumulator, so a chunk needs no
// host round trip.
#pragma once

#include <cstdint>

#include "mtron/core/arena.h"
#include "mtron/kernels/ctx.h"
#include "mtron/parallel/mappings.h"

namespace mtron::parallel {

class VocabParallelCrossEntropy {
 public:
  // Chunks of at most max_rows rows; the gradient of each token's loss is row_scale (e.g. 1 /
  // the tokens of the global batch). Device buffers come from `arena` and live as long as it.
  VocabParallelCrossEntropy(const kernels::Ctx& k,
                            const TensorParallel& tp,
                            Arena& arena,
                            int64_t max_rows,
                            float row_scale);

  // Adds the sum of a chunk's n row losses to *loss_sum (device memory). Collective over the TP
  // group. Logits: float, or bf16 (the LM head's bf16 GEMM output). row_mask (device, [n], 0 or
  // 1; nullptr: every row): rows with 0 add nothing and get no gradient (--eod-mask-loss); every
  // chunk of an instance passes one or none.
  template <typename L>
  void forward(const L* logits,
               const int32_t* targets,
               int64_t n,
               int64_t Vl,
               int64_t col_start,
               int64_t vocab_valid,
               double* loss_sum,
               const float* row_mask = nullptr);
  // dlogits[n, Vl] = row_scale (softmax - one-hot of the target) of the last forward's chunk
  // (times its row_mask), 0 on padded columns; dlogits (float, or bf16: the LM-head GEMMs' input)
  // may alias logits (float, or bf16 with a bf16 dlogits).
  template <typename T, typename L>
  void backward(T* dlogits,
                const L* logits,
                const int32_t* targets,
                int64_t n,
                int64_t Vl,
                int64_t col_start,
                int64_t vocab_valid) const;

 private:
  kernels::Ctx k_;
  TensorParallel tp_;
  int64_t R_;
  float scale_;
  float* stats_;   // device [4, R]: max | sum of exp | target logit | row scale
  float* global_;  // device [R]: the TP group's max (TP > 1)
};

}  // namespace mtron::parallel
