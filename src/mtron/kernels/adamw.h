// defines: AdamWParams, AdamWRun, adamw_step, adamw_step_runs
//
// AdamW with decoupled weight decay, as Megatron's (apex FusedAdam, adam_w_mode) and
// torch.optim.AdamW:
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p = p - lr * (m / (1-b1^t) / (sqrt(v / (1-b2^t)) + eps) + wd * p)
// over one contiguous range of fp32 master weights (callers pass wd = 0 for biases and norm
// weights). When param_bf16 is not null the updated weights are also written there in bf16
// (the compute copy of mixed precision), in the same pass.
//
// adamw_step_runs: the multi-tensor form, one launch for a whole buffer: each run (in host memory)
// is elements [begin, begin + n) of param, grad and param_bf16 with their moments at
// m/v[moment, moment + n), stepped with the run's lr and weight decay (p gives beta1, beta2, eps
// and step; its lr and weight_decay are not used). Every element gets adamw_step's arithmetic.
//
// g is grad * grad_scale rounded to fp32, the gradient that scaling it in place before the step
// (gradient clipping's factor) would leave, without that pass over the gradients: they stay as
// they are.
#pragma once

#include <cstdint>

#include "mtron/kernels/op.h"

namespace mtron::kernels {

struct AdamWParams {
  float lr = 0;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float weight_decay = 0;
  int64_t step = 1;         // 1-based, for bias correction
  float grad_scale = 1.0f;  // the gradients' factor
};

struct AdamWRun {
  int64_t begin = 0, n = 0, moment = 0;
  float lr = 0, weight_decay = 0;
};

#define MT_PARAMS_adamw_step                                                         \
  (float* param, float* m, float* v, const float* grad, bf16* param_bf16, int64_t n, \
   const AdamWParams& p)
#define MT_PARAMS_adamw_step_runs                                                               \
  (float* param, float* m, float* v, const float* grad, bf16* param_bf16, const AdamWRun* runs, \
   int64_t n_runs, const AdamWParams& p)
#define MTRON_ADAMW_OPS(OP)                                                                       \
  OP(void, adamw_step, adamw_step, adamw_step_contract, MT_PARAMS_adamw_step,                     \
     (param, m, v, grad, param_bf16, n, p))                                                       \
  OP(void, adamw_step_runs, adamw_step_runs, adamw_step_runs_contract, MT_PARAMS_adamw_step_runs, \
     (param, m, v, grad, param_bf16, runs, n_runs, p))
MTRON_ADAMW_OPS(MT_OP_DECLARE)

}  // namespace mtron::kernels
