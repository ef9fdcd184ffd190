// defines: AVX-512 helpers for the CPU kernels: tail masks, exp, sigmoid, horizontal sums,
//          f32 -> bf16 round-to-nearest-even, and the row-parallel split used by every op.
//
// exp follows the classic Cephes scheme: n = round(x log2 e), r = x - n ln2 (in two parts),
// exp(r) by a degree-6 polynomial on [-ln2/2, ln2/2], then scalef by 2^n. Max error ~2 ulp
// over the normal range; exp(-inf) = 0, exp(+inf) = +inf, NaN propagates.
#pragma once

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "mtron/core/dtype.h"

namespace mtron::kernels::cpu {

constexpr int64_t kVec = 16;  // floats per zmm

// Mask of the first `n` lanes (none for n <= 0, all for n >= 16).
inline __mmask16 tail_mask(int64_t n) {
  return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1u);
}

inline __m512 exp_ps(__m512 x) {
  // Clamp so that n stays finite; min/max keep NaN because x is the second operand.
  x = _mm512_min_ps(_mm512_set1_ps(88.75f), x);
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 r2 = _mm512_mul_ps(r, r);
  p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// 1 / (1 + exp(-x)), stable for large |x|.
inline __m512 sigmoid_ps(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

inline float hsum(__m512 x) {
  return _mm512_reduce_add_ps(x);
}
inline float hmax(__m512 x) {
  return _mm512_reduce_max_ps(x);
}

// Round to nearest even, bit-identical to mtron::float_to_bf16 (including denormals, which
// vcvtneps2bf16 would flush, and quiet NaN).
inline __m256i f32_to_bf16_ps(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

inline __m512 bf16_to_f32_ps(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// The contiguous share [begin, end) of n items for thread `t` of `nt`, in units of `align`
// items (so vector loops see whole cache lines except in the last share).
inline void split_range(int64_t n, int t, int nt, int64_t align, int64_t* begin, int64_t* end) {
  const int64_t units = (n + align - 1) / align;
  const int64_t per = units / nt, rem = units % nt;
  const int64_t u0 = t * per + std::min<int64_t>(t, rem);
  const int64_t u1 = u0 + per + (t < rem ? 1 : 0);
  *begin = std::min(n, u0 * align);
  *end = std::min(n, u1 * align);
}

// Threads worth using for `bytes` of streaming work: one thread per ~256 KB, so small calls do
// not pay the OpenMP fork/join (a few microseconds) for nothing.
inline int threads_for(int64_t bytes) {
  const int64_t want = std::max<int64_t>(1, bytes / (256 << 10));
  return int(std::min<int64_t>(want, omp_get_max_threads()));
}

}  // namespace mtron::kernels::cpu
