// defines: AdamWParams, adamw_step
//
// AdamW with decoupled weight decay, as Megatron's (apex FusedAdam, adam_w_mode) and
// torch.optim.AdamW:
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p = p - lr * (m / (1-b1^t) / (sqrt(v / (1-b2^t)) + eps) + wd * p)
// over one contiguous range of fp32 master weights (callers pass wd = 0 for biases and norm
// weights). When param_bf16 is not null the updated weights are also written there in bf16
// (the compute copy of mixed precision), in the same pass.
#pragma once

#include <cstdint>

#include "mtron/kernels/op.h"

namespace mtron::kernels {

struct AdamWParams {
  float lr = 0;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float weight_decay = 0;
  int64_t step = 1;  // 1-based, for bias correction
};

#define MT_PARAMS_adamw_step                                                         \
  (float* param, float* m, float* v, const float* grad, bf16* param_bf16, int64_t n, \
   const AdamWParams& p)
#define MTRON_ADAMW_OPS(OP)                                           \
  OP(void, adamw_step, adamw_step, no_contract, MT_PARAMS_adamw_step, \
     (param, m, v, grad, param_bf16, n, p))
MTRON_ADAMW_OPS(MT_OP_DECLARE)

}  // namespace mtron::kernels
