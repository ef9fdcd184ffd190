// The reference kernels of kernels/muon.h (ref_ops.h): the definitions, each product and sum
// rounded to T on its own.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "mtron/kernels/ref/common.h"

namespace mtron::kernels::ref {

template <typename T>
void muon_momentum(
    T* momentum, T* update, const T* grad, T grad_scale, T mu, bool nesterov, int64_t n) {
  const T keep = T(1) - mu;
  for (int64_t i = 0; i < n; ++i) {
    const T g = T(grad[i] * grad_scale);
    const T t = T(g * keep);
    const T m = T(T(momentum[i] * mu) + t);
    momentum[i] = m;
    update[i] = nesterov ? T(T(m * mu) + t) : m;
  }
}

template <typename T>
void scale_by_inverse_norm(T* x, double sumsq, double eps, int64_t n) {
  const T s = T(1.0 / std::max(std::sqrt(sumsq), eps));
  for (int64_t i = 0; i < n; ++i) x[i] = T(x[i] * s);
}

}  // namespace mtron::kernels::ref
