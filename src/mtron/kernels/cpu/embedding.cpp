// CPU embedding lookup and its backward.
//
// Backward determinism: threads split the *columns* of the table, and each thread walks all N
// tokens in order, so every dtable element receives its additions in token order whatever the
// thread count (and no two threads ever touch the same element: no atomics, no partial tables).
#include <omp.h>

#include <cstring>

#include "mtron/kernels/cpu/cpu_ops.h"
#include "mtron/kernels/cpu/vec.h"

namespace mtron::kernels::cpu {

void embedding_forward(float* out,
                       const int32_t* ids,
                       const float* table,
                       int64_t N,
                       int64_t C,
                       int64_t row_start,
                       int64_t rows,
                       bool accumulate) {
#pragma omp parallel for schedule(static) num_threads(threads_for(N* C * 8))
  for (int64_t n = 0; n < N; ++n) {
    const int64_t r = int64_t(ids[n]) - row_start;
    float* o = out + n * C;
    const bool in_range = r >= 0 && r < rows;
    if (!accumulate) {
      if (in_range)
        std::memcpy(o, table + r * C, size_t(C) * sizeof(float));
      else
        std::memset(o, 0, size_t(C) * sizeof(float));
    } else if (in_range) {
      const float* t = table + r * C;
      for (int64_t c = 0; c < C; c += kVec) {
        const __mmask16 m = tail_mask(C - c);
        _mm512_mask_storeu_ps(
            o + c, m,
            _mm512_add_ps(_mm512_maskz_loadu_ps(m, o + c), _mm512_maskz_loadu_ps(m, t + c)));
      }
    }
  }
}

void embedding_backward(float* dtable,
                        const float* dout,
                        const int32_t* ids,
                        int64_t N,
                        int64_t C,
                        int64_t row_start,
                        int64_t rows) {
#pragma omp parallel num_threads(threads_for(N* C * 8))
  {
    int64_t c0, c1;
    split_range(C, omp_get_thread_num(), omp_get_num_threads(), kVec, &c0, &c1);
    if (c0 < c1) {
      for (int64_t n = 0; n < N; ++n) {
        const int64_t r = int64_t(ids[n]) - row_start;
        if (r < 0 || r >= rows) continue;
        float* t = dtable + r * C;
        const float* d = dout + n * C;
        for (int64_t c = c0; c < c1; c += kVec) {
          const __mmask16 m = tail_mask(c1 - c);
          _mm512_mask_storeu_ps(
              t + c, m,
              _mm512_add_ps(_mm512_maskz_loadu_ps(m, t + c), _mm512_maskz_loadu_ps(m, d + c)));
        }
      }
    }
  }
}

}  // namespace mtron::kernels::cpu
