// defines: layernorm_forward/backward, rmsnorm_forward/backward
//
// Rows of C channels, statistics in fp32. Forward saves per-row mean/rstd for backward.
// Backward ACCUMULATES into dinp (+=): a norm's input is the residual stream, whose gradient
// also arrives directly through the residual connection. dweight/dbias accumulate (+=) too.
#pragma once

#include <cstdint>

#include "mtron/kernels/ctx.h"

namespace mtron::kernels {

// out[N,C] = (inp - mean) * rstd * weight + bias; mean[N], rstd[N] saved.
void layernorm_forward(const Ctx& ctx,
                       float* out,
                       float* mean,
                       float* rstd,
                       const float* inp,
                       const float* weight,
                       const float* bias,
                       int64_t N,
                       int64_t C,
                       float eps);
void layernorm_backward(const Ctx& ctx,
                        float* dinp,
                        float* dweight,
                        float* dbias,
                        const float* dout,
                        const float* inp,
                        const float* weight,
                        const float* mean,
                        const float* rstd,
                        int64_t N,
                        int64_t C);

// out[N,C] = inp * rstd * weight, rstd = 1/sqrt(mean(inp^2) + eps); rstd[N] saved.
void rmsnorm_forward(const Ctx& ctx,
                     float* out,
                     float* rstd,
                     const float* inp,
                     const float* weight,
                     int64_t N,
                     int64_t C,
                     float eps);
void rmsnorm_backward(const Ctx& ctx,
                      float* dinp,
                      float* dweight,
                      const float* dout,
                      const float* inp,
                      const float* weight,
                      const float* rstd,
                      int64_t N,
                      int64_t C);

}  // namespace mtron::kernels
