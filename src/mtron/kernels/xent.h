// defines: xent_stats, xent_rescale, xent_loss_sum, xent_backward
//
// Building blocks of the chunked, vocab-parallel softmax cross-entropy (the driver, which runs
// the LM-head GEMMs chunk by chunk and reduces statistics across TP ranks, is
// model/lm_head.cpp). A chunk holds logits[n, Vl] whose columns are global vocabulary ids
// [col_start, col_start + Vl). Columns with a global id >= vocab_valid are Megatron's vocab
// padding: they are excluded from the softmax (as -inf), so the loss does not depend on how
// the vocabulary was padded for a given TP size.
#pragma once

#include <cmath>
#include <cstdint>

#include "mtron/core/philox_inline.h"  // MT_HOST_DEVICE
#include "mtron/kernels/op.h"

namespace mtron::kernels {

// One row's terms of xent_rescale and xent_loss_sum (below): the one formula of the CPU and CUDA
// kernels.
MT_HOST_DEVICE inline float xent_rescaled_sumexp(float sumexp, float row_max, float global_max) {
  return row_max == -INFINITY ? 0.0f : sumexp * expf(row_max - global_max);
}
MT_HOST_DEVICE inline double xent_row_loss(float row_max, float sumexp, float target_logit) {
  return log(double(sumexp)) + double(row_max) - double(target_logit);
}

// xent_stats: per row r, row_max = max over valid columns (-inf if none), row_sumexp =
//   sum exp(l - row_max), target_logit = logits[r, targets[r] - col_start] if the target is in
//   this chunk's range, else 0.
// xent_rescale: one TP rank's statistics in the group's max (before the sums are all-reduced):
//   row_sumexp[r] *= exp(row_max[r] - global_max[r]) (0 where row_max is -inf), row_max[r] =
//   global_max[r].
// xent_loss_sum: *loss_sum += sum over rows of log(row_sumexp) + row_max - target_logit, each
//   term and the sum in double, on the device (the host reads the sum when it needs it). Rows
//   whose row_mask is 0 are left out (--eod-mask-loss); row_mask == nullptr counts every row.
// xent_backward: dlogits[r, c] = row_scale[r] * (exp(logits[r,c] - row_max[r]) / row_sumexp[r]
//   - [c is target]) with the *global* row_max/row_sumexp; 0 on padded columns. dlogits may alias
//   logits. row_scale == nullptr means 1 for every row. To a bf16 dlogits (the LM-head GEMMs'
//   input): the rounding of the fp32 values, bit for bit.
// Logits may be bf16 (the LM-head GEMM's bf16 output; xent_stats and the bf16 xent_backward,
// which may then write dlogits over them in place): each is read widened to fp32 (exact) and
// everything else is as for fp32 logits.
#define MT_PARAMS_xent_stats_of(L)                                          \
  (float* row_max, float* row_sumexp, float* target_logit, const L* logits, \
   const int32_t* targets, int64_t n, int64_t Vl, int64_t col_start, int64_t vocab_valid)
#define MT_PARAMS_xent_stats MT_PARAMS_xent_stats_of(float)
#define MT_PARAMS_xent_stats_bf16 MT_PARAMS_xent_stats_of(bf16)
// dlogits of type T from logits of type L
#define MT_PARAMS_xent_backward_in(T, L)                                                      \
  (T * dlogits, const L* logits, const int32_t* targets, const float* row_max,                \
   const float* row_sumexp, const float* row_scale, int64_t n, int64_t Vl, int64_t col_start, \
   int64_t vocab_valid)
#define MT_PARAMS_xent_backward_of(T) MT_PARAMS_xent_backward_in(T, float)
#define MT_PARAMS_xent_backward MT_PARAMS_xent_backward_of(float)
#define MT_PARAMS_xent_backward_bf16 MT_PARAMS_xent_backward_of(bf16)
#define MT_PARAMS_xent_backward_bf16_logits MT_PARAMS_xent_backward_in(bf16, bf16)
#define MT_PARAMS_xent_rescale \
  (float* row_max, float* row_sumexp, const float* global_max, int64_t n)
#define MT_PARAMS_xent_loss_sum                                                                \
  (double* loss_sum, const float* row_max, const float* row_sumexp, const float* target_logit, \
   const float* row_mask, int64_t n)
#define MTRON_XENT_OPS(OP)                                                                      \
  OP(void, xent_stats, xent_stats, xent_stats_contract, MT_PARAMS_xent_stats,                   \
     (row_max, row_sumexp, target_logit, logits, targets, n, Vl, col_start, vocab_valid))       \
  OP(void, xent_stats, xent_stats_bf16, xent_stats_contract, MT_PARAMS_xent_stats_bf16,         \
     (row_max, row_sumexp, target_logit, logits, targets, n, Vl, col_start, vocab_valid))       \
  OP(void, xent_rescale, xent_rescale, xent_rescale_contract, MT_PARAMS_xent_rescale,           \
     (row_max, row_sumexp, global_max, n))                                                      \
  OP(void, xent_loss_sum, xent_loss_sum, xent_loss_sum_contract, MT_PARAMS_xent_loss_sum,       \
     (loss_sum, row_max, row_sumexp, target_logit, row_mask, n))                                \
  OP(void, xent_backward, xent_backward, xent_backward_contract, MT_PARAMS_xent_backward,       \
     (dlogits, logits, targets, row_max, row_sumexp, row_scale, n, Vl, col_start, vocab_valid)) \
  OP(void, xent_backward, xent_backward_bf16, xent_backward_contract,                           \
     MT_PARAMS_xent_backward_bf16,                                                              \
     (dlogits, logits, targets, row_max, row_sumexp, row_scale, n, Vl, col_start, vocab_valid)) \
  OP(void, xent_backward, xent_backward_bf16_logits, xent_backward_contract,                    \
     MT_PARAMS_xent_backward_bf16_logits,                                                       \
     (dlogits, logits, targets, row_max, row_sumexp, row_scale, n, Vl, col_start, vocab_valid))
MTRON_XENT_OPS(MT_OP_DECLARE)

}  // namespace mtron::kernels
