// CPU cross-entropy building blocks over a logits chunk (see xent.h).
//
// Stats walk each row once in chunks of kChunk columns: the chunk's max (from memory), a rescale
// of the running sum when the max grows, then the chunk's sum of exp from L1. One exp per
// element, and the exp work overlaps the prefetching of the next chunk. Padded columns (global id
// >= vocab_valid) are never read by the stats and are written as 0 by the backward.
#include <omp.h>

#include <cmath>
#include <limits>

#include "mtron/kernels/cpu/cpu_ops.h"
#include "mtron/kernels/cpu/vec.h"

namespace mtron::kernels::cpu {
namespace {

// Number of columns of the chunk that are real vocabulary entries.
constexpr int64_t kChunk = 2048;  // 8 KB: stays in L1 between the two looks

int64_t valid_cols(int64_t Vl, int64_t col_start, int64_t vocab_valid) {
  return std::clamp<int64_t>(vocab_valid - col_start, 0, Vl);
}

}  // namespace

void xent_stats(float* row_max,
                float* row_sumexp,
                float* target_logit,
                const float* logits,
                const int32_t* targets,
                int64_t n,
                int64_t Vl,
                int64_t col_start,
                int64_t vocab_valid) {
  const int64_t nv = valid_cols(Vl, col_start, vocab_valid);
  const float ninf = -std::numeric_limits<float>::infinity();
#pragma omp parallel for schedule(static) num_threads(threads_for(n* nv * 4))
  for (int64_t r = 0; r < n; ++r) {
    const float* x = logits + r * Vl;
    float mx = ninf, se = 0;
    for (int64_t c0 = 0; c0 < nv; c0 += kChunk) {
      const int64_t c1 = std::min(nv, c0 + kChunk);
      __m512 m0 = _mm512_set1_ps(ninf), m1 = m0;
      int64_t c = c0;
      for (; c + 2 * kVec <= c1; c += 2 * kVec) {
        m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + c));
        m1 = _mm512_max_ps(m1, _mm512_loadu_ps(x + c + kVec));
      }
      for (; c < c1; c += kVec)
        m0 = _mm512_mask_max_ps(m0, tail_mask(c1 - c), m0,
                                _mm512_maskz_loadu_ps(tail_mask(c1 - c), x + c));
      const float cm = hmax(_mm512_max_ps(m0, m1));
      if (cm == ninf) continue;  // every logit of the chunk is -inf: adds nothing
      if (cm > mx) {
        se = mx == ninf ? 0.0f : se * std::exp(mx - cm);
        mx = cm;
      }
      const __m512 vm = _mm512_set1_ps(mx);
      __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
      c = c0;
      for (; c + 2 * kVec <= c1; c += 2 * kVec) {
        s0 = _mm512_add_ps(s0, exp_ps(_mm512_sub_ps(_mm512_loadu_ps(x + c), vm)));
        s1 = _mm512_add_ps(s1, exp_ps(_mm512_sub_ps(_mm512_loadu_ps(x + c + kVec), vm)));
      }
      for (; c < c1; c += kVec) {
        const __mmask16 m = tail_mask(c1 - c);
        s0 = _mm512_mask_add_ps(s0, m, s0,
                                exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + c), vm)));
      }
      se += hsum(_mm512_add_ps(s0, s1));
    }
    row_max[r] = mx;
    row_sumexp[r] = se;
    const int64_t t = int64_t(targets[r]) - col_start;
    target_logit[r] = (t >= 0 && t < Vl) ? x[t] : 0.0f;
  }
}

void xent_backward(float* dlogits,
                   const float* logits,
                   const int32_t* targets,
                   const float* row_max,
                   const float* row_sumexp,
                   const float* row_scale,
                   int64_t n,
                   int64_t Vl,
                   int64_t col_start,
                   int64_t vocab_valid) {
  const int64_t nv = valid_cols(Vl, col_start, vocab_valid);
  const float ninf = -std::numeric_limits<float>::infinity();
#pragma omp parallel for schedule(static) num_threads(threads_for(n* Vl * 8))
  for (int64_t r = 0; r < n; ++r) {
    const float* x = logits + r * Vl;
    float* d = dlogits + r * Vl;
    const float scale = row_scale ? row_scale[r] : 1.0f;
    const bool empty = row_max[r] == ninf || !(row_sumexp[r] > 0);
    const __m512 vm = _mm512_set1_ps(empty ? 0.0f : row_max[r]);
    const __m512 vs = _mm512_set1_ps(empty ? 0.0f : scale / row_sumexp[r]);
    int64_t c = 0;
    for (; c < nv; c += kVec) {
      const __mmask16 m = tail_mask(nv - c);
      const __m512 e = exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + c), vm));
      _mm512_mask_storeu_ps(d + c, m, _mm512_mul_ps(e, vs));
    }
    for (c = nv; c < Vl; c += kVec)
      _mm512_mask_storeu_ps(d + c, tail_mask(Vl - c), _mm512_setzero_ps());
    const int64_t t = int64_t(targets[r]) - col_start;
    if (t >= 0 && t < nv) d[t] -= scale;
  }
}

}  // namespace mtron::kernels::cpu
