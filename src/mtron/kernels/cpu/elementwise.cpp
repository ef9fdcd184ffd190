// CPU elementwise ops: add, scale, f32<->bf16 conversion, bias add/backward, sum of squares,
// and the memset/fill/memcpy forms of fill_zero, fill and copy. All memory-bound: one pass, AVX-512
// with masked tails, split over threads in whole cache lines.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "mtron/kernels/cpu/cpu_ops.h"
#include "mtron/kernels/cpu/vec.h"

namespace mtron::kernels::cpu {

void add(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel num_threads(threads_for(n * 12))
  {
    int64_t i0, i1;
    split_range(n, omp_get_thread_num(), omp_get_num_threads(), kVec, &i0, &i1);
    for (int64_t i = i0; i < i1; i += kVec) {
      const __mmask16 m = tail_mask(i1 - i);
      _mm512_mask_storeu_ps(
          out + i, m,
          _mm512_add_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
    }
  }
}

void scale_inplace(float* x, float s, int64_t n) {
  const __m512 vs = _mm512_set1_ps(s);
#pragma omp parallel num_threads(threads_for(n * 8))
  {
    int64_t i0, i1;
    split_range(n, omp_get_thread_num(), omp_get_num_threads(), kVec, &i0, &i1);
    for (int64_t i = i0; i < i1; i += kVec) {
      const __mmask16 m = tail_mask(i1 - i);
      _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vs));
    }
  }
}

void convert(bf16* dst, const float* src, int64_t n) {
#pragma omp parallel num_threads(threads_for(n * 6))
  {
    int64_t i0, i1;
    split_range(n, omp_get_thread_num(), omp_get_num_threads(), kVec, &i0, &i1);
    for (int64_t i = i0; i < i1; i += kVec) {
      const __mmask16 m = tail_mask(i1 - i);
      _mm256_mask_storeu_epi16(dst + i, m, f32_to_bf16_ps(_mm512_maskz_loadu_ps(m, src + i)));
    }
  }
}

void convert(float* dst, const bf16* src, int64_t n) {
#pragma omp parallel num_threads(threads_for(n * 6))
  {
    int64_t i0, i1;
    split_range(n, omp_get_thread_num(), omp_get_num_threads(), kVec, &i0, &i1);
    for (int64_t i = i0; i < i1; i += kVec) {
      const __mmask16 m = tail_mask(i1 - i);
      _mm512_mask_storeu_ps(dst + i, m, bf16_to_f32_ps(_mm256_maskz_loadu_epi16(m, src + i)));
    }
  }
}

void bias_add(float* out, const float* bias, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static) num_threads(threads_for(N* C * 8))
  for (int64_t r = 0; r < N; ++r) {
    float* o = out + r * C;
    for (int64_t c = 0; c < C; c += kVec) {
      const __mmask16 m = tail_mask(C - c);
      _mm512_mask_storeu_ps(
          o + c, m,
          _mm512_add_ps(_mm512_maskz_loadu_ps(m, o + c), _mm512_maskz_loadu_ps(m, bias + c)));
    }
  }
}

// Threads split the columns, each summing all rows in order: deterministic for any thread count.
// Each thread walks the rows sequentially (its column range of every row is contiguous), adding
// into fp32 block sums over kBlock rows that are then added into fp32 totals (pairwise-like
// accuracy), both small enough to stay in L1.
void bias_backward(float* dbias, const float* dout, int64_t N, int64_t C) {
  constexpr int64_t kBlock = 256;
#pragma omp parallel num_threads(threads_for(N* C * 4))
  {
    int64_t c0, c1;
    split_range(C, omp_get_thread_num(), omp_get_num_threads(), kVec, &c0, &c1);
    std::vector<float> part(size_t(c1 - c0)), total(size_t(c1 - c0), 0.0f);
    for (int64_t r0 = 0; r0 < N; r0 += kBlock) {
      std::fill(part.begin(), part.end(), 0.0f);
      for (int64_t r = r0; r < std::min(N, r0 + kBlock); ++r) {
        const float* d = dout + r * C + c0;
        for (int64_t c = 0; c < c1 - c0; c += kVec) {
          const __mmask16 m = tail_mask(c1 - c0 - c);
          _mm512_mask_storeu_ps(part.data() + c, m,
                                _mm512_add_ps(_mm512_maskz_loadu_ps(m, part.data() + c),
                                              _mm512_maskz_loadu_ps(m, d + c)));
        }
      }
      for (int64_t c = 0; c < c1 - c0; ++c) total[size_t(c)] += part[size_t(c)];
    }
    for (int64_t c = c0; c < c1; ++c) dbias[c] += total[size_t(c - c0)];
  }
}

// Squares summed in fp32 within a vector block of 1024 elements, blocks added in double. The
// split into blocks does not depend on the thread count, but the final per-thread sum order
// does (a difference in the last bits of a double, far below what a norm needs).
double sum_squares(const float* x, int64_t n) {
  constexpr int64_t kBlock = 1024;
  double total = 0;
#pragma omp parallel num_threads(threads_for(n * 4)) reduction(+ : total)
  {
    int64_t i0, i1;
    split_range(n, omp_get_thread_num(), omp_get_num_threads(), kBlock, &i0, &i1);
    __m512d acc = _mm512_setzero_pd();
    for (int64_t b = i0; b < i1; b += kBlock) {
      const int64_t e = std::min(i1, b + kBlock);
      __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
      int64_t i = b;
      for (; i + 2 * kVec <= e; i += 2 * kVec) {
        const __m512 a = _mm512_loadu_ps(x + i), c = _mm512_loadu_ps(x + i + kVec);
        s0 = _mm512_fmadd_ps(a, a, s0);
        s1 = _mm512_fmadd_ps(c, c, s1);
      }
      for (; i < e; i += kVec) {
        const __m512 a = _mm512_maskz_loadu_ps(tail_mask(e - i), x + i);
        s0 = _mm512_fmadd_ps(a, a, s0);
      }
      const __m512 s = _mm512_add_ps(s0, s1);
      acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_castps512_ps256(s)));
      acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_extractf32x8_ps(s, 1)));
    }
    total += _mm512_reduce_add_pd(acc);
  }
  return total;
}

void fill_zero(void* x, int64_t bytes) {
  if (bytes > 0) std::memset(x, 0, size_t(bytes));  // x may be null when bytes == 0
}

void fill(float* x, float value, int64_t n) {
  std::fill(x, x + n, value);
}

void copy(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, size_t(bytes));
}

}  // namespace mtron::kernels::cpu
