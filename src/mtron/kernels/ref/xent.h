// The reference kernels of kernels/xent.h (ref_ops.h).
#pragma once

#include <cmath>
#include <limits>

#include "mtron/kernels/ref/common.h"

namespace mtron::kernels::ref {

template <typename T>
void xent_stats(T* row_max,
                T* row_sumexp,
                T* target_logit,
                const T* logits,
                const int32_t* targets,
                int64_t n,
                int64_t Vl,
                int64_t col_start,
                int64_t vocab_valid) {
  for (int64_t r = 0; r < n; ++r) {
    const T* x = logits + r * Vl;
    T mx = -std::numeric_limits<T>::infinity();
    for (int64_t c = 0; c < Vl; ++c)
      if (col_start + c < vocab_valid) mx = std::max(mx, x[c]);
    Acc<T> se = 0;
    for (int64_t c = 0; c < Vl; ++c)
      if (col_start + c < vocab_valid) se += std::exp(Acc<T>(x[c]) - mx);
    row_max[r] = mx;
    row_sumexp[r] = T(se);
    const int64_t t = targets[r] - col_start;
    target_logit[r] = (t >= 0 && t < Vl) ? x[t] : T(0);
  }
}

template <typename T>
void xent_rescale(T* row_max, T* row_sumexp, const T* global_max, int64_t n) {
  for (int64_t r = 0; r < n; ++r) {
    row_sumexp[r] = row_max[r] == -std::numeric_limits<T>::infinity()
                        ? T(0)
                        : T(Acc<T>(row_sumexp[r]) * std::exp(Acc<T>(row_max[r]) - global_max[r]));
    row_max[r] = global_max[r];
  }
}

template <typename T>
void xent_loss_sum(double* loss_sum,
                   const T* row_max,
                   const T* row_sumexp,
                   const T* target_logit,
                   const T* row_mask,
                   int64_t n) {
  for (int64_t r = 0; r < n; ++r) {
    if (row_mask && row_mask[r] == T(0)) continue;
    *loss_sum += std::log(double(row_sumexp[r])) + double(row_max[r]) - double(target_logit[r]);
  }
}

template <typename T>
void xent_backward(T* dlogits,
                   const T* logits,
                   const int32_t* targets,
                   const T* row_max,
                   const T* row_sumexp,
                   const T* row_scale,
                   int64_t n,
                   int64_t Vl,
                   int64_t col_start,
                   int64_t vocab_valid) {
  for (int64_t r = 0; r < n; ++r) {
    const Acc<T> scale = row_scale ? row_scale[r] : T(1);
    for (int64_t c = 0; c < Vl; ++c) {
      Acc<T> g = 0;
      if (col_start + c < vocab_valid) {
        g = std::exp(Acc<T>(logits[r * Vl + c]) - row_max[r]) / row_sumexp[r];
        if (targets[r] == col_start + c) g -= 1;
      }
      dlogits[r * Vl + c] = T(scale * g);
    }
  }
}

}  // namespace mtron::kernels::ref
