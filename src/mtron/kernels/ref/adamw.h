// The reference kernels of kernels/adamw.h (ref_ops.h).
#pragma once

#include <cmath>

#include "mtron/kernels/ref/common.h"

namespace mtron::kernels::ref {

// adamw.h's formula evaluated in double (param_bf16 is not part of the reference).
template <typename T>
void adamw_step(T* param, T* m, T* v, const T* grad, int64_t n, const AdamWParams& p) {
  const Acc<T> b1 = p.beta1, b2 = p.beta2;
  const Acc<T> bc1 = 1 - std::pow(b1, Acc<T>(p.step)), bc2 = 1 - std::pow(b2, Acc<T>(p.step));
  for (int64_t i = 0; i < n; ++i) {
    const Acc<T> g = T(grad[i] * T(p.grad_scale));
    const Acc<T> mm = b1 * m[i] + (1 - b1) * g;
    const Acc<T> vv = b2 * v[i] + (1 - b2) * g * g;
    const Acc<T> w = param[i];
    param[i] = T(w - Acc<T>(p.lr) * (mm / bc1 / (std::sqrt(vv / bc2) + Acc<T>(p.eps)) +
                                     Acc<T>(p.weight_decay) * w));
    m[i] = T(mm);
    v[i] = T(vv);
  }
}

}  // namespace mtron::kernels::ref
