// CPU mixture-of-experts router and token permutation (kernels/moe.h). The router's per-token
// arithmetic is kernels/moe_token.h (shared with CUDA), tokens (or pairs) split over threads by
// parallel_rows (cpu/parallel.h); sums over tokens run in token order, so results do not depend
// on the thread count.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "mtron/kernels/cpu/moe.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// clang-format off
#include <hwy/highway.h>
// clang-format on

#include <algorithm>
#include <cmath>

#include "mtron/kernels/cpu/cpu_ops.h"
#include "mtron/kernels/cpu/parallel.h"
#include "mtron/kernels/moe_token.h"

HWY_BEFORE_NAMESPACE();
namespace mtron::kernels::cpu::HWY_NAMESPACE {

void moe_route(int32_t* idx, float* weight, const float* logits, const MoeRouting& r) {
  parallel_rows(r.T, threads_for(r.T * r.E * 4), [&](int64_t t) {
    moe_token::route(logits + t * r.E, r, idx + t * r.k, weight + t * r.k);
  });
}

void moe_aux_scores(float* scores, const float* logits, const MoeRouting& r) {
  parallel_rows(r.T, threads_for(r.T * r.E * 8), [&](int64_t t) {
    moe_token::aux_scores(logits + t * r.E, r.E, r.sigmoid, scores + t * r.E);
  });
}

void moe_aux_sums(MT_PARAMS(moe_aux_sums)) {
  const int64_t E = r.E, k = r.k;
  std::fill(psum, psum + nb * E, 0.0);
  std::fill(counts, counts + nb * E, 0.0);
  for (int64_t t = 0; t < r.T; ++t) {
    const int64_t b = (row0 + t) % nb;
    for (int64_t e = 0; e < E; ++e) psum[b * E + e] += scores[t * E + e];
    for (int64_t j = 0; j < k; ++j) counts[b * E + idx[t * k + j]] += 1;
  }
}

void moe_logsumexp(float* lse, const float* logits, const MoeRouting& r) {
  parallel_rows(r.T, threads_for(r.T * r.E * 4),
                [&](int64_t t) { lse[t] = moe_token::logsumexp(logits + t * r.E, r.E); });
}

void moe_permute(float* rows, const float* x, const int64_t* row, const MoeRouting& r, int64_t h) {
  const int64_t k = r.k;
  parallel_rows(r.T * k, threads_for(r.T * k * h * 8), [&](int64_t i) {
    if (row[i] >= 0) std::copy(x + (i / k) * h, x + (i / k + 1) * h, rows + row[i] * h);
  });
}

namespace {

// y[t] = the sum over token t's kept pairs of their rows, weighted by weight (null: unweighted).
void gather_pairs(float* y,
                  const float* rows,
                  const int64_t* row,
                  const float* weight,
                  const MoeRouting& r,
                  int64_t h) {
  parallel_rows(r.T, threads_for(r.T * (r.k + 1) * h * 4), [&](int64_t t) {
    float* yt = y + t * h;
    std::fill(yt, yt + h, 0.0f);
    for (int64_t j = 0; j < r.k; ++j) {
      const int64_t p = row[t * r.k + j];
      if (p < 0) continue;
      const float* o = rows + p * h;
      if (weight) {
        const float w = weight[t * r.k + j];
        for (int64_t c = 0; c < h; ++c) yt[c] += w * o[c];
      } else {
        for (int64_t c = 0; c < h; ++c) yt[c] += o[c];
      }
    }
  });
}

}  // namespace

void moe_permute_backward(
    float* dx, const float* drows, const int64_t* row, const MoeRouting& r, int64_t h) {
  gather_pairs(dx, drows, row, nullptr, r, h);
}

void moe_combine(MT_PARAMS(moe_combine)) {
  gather_pairs(y, rows, row, weight, r, h);
}

void moe_combine_backward(MT_PARAMS(moe_combine_backward)) {
  parallel_rows(r.T * r.k, threads_for(r.T * r.k * h * 12), [&](int64_t i) {
    const float* g = dy + (i / r.k) * h;
    const int64_t p = row[i];
    dweight[i] = 0.0f;
    if (p < 0) return;
    const float* o = rows + p * h;
    float* d = drows + p * h;
    double dot = 0;
    for (int64_t c = 0; c < h; ++c) {
      d[c] = weight[i] * g[c];
      dot += double(g[c]) * o[c];
    }
    dweight[i] = float(dot);
  });
}

void moe_router_backward(MT_PARAMS(moe_router_backward)) {
  parallel_rows(r.T, threads_for(r.T * r.E * 12), [&](int64_t t) {
    moe_token::router_backward(t, logits, idx, weight, dweight, r, loss, dlogits);
  });
}

}  // namespace mtron::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mtron::kernels::cpu {
MTRON_MOE_OPS(MT_CPU_EXPORT)
}  // namespace mtron::kernels::cpu
#endif  // HWY_ONCE
