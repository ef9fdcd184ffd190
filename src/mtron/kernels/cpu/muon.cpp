// CPU Muon elementwise steps (kernels/muon.h): the momentum update in one pass, and the scaling
// by the inverse of a norm whose sum of squares sum_squares left in memory.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "mtron/kernels/cpu/muon.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// clang-format off
#include <hwy/highway.h>
#include "mtron/kernels/cpu/simd-inl.h"
// clang-format on

#include <algorithm>
#include <cmath>

#include "mtron/kernels/cpu/cpu_ops.h"

HWY_BEFORE_NAMESPACE();
namespace mtron::kernels::cpu::HWY_NAMESPACE {

void muon_momentum(MT_PARAMS(muon_momentum)) {
  const DF d;
  const VF scale = hn::Set(d, grad_scale), keep = hn::Set(d, 1.0f - mu), vmu = hn::Set(d, mu);
  parallel_lanes(d, n, n * 16, [&](int64_t i, size_t k) {
    const VF t = hn::Mul(hn::Mul(load(d, grad + i, k), scale), keep);
    const VF m = hn::Add(hn::Mul(load(d, momentum + i, k), vmu), t);
    store(d, m, momentum + i, k);
    store(d, nesterov ? hn::Add(hn::Mul(m, vmu), t) : m, update + i, k);
  });
}

void scale_by_inverse_norm(float* x, const double* sumsq, double eps, int64_t n) {
  const DF d;
  const VF s = hn::Set(d, float(1.0 / std::max(std::sqrt(*sumsq), eps)));
  parallel_lanes(d, n, n * 8,
                 [&](int64_t i, size_t k) { store(d, hn::Mul(load(d, x + i, k), s), x + i, k); });
}

}  // namespace mtron::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mtron::kernels::cpu {
MTRON_MUON_OPS(MT_CPU_EXPORT)
}  // namespace mtron::kernels::cpu
#endif  // HWY_ONCE
