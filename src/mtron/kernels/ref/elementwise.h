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

// binary16 round to nearest even, written from the definition (11 significant bits, quantum
// never below 2^-24, anything that rounds beyond 65504 is infinity), independently of core's
// bit trick; NaN becomes the quiet NaN 0x7e00 with its sign (mtron's choice).
inline f16 to_f16(float x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return f16{uint16_t(sign | 0x7e00)};
  double r = std::fabs(double(x));
  if (r != 0 && !std::isinf(r)) {
    int e;
    std::frexp(r, &e);  // r = m 2^e, m in [0.5, 1)
    const double quantum = std::ldexp(1.0, std::max(e - 11, -24));
    r = std::nearbyint(r / quantum) * quantum;  // default mode: ties to even
  }
  if (r > 65504.0) return f16{uint16_t(sign | 0x7c00)};
  if (r == 0) return f16{sign};
  int e;
  std::frexp(r, &e);
  if (r < std::ldexp(1.0, -14)) return f16{uint16_t(sign | uint16_t(std::ldexp(r, 24)))};
  const int biased = e - 1 + 15;
  const double mant = std::ldexp(r, 1 - e) - 1.0;  // in [0, 1), a multiple of 2^-10
  return f16{uint16_t(sign | biased << 10 | int(std::ldexp(mant, 10)))};
}

// The value of a binary16 from its fields; a NaN's payload goes to the top of float's mantissa.
inline float from_f16(f16 h) {
  const bool neg = h.bits & 0x8000;
  const int e = (h.bits >> 10) & 31, m = h.bits & 1023;
  if (e == 31 && m != 0) {
    const uint32_t u = uint32_t(neg) << 31 | 0x7f800000u | uint32_t(m) << 13;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  const double v = e == 31  ? std::numeric_limits<double>::infinity()
                   : e == 0 ? std::ldexp(double(m), -24)
                            : std::ldexp(1.0 + double(m) / 1024.0, e - 15);
  return float(neg ? -v : v);
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

// Each element's multiplier drawn on its own (its own Philox block), at its global index.
template <typename T>
void dropout(T* x, const int32_t* pos, int64_t rows, const DropoutRows& d) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t sample = d.sample0 + (d.row0 + r) % d.B;
    for (int64_t f = 0; f < d.width; ++f) {
      float z;
      dropout_scales(&z, d.key, uint64_t((sample * d.S + pos[r]) * d.width + f), 1, 1, d.p);
      x[r * d.width + f] = T(x[r * d.width + f] * z);
    }
  }
}

}  // namespace mtron::kernels::ref
