// CPU AdamW step over a contiguous fp32 range, optionally writing the bf16 compute copy.
//
// The arithmetic follows torch.optim.AdamW's single-tensor path in fp32, scalars in double:
//   g = grad grad_scale;  p *= 1 - lr wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
// which is adamw.h's formula with the operations in the order PyTorch rounds them.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "mtron/kernels/cpu/adamw.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// clang-format off
#include <hwy/highway.h>
#include "mtron/kernels/cpu/simd-inl.h"
// clang-format on

#include <cmath>

#include "mtron/kernels/cpu/cpu_ops.h"

HWY_BEFORE_NAMESPACE();
namespace mtron::kernels::cpu::HWY_NAMESPACE {

void adamw_step(MT_PARAMS(adamw_step)) {
  const DF d;
  const DU16 dh;
  const double bc1 = 1.0 - std::pow(double(p.beta1), double(p.step));
  const double bc2 = 1.0 - std::pow(double(p.beta2), double(p.step));
  const VF decay = hn::Set(d, float(1.0 - double(p.lr) * double(p.weight_decay)));
  const VF b1 = hn::Set(d, p.beta1), nb1 = hn::Set(d, 1.0f - p.beta1);
  const VF b2 = hn::Set(d, p.beta2), nb2 = hn::Set(d, 1.0f - p.beta2);
  const VF step_size = hn::Set(d, float(double(p.lr) / bc1));
  const VF bc2_sqrt = hn::Set(d, float(std::sqrt(bc2)));
  const VF eps = hn::Set(d, p.eps);
  const VF grad_scale = hn::Set(d, p.grad_scale);
  parallel_lanes(d, n, n * 18, [&](int64_t i, size_t k) {
    const VF g = hn::Mul(load(d, grad + i, k), grad_scale);
    const VF mm = hn::MulAdd(nb1, g, hn::Mul(b1, load(d, m + i, k)));
    const VF vv = hn::MulAdd(hn::Mul(nb2, g), g, hn::Mul(b2, load(d, v + i, k)));
    const VF denom = hn::Add(hn::Div(hn::Sqrt(vv), bc2_sqrt), eps);
    const VF w =
        hn::NegMulAdd(step_size, hn::Div(mm, denom), hn::Mul(load(d, param + i, k), decay));
    store(d, mm, m + i, k);
    store(d, vv, v + i, k);
    store(d, w, param + i, k);
    if (param_bf16) store(dh, to_bf16(d, w), bits(param_bf16 + i), k);
  });
}

void adamw_step_runs(MT_PARAMS(adamw_step_runs)) {
  for (int64_t r = 0; r < n_runs; ++r) {
    const AdamWRun& run = runs[r];
    AdamWParams q = p;
    q.lr = run.lr;
    q.weight_decay = run.weight_decay;
    adamw_step(param + run.begin, m + run.moment, v + run.moment, grad + run.begin,
               param_bf16 ? param_bf16 + run.begin : nullptr, run.n, q);
  }
}

}  // namespace mtron::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mtron::kernels::cpu {
MTRON_ADAMW_OPS(MT_CPU_EXPORT)
}  // namespace mtron::kernels::cpu
#endif  // HWY_ONCE
