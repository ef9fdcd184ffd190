#include "mtron/model/lm_head.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "mtron/kernels/elementwise.h"
#include "mtron/kernels/gemm.h"
#include "mtron/kernels/xent.h"

namespace mtron::model {

using kernels::Trans;

double lm_head_loss(const RunCtx& rc, Arena& scratch, const LmHeadArgs& a) {
  const bool bf = rc.precision == Precision::kBF16;
  const bool train = a.dh != nullptr;
  // ~16 MB of logits per chunk: large enough for efficient GEMMs, small enough to stay modest.
  const int64_t R = std::clamp<int64_t>((int64_t(1) << 22) / std::max<int64_t>(a.Vl, 1), 16, 1024);
  float* logits = scratch.alloc<float>(R * a.Vl);
  bf16* dlogits_b = bf && train ? scratch.alloc<bf16>(R * a.Vl) : nullptr;
  float* stats = scratch.alloc<float>(4 * R);  // max | sumexp | target | scale
  float* row_max = stats;
  float* row_sum = stats + R;
  float* row_tgt = stats + 2 * R;
  float* row_scale = stats + 3 * R;
  std::fill(row_scale, row_scale + R, a.dloss);
  const auto& tp = rc.tp;
  float* gmax = tp.size > 1 ? scratch.alloc<float>(R) : nullptr;
  double loss_sum = 0;

  for (int64_t r0 = 0; r0 < a.N; r0 += R) {
    const int64_t n = std::min(R, a.N - r0);
    Act hc = bf ? Act{nullptr, a.h.b16 + r0 * a.hidden} : Act{a.h.f32 + r0 * a.hidden, nullptr};
    if (bf) {
      kernels::gemm(rc.k, Trans::kN, Trans::kT, n, a.Vl, a.hidden, 1.0f, hc.b16, a.hidden, a.w.b16,
                    a.hidden, 0.0f, logits, a.Vl);
    } else {
      kernels::gemm(rc.k, Trans::kN, Trans::kT, n, a.Vl, a.hidden, 1.0f, hc.f32, a.hidden, a.w.f32,
                    a.hidden, 0.0f, logits, a.Vl);
    }
    if (a.logits) std::copy(logits, logits + n * a.Vl, a.logits + r0 * a.Vl);
    const int32_t* tg = a.targets + r0;
    kernels::xent_stats(rc.k, row_max, row_sum, row_tgt, logits, tg, n, a.Vl, a.col_start,
                        a.vocab_valid);
    if (tp.size > 1) {
      // Global max, then every rank rescales its sum-exp to it; sums and target logits add.
      std::copy(row_max, row_max + n, gmax);
      tp.comm->all_reduce(gmax, n, ReduceOp::kMax);
      for (int64_t i = 0; i < n; ++i) {
        row_sum[i] = row_max[i] == -std::numeric_limits<float>::infinity()
                         ? 0.0f
                         : row_sum[i] * std::exp(row_max[i] - gmax[i]);
        row_max[i] = gmax[i];
      }
      tp.comm->all_reduce(row_sum, n);
      tp.comm->all_reduce(row_tgt, n);
    }
    for (int64_t i = 0; i < n; ++i) {
      const double l = std::log(double(row_sum[i])) + double(row_max[i]) - double(row_tgt[i]);
      loss_sum += l;
      if (a.losses) a.losses[r0 + i] = float(l);
    }
    if (!train) continue;
    kernels::xent_backward(rc.k, logits, logits, tg, row_max, row_sum, row_scale, n, a.Vl,
                           a.col_start, a.vocab_valid);
    float* dh = a.dh + r0 * a.hidden;
    if (bf) {
      kernels::convert(rc.k, dlogits_b, logits, n * a.Vl);
      kernels::gemm(rc.k, Trans::kN, Trans::kN, n, a.hidden, a.Vl, 1.0f, dlogits_b, a.Vl, a.w.b16,
                    a.hidden, 0.0f, dh, a.hidden);
      kernels::gemm(rc.k, Trans::kT, Trans::kN, a.Vl, a.hidden, n, 1.0f, dlogits_b, a.Vl, hc.b16,
                    a.hidden, 1.0f, a.dw, a.hidden);
    } else {
      kernels::gemm(rc.k, Trans::kN, Trans::kN, n, a.hidden, a.Vl, 1.0f, logits, a.Vl, a.w.f32,
                    a.hidden, 0.0f, dh, a.hidden);
      kernels::gemm(rc.k, Trans::kT, Trans::kN, a.Vl, a.hidden, n, 1.0f, logits, a.Vl, hc.f32,
                    a.hidden, 1.0f, a.dw, a.hidden);
    }
  }
  return loss_sum;
}

}  // namespace mtron::model
