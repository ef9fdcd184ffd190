// defines: layernorm_forward/backward, rmsnorm_forward/backward
//
// Rows of C channels, statistics in fp32. Forward saves per-row mean/rstd for backward.
// Backward ACCUMULATES into dinp (+=): a norm's input is the residual stream, whose gradient
// also arrives directly through the residual connection. dweight/dbias accumulate (+=) too.
#pragma once

#include <cstdint>

#include "mtron/kernels/op.h"

namespace mtron::kernels {

// layernorm_forward: out[N,C] = (inp - mean) * rstd * weight + bias; mean[N], rstd[N] saved.
// rmsnorm_forward:   out[N,C] = inp * rstd * weight, rstd = 1/sqrt(mean(inp^2) + eps); rstd[N]
//                    saved.
// Both also to a bf16 out (the next GEMM's input): convert's rounding of the fp32 values bit for
// bit, in one pass.
#define MT_PARAMS_layernorm_forward                                                                \
  (float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias, \
   int64_t N, int64_t C, float eps)
#define MT_PARAMS_layernorm_forward_bf16                                                           \
  (bf16 * out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias, \
   int64_t N, int64_t C, float eps)
#define MT_PARAMS_layernorm_backward                                               \
  (float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, \
   const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C)
#define MT_PARAMS_rmsnorm_forward \
  (float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C, float eps)
#define MT_PARAMS_rmsnorm_forward_bf16 \
  (bf16 * out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C, float eps)
#define MT_PARAMS_rmsnorm_backward                                                        \
  (float* dinp, float* dweight, const float* dout, const float* inp, const float* weight, \
   const float* rstd, int64_t N, int64_t C)
#define MTRON_NORM_OPS(OP)                                                                        \
  OP(void, layernorm_forward, layernorm_forward, layernorm_forward_contract,                      \
     MT_PARAMS_layernorm_forward, (out, mean, rstd, inp, weight, bias, N, C, eps))                \
  OP(void, layernorm_forward, layernorm_forward_bf16, layernorm_forward_contract,                 \
     MT_PARAMS_layernorm_forward_bf16, (out, mean, rstd, inp, weight, bias, N, C, eps))           \
  OP(void, layernorm_backward, layernorm_backward, layernorm_backward_contract,                   \
     MT_PARAMS_layernorm_backward, (dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C))   \
  OP(void, rmsnorm_forward, rmsnorm_forward, rmsnorm_forward_contract, MT_PARAMS_rmsnorm_forward, \
     (out, rstd, inp, weight, N, C, eps))                                                         \
  OP(void, rmsnorm_forward, rmsnorm_forward_bf16, rmsnorm_forward_contract,                       \
     MT_PARAMS_rmsnorm_forward_bf16, (out, rstd, inp, weight, N, C, eps))                         \
  OP(void, rmsnorm_backward, rmsnorm_backward, rmsnorm_backward_contract,                         \
     MT_PARAMS_rmsnorm_backward, (dinp, dweight, dout, inp, weight, rstd, N, C))
MTRON_NORM_OPS(MT_OP_DECLARE)

}  // namespace mtron::kernels
