// defines: add, scale_inplace, convert (f32<->bf16), bias_add, bias_backward,
//          sum_squares, fill_zero, fill, copy
//
// fill_zero, fill and copy are the device-generic forms of memset, std::fill and memcpy: code
// above kernels uses them on memory that may live on a GPU.
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
// x[0, bytes) = 0
void fill_zero(const Ctx& ctx, void* x, int64_t bytes);
// x[i] = value
void fill(const Ctx& ctx, float* x, float value, int64_t n);
// dst[0, bytes) = src[0, bytes), both on ctx's device; the ranges must not overlap
void copy(const Ctx& ctx, void* dst, const void* src, int64_t bytes);

}  // namespace mtron::kernels
