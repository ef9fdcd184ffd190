// defines: add, scale_inplace, convert (f32<->bf16), bias_add, bias_backward,
//          sum_squares
#pragma once

#include <cstdint>

#include "mtron/kernels/ctx.h"

namespace mtron::kernels {

// out[i] = a[i] + b[i]  (out may alias a or b)
void add(const Ctx& ctx, float* out, const float* a, const float* b, int64_t n);
// x[i] *= s
void scale_inplace(const Ctx& ctx, float* x, float s, int64_t n);
// dst[i] = round_to_nearest_even(src[i]) and back
void convert(const Ctx& ctx, bf16* dst, const float* src, int64_t n);
void convert(const Ctx& ctx, float* dst, const bf16* src, int64_t n);
// out[N,C] += bias[C] broadcast over rows
void bias_add(const Ctx& ctx, float* out, const float* bias, int64_t N, int64_t C);
// dbias[C] += sum over rows of dout[N,C]
void bias_backward(const Ctx& ctx, float* dbias, const float* dout, int64_t N, int64_t C);
// sum of x[i]^2 accumulated in double (for the global gradient norm)
double sum_squares(const Ctx& ctx, const float* x, int64_t n);

}  // namespace mtron::kernels
