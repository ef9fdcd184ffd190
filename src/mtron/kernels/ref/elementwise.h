// The reference kernels of kernels/elementwise.h (ref_ops.h).
#pragma once

#include <cmath>
#include <cstring>
#include <limits>

#include "mtron/kernels/ref/common.h"

namespace mtron::kernels::ref {

template <typename T>
void add(T* out, const T* a, const T* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <typename T>
void scale_inplace(T* x, T s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

// Round to nearest even, written from the definition (frexp/nearbyint on the bf16 quantum),
// independently of core's bit trick.
inline bf16 to_bf16(float x) {
  float r;
  if (std::isnan(x)) {
    r = std::numeric_limits<float>::quiet_NaN();
    uint32_t u;
    std::memcpy(&u, &x, 4);
    u |= 0x00400000u;  // quiet the payload, keep the sign and upper payload bits
    return bf16{uint16_t(u >> 16)};
  }
  if (std::isinf(x) || x == 0) {
    r = x;
  } else {
    int e;
    std::frexp(x, &e);  // |x| = m 2^e, m in [0.5, 1): 8 significant bits = quantum 2^(e-8)
    const double quantum = std::ldexp(1.0, std::max(e - 8, -133));
    r = float(std::nearbyint(double(x) / quantum) * quantum);  // default mode: ties to even
  }
  uint32_t u;
  std::memcpy(&u, &r, 4);
  return bf16{uint16_t(u >> 16)};
}

template <typename T>
void bias_add(T* out, const T* bias, int64_t N, int64_t C) {
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = 0; c < C; ++c) out[r * C + c] += bias[c];
}

template <typename T>
void bias_backward(T* dbias, const T* dout, int64_t N, int64_t C) {
  for (int64_t c = 0; c < C; ++c) {
    Acc<T> acc = 0;
    for (int64_t r = 0; r < N; ++r) acc += dout[r * C + c];
    dbias[c] = T(dbias[c] + acc);
  }
}

template <typename T>
double sum_squares(const T* x, int64_t n) {
  Acc<T> acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += Acc<T>(x[i]) * Acc<T>(x[i]);
  return double(acc);
}

}  // namespace mtron::kernels::ref
