// CPU mixture-of-experts router and token permutation (kernels/moe.h). The router's per-token
// arithmetic is kernels/moe_token.h (shared with CUDA), tokens split over OpenMP threads; sums
// over tokens run in token order, so results do not depend on the thread count.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "mtron/kernels/cpu/moe.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// clang-format off
#include <hwy/highway.h>
// clang-format on

#include <algorithm>
#include <cmath>

#include "mtron/kernels/cpu/cpu_ops.h"
#include "mtron/kernels/moe_token.h"

HWY_BEFORE_NAMESPACE();
namespace mtron::kernels::cpu::HWY_NAMESPACE {

void moe_route(int32_t* idx,
               float* weight,
               const float* logits,
               int64_t T,
               int64_t E,
               int64_t k,
               bool use_sigmoid) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    moe_token::route(logits + t * E, E, k, use_sigmoid, idx + t * k, weight + t * k);
  }
}

void moe_aux_scores(float* scores, const float* logits, int64_t T, int64_t E, bool use_sigmoid) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t)
    moe_token::aux_scores(logits + t * E, E, use_sigmoid, scores + t * E);
}

void moe_aux_sums(double* psum,
                  double* counts,
                  const float* scores,
                  const int32_t* idx,
                  int64_t T,
                  int64_t E,
                  int64_t k,
                  int64_t nb,
                  int64_t row0) {
  std::fill(psum, psum + nb * E, 0.0);
  std::fill(counts, counts + nb * E, 0.0);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t b = (row0 + t) % nb;
    for (int64_t e = 0; e < E; ++e) psum[b * E + e] += scores[t * E + e];
    for (int64_t j = 0; j < k; ++j) counts[b * E + idx[t * k + j]] += 1;
  }
}

void moe_logsumexp(float* lse, const float* logits, int64_t T, int64_t E) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) lse[t] = moe_token::logsumexp(logits + t * E, E);
}

void moe_permute(float* rows, const float* x, const int64_t* row, int64_t T, int64_t k, int64_t h) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < T * k; ++i) {
    if (row[i] >= 0) std::copy(x + (i / k) * h, x + (i / k + 1) * h, rows + row[i] * h);
  }
}

void moe_permute_backward(
    float* dx, const float* drows, const int64_t* row, int64_t T, int64_t k, int64_t h) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    float* d = dx + t * h;
    std::fill(d, d + h, 0.0f);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t r = row[t * k + j];
      if (r < 0) continue;
      const float* s = drows + r * h;
      for (int64_t c = 0; c < h; ++c) d[c] += s[c];
    }
  }
}

void moe_combine(float* y,
                 const float* rows,
                 const int64_t* row,
                 const float* weight,
                 int64_t T,
                 int64_t k,
                 int64_t h) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    float* yt = y + t * h;
    std::fill(yt, yt + h, 0.0f);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t r = row[t * k + j];
      if (r < 0) continue;
      const float w = weight[t * k + j];
      const float* o = rows + r * h;
      for (int64_t c = 0; c < h; ++c) yt[c] += w * o[c];
    }
  }
}

void moe_combine_backward(float* drows,
                          float* dweight,
                          const float* dy,
                          const float* rows,
                          const int64_t* row,
                          const float* weight,
                          int64_t T,
                          int64_t k,
                          int64_t h) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    const float* g = dy + t * h;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t r = row[t * k + j];
      dweight[t * k + j] = 0.0f;
      if (r < 0) continue;
      const float w = weight[t * k + j];
      const float* o = rows + r * h;
      float* d = drows + r * h;
      double dot = 0;
      for (int64_t c = 0; c < h; ++c) {
        d[c] = w * g[c];
        dot += double(g[c]) * o[c];
      }
      dweight[t * k + j] = float(dot);
    }
  }
}

void moe_router_backward(float* dlogits,
                         const float* logits,
                         const int32_t* idx,
                         const float* weight,
                         const float* dweight,
                         const float* scores,
                         const float* counts,
                         double aux_grad,
                         double z_grad,
                         int64_t T,
                         int64_t E,
                         int64_t k,
                         int64_t nb,
                         int64_t row0,
                         bool use_sigmoid) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    moe_token::router_backward(logits + t * E, idx + t * k, weight + t * k, dweight + t * k,
                               scores ? scores + t * E : nullptr,
                               counts ? counts + (row0 + t) % nb * E : nullptr, aux_grad, z_grad, E,
                               k, use_sigmoid, dlogits + t * E);
  }
}

}  // namespace mtron::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mtron::kernels::cpu {
MTRON_MOE_OPS(MT_CPU_EXPORT)
}  // namespace mtron::kernels::cpu
#endif  // HWY_ONCE
