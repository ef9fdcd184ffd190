#include "mtron/model/lm_head.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "mtron/core/formulas.h"
#include "mtron/kernels/device.h"
#include "mtron/kernels/elementwise.h"
#include "mtron/kernels/gemm.h"
#include "mtron/kernels/xent.h"

namespace mtron::model {

using kernels::Trans;

double lm_head_loss(const RunCtx& rc, Arena& scratch, const LmHeadArgs& a) {
  const bool bf = rc.precision == Precision::kBF16;
  const bool train = a.dh != nullptr;
  const bool host = rc.k.device == Device::kCPU;
  const int64_t R = lm_head_rows_per_chunk(a.Vl, host);
  float* logits = scratch.alloc<float>(R * a.Vl);
  bf16* dlogits_b = bf && train ? scratch.alloc<bf16>(R * a.Vl) : nullptr;
  float* stats = scratch.alloc<float>(4 * R);  // max | sumexp | target | scale
  float* row_scale = stats + 3 * R;
  kernels::fill(rc.k, row_scale, a.dloss, R);
  // The statistics as the host reads them: the same memory on the CPU, else a copy.
  std::vector<float> stats_copy(host ? 0 : size_t(3 * R));
  float* hstats = host ? stats : stats_copy.data();
  float* row_max = hstats;
  float* row_sum = hstats + R;
  float* row_tgt = hstats + 2 * R;
  const auto& tp = rc.tp;
  std::vector<float> gmax(tp.size > 1 ? size_t(R) : 0);
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
    if (a.logits) {
      kernels::copy(rc.k, a.logits + r0 * a.Vl, logits, int64_t(sizeof(float)) * n * a.Vl);
    }
    const int32_t* tg = a.targets + r0;
    kernels::xent_stats(rc.k, stats, stats + R, stats + 2 * R, logits, tg, n, a.Vl, a.col_start,
                        a.vocab_valid);
    if (!host) kernels::copy_to_host(rc.k, hstats, stats, int64_t(sizeof(float)) * 3 * R);
    if (tp.size > 1) {
      // Global max, then every rank rescales its sum-exp to it; sums and target logits add.
      std::copy(row_max, row_max + n, gmax.data());
      tp.comm->all_reduce(gmax.data(), n, ReduceOp::kMax);
      for (int64_t i = 0; i < n; ++i) {
        row_sum[i] = row_max[i] == -std::numeric_limits<float>::infinity()
                         ? 0.0f
                         : row_sum[i] * std::exp(row_max[i] - gmax[size_t(i)]);
        row_max[i] = gmax[size_t(i)];
      }
      tp.comm->all_reduce(row_sum, n);
      tp.comm->all_reduce(row_tgt, n);
      if (!host) kernels::copy_from_host(rc.k, stats, hstats, int64_t(sizeof(float)) * 2 * R);
    }
    for (int64_t i = 0; i < n; ++i) {
      const double l = std::log(double(row_sum[i])) + double(row_max[i]) - double(row_tgt[i]);
      loss_sum += l;
      if (a.losses) a.losses[r0 + i] = float(l);
    }
    if (!train) continue;
    kernels::xent_backward(rc.k, logits, logits, tg, stats, stats + R, row_scale, n, a.Vl,
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
