// The reference kernels of kernels/activation.h (ref_ops.h).
#pragma once

#include <cmath>

#include "mtron/kernels/ref/common.h"

namespace mtron::kernels::ref {
inline constexpr long double kK = 0.79788456080286535587989211986876373L;  // sqrt(2/pi)
inline constexpr long double kC = 0.044715L;

// The definition as written: 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const Acc<T> x = inp[i];
    const Acc<T> u = Acc<T>(kK) * (x + Acc<T>(kC) * x * x * x);
    out[i] = T(0.5 * x * (1 + std::tanh(u)));
  }
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const Acc<T> x = inp[i];
    const Acc<T> u = Acc<T>(kK) * (x + Acc<T>(kC) * x * x * x);
    const Acc<T> t = std::tanh(u);
    const Acc<T> du = Acc<T>(kK) * (1 + 3 * Acc<T>(kC) * x * x);
    dinp[i] = T(dout[i] * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * du));
  }
}

template <typename T>
void relu2_forward(T* out, const T* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const Acc<T> x = inp[i] < 0 ? Acc<T>(0) : Acc<T>(inp[i]);  // NaN stays NaN
    out[i] = T(x * x);
  }
}

template <typename T>
void relu2_backward(T* dinp, const T* inp, const T* dout, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const Acc<T> x = inp[i] < 0 ? Acc<T>(0) : Acc<T>(inp[i]);
    dinp[i] = T(2 * x * dout[i]);
  }
}

template <typename T>
void swiglu_forward(T* out, const T* inp, int64_t N, int64_t F) {
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = 0; c < F; ++c) {
      const Acc<T> g = inp[r * 2 * F + c], u = inp[r * 2 * F + F + c];
      out[r * F + c] = T(g / (1 + std::exp(-g)) * u);
    }
}

template <typename T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, int64_t N, int64_t F) {
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = 0; c < F; ++c) {
      const Acc<T> g = inp[r * 2 * F + c], u = inp[r * 2 * F + F + c], d = dout[r * F + c];
      const Acc<T> s = 1 / (1 + std::exp(-g));
      dinp[r * 2 * F + c] = T(d * u * (s + g * s * (1 - s)));
      dinp[r * 2 * F + F + c] = T(d * g * s);
    }
}

}  // namespace mtron::kernels::ref
