// defines (per SIMD target, in namespace cpu::HWY_NAMESPACE): DF, VF, DU16, load, store,
//          for_lanes, parallel_lanes, add_into (fp32 or bf16 source), exp, sigmoid, hsum, hmax,
//          to_bf16, from_bf16, to_f16, from_f16, bits, narrow_into, sum_columns
//
// The vector helpers every CPU kernel shares, written once over Google Highway and compiled for
// each SIMD target a kernel file is compiled for (hwy/foreach_target.h re-includes this file once
// per target; kernels/cpu/simd.h explains the dispatch).
//
// Partial vectors (the last < Lanes elements of a row) go through a small stack buffer: a load
// reads exactly the n elements asked for and a store writes exactly n, on every target. Highway's
// MaskedLoad and BlendedStore read or write the whole vector on SSE4 and NEON, which could touch
// the next row while another thread works on it.
//
// exp follows the classic Cephes scheme: n = round(x log2 e), r = x - n ln2 (in two parts),
// exp(r) by a degree-6 polynomial on [-ln2/2, ln2/2], scaled by 2^n as two factors 2^(n/2)
// 2^(n - n/2) so that results in the subnormal range are right. Max error ~2 ulp over the
// normal range; exp(-inf) = 0, exp(+inf) = +inf, NaN propagates.

// Per-target include guard (Highway's idiom): toggled by foreach_target.h for each target.
#if defined(MTRON_KERNELS_CPU_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MTRON_KERNELS_CPU_SIMD_INL_H_
#undef MTRON_KERNELS_CPU_SIMD_INL_H_
#else
#define MTRON_KERNELS_CPU_SIMD_INL_H_
#endif

#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "mtron/core/dtype.h"
#include "mtron/kernels/cpu/parallel.h"

HWY_BEFORE_NAMESPACE();
namespace mtron::kernels::cpu::HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using DU16 = hn::Rebind<uint16_t, DF>;  // as many uint16 lanes as DF has floats

// The first k lanes of p (k <= Lanes(d)); the other lanes are `fill`.
template <class D, class T = hn::TFromD<D>>
HWY_INLINE hn::Vec<D> load(D d, const T* HWY_RESTRICT p, size_t k, T fill = T(0)) {
  if (k == hn::Lanes(d)) return hn::LoadU(d, p);
  HWY_ALIGN T buf[HWY_MAX_BYTES / sizeof(T)];
  for (size_t i = 0; i < hn::Lanes(d); ++i) buf[i] = i < k ? p[i] : fill;
  return hn::Load(d, buf);
}

// Writes the first k lanes of v to p (k <= Lanes(d)) and nothing else.
template <class D, class T = hn::TFromD<D>>
HWY_INLINE void store(D d, hn::Vec<D> v, T* HWY_RESTRICT p, size_t k) {
  if (k == hn::Lanes(d)) return hn::StoreU(v, d, p);
  HWY_ALIGN T buf[HWY_MAX_BYTES / sizeof(T)];
  hn::Store(v, d, buf);
  for (size_t i = 0; i < k; ++i) p[i] = buf[i];
}

// body(i, k) for i = begin, begin + L, ... < end (L = Lanes(d)), k = the lanes that are in
// range: L for every full vector (a constant, so load/store compile to plain vector moves there),
// fewer for the last one.
template <class D, class F>
HWY_INLINE void for_lanes(D d, int64_t begin, int64_t end, F&& body) {
  const int64_t L = int64_t(hn::Lanes(d));
  int64_t i = begin;
  for (; i + L <= end; i += L) body(i, hn::Lanes(d));
  if (i < end) body(i, size_t(end - i));
}

// body(i, k) as for_lanes over this thread's share of [0, n) (whole cache lines), on as many
// threads as `bytes` of memory traffic are worth (threads_for).
template <class D, class F>
void parallel_lanes(D d, int64_t n, int64_t bytes, F&& body) {
  parallel_ranges(n, threads_for(bytes), kLine,
                  [&](int64_t i0, int64_t i1) { for_lanes(d, i0, i1, body); });
}

// dst[0, n) += src[0, n)
HWY_INLINE void add_into(DF d, float* HWY_RESTRICT dst, const float* HWY_RESTRICT src, int64_t n) {
  for_lanes(d, 0, n, [&](int64_t c, size_t k) {
    store(d, hn::Add(load(d, dst + c, k), load(d, src + c, k)), dst + c, k);
  });
}

HWY_INLINE VF exp(DF d, VF x) {
  const VF x0 = x;
  x = hn::Min(x, hn::Set(d, 88.75f));
  x = hn::Max(x, hn::Set(d, -104.0f));
  const VF n = hn::Round(hn::Mul(x, hn::Set(d, 1.44269504088896341f)));
  VF r = hn::NegMulAdd(n, hn::Set(d, 0.693359375f), x);
  r = hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), r);
  VF p = hn::Set(d, 1.9875691500e-4f);
  p = hn::MulAdd(p, r, hn::Set(d, 1.3981999507e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 8.3334519073e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 4.1665795894e-2f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.6666665459e-1f));
  p = hn::MulAdd(p, r, hn::Set(d, 5.0000001201e-1f));
  p = hn::MulAdd(p, hn::Mul(r, r), hn::Add(r, hn::Set(d, 1.0f)));
  // 2^n as 2^h 2^(n - h), h = trunc(n / 2): both factors are normal floats for n in [-150, 128]
  const hn::RebindToSigned<DF> di;
  const auto ni = hn::ConvertTo(di, n);
  const auto h = hn::ShiftRight<1>(ni);
  const auto bias = hn::Set(di, 127);
  const VF s1 = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(h, bias)));
  const VF s2 = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(hn::Sub(ni, h), bias)));
  const VF y = hn::Mul(hn::Mul(p, s1), s2);
  return hn::IfThenElse(hn::IsNaN(x0), x0, y);
}

// 1 / (1 + exp(-x)), stable for large |x|.
HWY_INLINE VF sigmoid(DF d, VF x) {
  const VF one = hn::Set(d, 1.0f);
  return hn::Div(one, hn::Add(one, exp(d, hn::Neg(x))));
}

HWY_INLINE float hsum(DF d, VF v) {
  return hn::GetLane(hn::SumOfLanes(d, v));
}
HWY_INLINE float hmax(DF d, VF v) {
  return hn::GetLane(hn::MaxOfLanes(d, v));
}

// Round to nearest even, bit-identical to mtron::float_to_bf16 (denormals kept, NaN quieted).
HWY_INLINE hn::Vec<DU16> to_bf16(DF, VF x) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const auto u = hn::BitCast(du, x);
  const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
  auto r = hn::Add(u, hn::Add(lsb, hn::Set(du, 0x7fffu)));
  r = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(x)), hn::Or(u, hn::Set(du, 0x00400000u)), r);
  // the high halves are <= 0xffff, so the saturating demotion from int32 is exact
  return hn::DemoteTo(DU16(), hn::BitCast(di, hn::ShiftRight<16>(r)));
}

HWY_INLINE VF from_bf16(DF d, hn::Vec<DU16> h) {
  const hn::RebindToUnsigned<DF> du;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, h)));
}

// Round to nearest even, bit-identical to mtron::float_to_f16 (the same three cases on the
// magnitude: infinity or NaN from 2^16 up, subnormal below 2^-14, else rebias and round).
HWY_INLINE hn::Vec<DU16> to_f16(DF d, VF x) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const auto u = hn::BitCast(du, x);
  const auto sign = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 0x8000u));
  const auto a = hn::And(u, hn::Set(du, 0x7fffffffu));
  const auto ai = hn::BitCast(di, a);  // <= 0x7fffffff: signed comparisons order it
  const auto big = hn::IfThenElse(hn::RebindMask(du, hn::Gt(ai, hn::Set(di, 0x7f800000))),
                                  hn::Set(du, 0x7e00u), hn::Set(du, 0x7c00u));
  const auto small = hn::Sub(hn::BitCast(du, hn::Add(hn::BitCast(d, a), hn::Set(d, 0.5f))),
                             hn::Set(du, 0x3f000000u));
  const auto odd = hn::And(hn::ShiftRight<13>(a), hn::Set(du, 1u));
  auto r = hn::ShiftRight<13>(hn::Add(a, hn::Add(hn::Set(du, 0xc8000fffu), odd)));
  r = hn::IfThenElse(hn::RebindMask(du, hn::Lt(ai, hn::Set(di, 0x38800000))), small, r);
  r = hn::IfThenElse(hn::RebindMask(du, hn::Gt(ai, hn::Set(di, 0x477fffff))), big, r);
  // <= 0xffff, so the saturating demotion from int32 is exact
  return hn::DemoteTo(DU16(), hn::BitCast(di, hn::Or(r, sign)));
}

// Exact, as mtron::f16_to_float.
HWY_INLINE VF from_f16(DF d, hn::Vec<DU16> h) {
  const hn::RebindToUnsigned<DF> du;
  const auto w = hn::PromoteTo(du, h);
  const auto sign = hn::ShiftLeft<16>(hn::And(w, hn::Set(du, 0x8000u)));
  const auto em = hn::ShiftLeft<13>(hn::And(w, hn::Set(du, 0x7fffu)));  // at float's positions
  const auto e = hn::And(em, hn::Set(du, 0x0f800000u));
  const auto rebias = hn::Set(du, 112u << 23);
  auto r = hn::Add(em, rebias);  // normal: exponent - 15 + 127
  r = hn::IfThenElse(hn::Eq(e, hn::Set(du, 0x0f800000u)), hn::Add(r, rebias), r);  // inf, NaN
  // subnormal: m 2^-24 = (1 + m 2^-10) 2^-14 - 2^-14
  const auto sub = hn::BitCast(
      du, hn::Sub(hn::BitCast(d, hn::Add(em, hn::Set(du, 113u << 23))), hn::Set(d, 0x1p-14f)));
  r = hn::IfThenElse(hn::Eq(e, hn::Zero(du)), sub, r);
  return hn::BitCast(d, hn::Or(r, sign));
}

// bf16 and f16 storage are {uint16_t bits}; these view it as uint16 lanes.
template <typename H>
HWY_INLINE const uint16_t* bits(const H* p) {
  static_assert(sizeof(H) == 2);
  return reinterpret_cast<const uint16_t*>(p);
}
template <typename H>
HWY_INLINE uint16_t* bits(H* p) {
  static_assert(sizeof(H) == 2);
  return reinterpret_cast<uint16_t*>(p);
}

// The first k lanes of an fp32 or bf16 p as fp32 (k <= Lanes(d); the other lanes `fill`).
HWY_INLINE VF load_f32(DF d, const float* HWY_RESTRICT p, size_t k, float fill = 0.0f) {
  return load(d, p, k, fill);
}
HWY_INLINE VF load_f32(DF d, const bf16* HWY_RESTRICT p, size_t k, float fill = 0.0f) {
  return from_bf16(d, load(DU16(), bits(p), k, float_to_bf16(fill).bits));
}

// dst[0, n) += src[0, n) widened (exact)
HWY_INLINE void add_into(DF d, float* HWY_RESTRICT dst, const bf16* HWY_RESTRICT src, int64_t n) {
  const DU16 dh;
  for_lanes(d, 0, n, [&](int64_t c, size_t k) {
    store(d, hn::Add(load(d, dst + c, k), from_bf16(d, load(dh, bits(src + c), k))), dst + c, k);
  });
}

// dst[0, n) = src[0, n) rounded to bf16 (to_bf16)
HWY_INLINE void narrow_into(DF d,
                            bf16* HWY_RESTRICT dst,
                            const float* HWY_RESTRICT src,
                            int64_t n) {
  const DU16 dh;
  for_lanes(d, 0, n, [&](int64_t c, size_t k) {
    store(dh, to_bf16(d, load(d, src + c, k)), bits(dst + c), k);
  });
}

// dbias[C] += the column sums of an [N, C] matrix, add_row(r, c0, w, part) adding row r's
// columns [c0, c0 + w) into part[0, w). Threads split the columns (`bytes`: the traffic, for
// threads_for), each summing all rows in order: deterministic for any thread count. Each adds
// into fp32 block sums over kBlock rows that are then added into fp32 totals (pairwise-like
// accuracy), both small enough to stay in L1.
template <class F>
void sum_columns(float* dbias, int64_t N, int64_t C, int64_t bytes, F&& add_row) {
  constexpr int64_t kBlock = 256;
  parallel_ranges(C, threads_for(bytes), kLine, [&](int64_t c0, int64_t c1) {
    const int64_t w = c1 - c0;
    std::vector<float> part(static_cast<size_t>(w)), total(static_cast<size_t>(w), 0.0f);
    for (int64_t r0 = 0; r0 < N; r0 += kBlock) {
      std::fill(part.begin(), part.end(), 0.0f);
      for (int64_t r = r0; r < std::min(N, r0 + kBlock); ++r) add_row(r, c0, w, part.data());
      for (int64_t c = 0; c < w; ++c) total[size_t(c)] += part[size_t(c)];
    }
    for (int64_t c = c0; c < c1; ++c) dbias[c] += total[size_t(c - c0)];
  });
}

}  // namespace mtron::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
