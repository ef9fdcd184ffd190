// The reference kernels of kernels/fp8.h (ref_ops.h): the FP8 grid from its definition
// (frexp and nearbyint on the value's quantum), independently of the CPU kernel's bit trick.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "mtron/kernels/fp8.h"
#include "mtron/kernels/ref/common.h"
#include "mtron/kernels/ref/elementwise.h"

namespace mtron::kernels::ref {

// y on the grid of `format`: 1 + M mantissa bits in the normal range, the quantum
// 2^(emin - M) below it, ties to even; |y| >= fp8_max saturates; NaN becomes the quiet NaN.
inline float fp8_round(float y, Fp8Format format) {
  const int M = format == Fp8Format::kE4M3 ? 3 : 2;
  const int emin = format == Fp8Format::kE4M3 ? -6 : -14;
  const float max = fp8_max(format);
  if (std::isnan(y)) return std::numeric_limits<float>::quiet_NaN();
  if (std::fabs(y) >= max) return std::copysign(max, y);
  if (y == 0) return y;
  int e;
  std::frexp(y, &e);  // |y| = m 2^e, m in [0.5, 1): the leading bit is 2^(e-1)
  const double quantum = std::ldexp(1.0, std::max(e - 1, emin) - M);
  const double r = std::nearbyint(double(y) / quantum) * quantum;  // default mode: ties to even
  return std::copysign(float(r), y);
}

template <typename S>
float ref_value(S x) {
  if constexpr (std::is_same_v<S, bf16>) {
    uint32_t u = uint32_t(x.bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  } else {
    return float(x);
  }
}

template <typename S>
void abs_max(float* amax, const S* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) *amax = std::fmax(*amax, std::fabs(ref_value(src[i])));
}

template <typename S>
void fp8_quantize(bf16* dst, float* amax, const S* src, float scale, Fp8Format format, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float y = ref_value(src[i]) * scale;  // fp32 product, as the kernels
    dst[i] = to_bf16(fp8_round(y, format));
  }
  if (amax) abs_max(amax, src, n);
}

}  // namespace mtron::kernels::ref
