// CPU FP8 quantisation (kernels/fp8.h): scale, round to the format's grid, saturate, store as
// bf16, with the amax of the input in the same pass. One streaming pass, split over threads in
// blocks whose maxima are combined at the end (a max is exact in any order).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "mtron/kernels/cpu/fp8.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// clang-format off
#include <hwy/highway.h>
#include "mtron/kernels/cpu/simd-inl.h"
// clang-format on

#include <algorithm>
#include <limits>
#include <vector>

#include "mtron/kernels/cpu/cpu_ops.h"
#include "mtron/kernels/cpu/parallel.h"

HWY_BEFORE_NAMESPACE();
namespace mtron::kernels::cpu::HWY_NAMESPACE {
namespace {

// The format as compile-time constants: M mantissa bits, smallest normal exponent EMIN.
template <int M, int EMIN>
struct Grid {
  // y rounded to the grid, ties to even; |y| >= max (infinities too) saturates; NaN becomes the
  // quiet NaN (the product's NaN bits differ between CPUs and GPUs).
  static VF round(DF d, VF y, float max) {
    const hn::RebindToUnsigned<DF> du;
    const VF a = hn::Abs(y);
    // Normal range: round the fp32 bits to M mantissa bits (a carry moves into the exponent).
    constexpr int kDrop = 23 - M;
    const auto u = hn::BitCast(du, a);
    const auto lsb = hn::And(hn::ShiftRight<kDrop>(u), hn::Set(du, 1u));
    auto r = hn::Add(u, hn::Add(lsb, hn::Set(du, (1u << (kDrop - 1)) - 1u)));
    r = hn::And(r, hn::Set(du, ~((1u << kDrop) - 1u)));
    const VF normal = hn::BitCast(d, r);
    // Subnormal range: adding 2^(EMIN - M + 23), whose ulp is the subnormal quantum 2^(EMIN - M),
    // rounds to a multiple of that quantum (ties to even); subtracting it again is exact.
    static_assert(EMIN - M + 23 > 0);
    const VF magic = hn::Set(d, float(1u << (EMIN - M + 23)));
    const VF sub = hn::Sub(hn::Add(a, magic), magic);
    const VF min_normal = hn::Set(d, 1.0f / float(1ull << -EMIN));
    VF q = hn::IfThenElse(hn::Lt(a, min_normal), sub, normal);
    q = hn::IfThenElse(hn::Ge(a, hn::Set(d, max)), hn::Set(d, max), q);
    q = hn::CopySignToAbs(q, y);
    return hn::IfThenElse(hn::IsNaN(y), hn::Set(d, std::numeric_limits<float>::quiet_NaN()), q);
  }
};

// |x| with NaN lanes 0: what fmaxf-style maxima see.
HWY_INLINE VF abs_no_nan(VF x) {
  return hn::IfThenZeroElse(hn::IsNaN(x), hn::Abs(x));
}

constexpr int64_t kBlock = 4096;

// body(i, k, m) over [0, n) as for_lanes, on threads in blocks of kBlock elements; m is the
// running max vector of the block. Then *amax = max(*amax, every block's max) when amax is set.
template <class Body>
void blocks_with_amax(float* amax, int64_t n, int64_t bytes, Body&& body) {
  const DF d;
  std::vector<float> block_max(size_t((n + kBlock - 1) / kBlock), 0.0f);
  parallel_ranges(n, threads_for(bytes), kBlock, [&](int64_t i0, int64_t i1) {
    for (int64_t b = i0; b < i1; b += kBlock) {
      VF m = hn::Zero(d);
      for_lanes(d, b, std::min(i1, b + kBlock), [&](int64_t i, size_t k) { body(i, k, m); });
      block_max[size_t(b / kBlock)] = hmax(d, m);
    }
  });
  if (!amax) return;
  for (const float v : block_max) *amax = std::max(*amax, v);
}

template <class G, class Load>
void quantize(bf16* dst, float* amax, float scale, float max, int64_t n, Load&& load_x) {
  const DF d;
  const DU16 dh;
  const VF vs = hn::Set(d, scale);
  blocks_with_amax(amax, n, n * 6, [&](int64_t i, size_t k, VF& m) {
    const VF x = load_x(i, k);
    m = hn::Max(m, abs_no_nan(x));
    store(dh, to_bf16(d, G::round(d, hn::Mul(x, vs), max)), bits(dst + i), k);
  });
}

template <class Load>
void quantize_format(
    bf16* dst, float* amax, float scale, Fp8Format format, int64_t n, Load&& load_x) {
  if (format == Fp8Format::kE4M3) {
    quantize<Grid<3, -6>>(dst, amax, scale, fp8_max(format), n, load_x);
  } else {
    quantize<Grid<2, -14>>(dst, amax, scale, fp8_max(format), n, load_x);
  }
}

}  // namespace

void fp8_quantize_f32(
    bf16* dst, float* amax, const float* src, float scale, Fp8Format format, int64_t n) {
  const DF d;
  quantize_format(dst, amax, scale, format, n,
                  [&](int64_t i, size_t k) { return load(d, src + i, k); });
}

void fp8_quantize_bf16(
    bf16* dst, float* amax, const bf16* src, float scale, Fp8Format format, int64_t n) {
  const DF d;
  const DU16 dh;
  quantize_format(dst, amax, scale, format, n,
                  [&](int64_t i, size_t k) { return from_bf16(d, load(dh, bits(src + i), k)); });
}

void abs_max_f32(float* amax, const float* src, int64_t n) {
  const DF d;
  blocks_with_amax(amax, n, n * 4, [&](int64_t i, size_t k, VF& m) {
    m = hn::Max(m, abs_no_nan(load(d, src + i, k)));
  });
}

void abs_max_bf16(float* amax, const bf16* src, int64_t n) {
  const DF d;
  const DU16 dh;
  blocks_with_amax(amax, n, n * 2, [&](int64_t i, size_t k, VF& m) {
    m = hn::Max(m, abs_no_nan(from_bf16(d, load(dh, bits(src + i), k))));
  });
}

}  // namespace mtron::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mtron::kernels::cpu {
MTRON_FP8_OPS(MT_CPU_EXPORT)
}  // namespace mtron::kernels::cpu
#endif  // HWY_ONCE
