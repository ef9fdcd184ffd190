// The reference kernels of kernels/norm.h (ref_ops.h).
#pragma once

#include <cmath>

#include "mtron/kernels/ref/common.h"

namespace mtron::kernels::ref {

template <typename T>
void layernorm_forward(T* out,
                       T* mean,
                       T* rstd,
                       const T* inp,
                       const T* weight,
                       const T* bias,
                       int64_t N,
                       int64_t C,
                       T eps) {
  for (int64_t r = 0; r < N; ++r) {
    const T* x = inp + r * C;
    Acc<T> mu = 0, var = 0;
    for (int64_t c = 0; c < C; ++c) mu += x[c];
    mu /= C;
    for (int64_t c = 0; c < C; ++c) var += (x[c] - mu) * (x[c] - mu);
    var /= C;
    const Acc<T> rs = 1 / std::sqrt(var + eps);
    for (int64_t c = 0; c < C; ++c) out[r * C + c] = T((x[c] - mu) * rs * weight[c] + bias[c]);
    mean[r] = T(mu);
    rstd[r] = T(rs);
  }
}

// y = n w + b, n = (x - mu) rstd:
//   dx = rstd (dn - mean(dn) - n mean(dn n)),  dn = dy w
template <typename T>
void layernorm_backward(T* dinp,
                        T* dweight,
                        T* dbias,
                        const T* dout,
                        const T* inp,
                        const T* weight,
                        const T* mean,
                        const T* rstd,
                        int64_t N,
                        int64_t C) {
  for (int64_t r = 0; r < N; ++r) {
    const T* x = inp + r * C;
    const T* dy = dout + r * C;
    Acc<T> mdn = 0, mdnn = 0;
    for (int64_t c = 0; c < C; ++c) {
      const Acc<T> n = (Acc<T>(x[c]) - mean[r]) * rstd[r];
      const Acc<T> dn = Acc<T>(dy[c]) * weight[c];
      mdn += dn;
      mdnn += dn * n;
      dbias[c] = T(dbias[c] + Acc<T>(dy[c]));
      dweight[c] = T(dweight[c] + Acc<T>(dy[c]) * n);
    }
    mdn /= C;
    mdnn /= C;
    for (int64_t c = 0; c < C; ++c) {
      const Acc<T> n = (Acc<T>(x[c]) - mean[r]) * rstd[r];
      const Acc<T> dn = Acc<T>(dy[c]) * weight[c];
      dinp[r * C + c] = T(dinp[r * C + c] + rstd[r] * (dn - mdn - n * mdnn));
    }
  }
}

template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int64_t N, int64_t C, T eps) {
  for (int64_t r = 0; r < N; ++r) {
    const T* x = inp + r * C;
    Acc<T> ms = 0;
    for (int64_t c = 0; c < C; ++c) ms += Acc<T>(x[c]) * x[c];
    const Acc<T> rs = 1 / std::sqrt(ms / C + eps);
    for (int64_t c = 0; c < C; ++c) out[r * C + c] = T(x[c] * rs * weight[c]);
    rstd[r] = T(rs);
  }
}

// y = n w, n = x rstd:  dx = rstd (dn - n mean(dn n))
template <typename T>
void rmsnorm_backward(T* dinp,
                      T* dweight,
                      const T* dout,
                      const T* inp,
                      const T* weight,
                      const T* rstd,
                      int64_t N,
                      int64_t C) {
  for (int64_t r = 0; r < N; ++r) {
    const T* x = inp + r * C;
    const T* dy = dout + r * C;
    Acc<T> mdnn = 0;
    for (int64_t c = 0; c < C; ++c) {
      const Acc<T> n = Acc<T>(x[c]) * rstd[r];
      mdnn += Acc<T>(dy[c]) * weight[c] * n;
      dweight[c] = T(dweight[c] + Acc<T>(dy[c]) * n);
    }
    mdnn /= C;
    for (int64_t c = 0; c < C; ++c) {
      const Acc<T> n = Acc<T>(x[c]) * rstd[r];
      dinp[r * C + c] = T(dinp[r * C + c] + rstd[r] * (Acc<T>(dy[c]) * weight[c] - n * mdnn));
    }
  }
}

}  // namespace mtron::kernels::ref
