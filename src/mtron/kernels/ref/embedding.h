// The reference kernels of kernels/embedding.h (ref_ops.h).
#pragma once

#include "mtron/kernels/ref/common.h"

namespace mtron::kernels::ref {

template <typename T>
void embedding_forward(T* out,
                       const int32_t* ids,
                       const T* table,
                       int64_t N,
                       int64_t C,
                       int64_t row_start,
                       int64_t rows,
                       bool accumulate) {
  for (int64_t n = 0; n < N; ++n) {
    const int64_t r = ids[n] - row_start;
    for (int64_t c = 0; c < C; ++c) {
      const T val = (r >= 0 && r < rows) ? table[r * C + c] : T(0);
      out[n * C + c] = accumulate ? out[n * C + c] + val : val;
    }
  }
}

template <typename T>
void embedding_backward(T* dtable,
                        const T* dout,
                        const int32_t* ids,
                        int64_t N,
                        int64_t C,
                        int64_t row_start,
                        int64_t rows) {
  for (int64_t n = 0; n < N; ++n) {
    const int64_t r = ids[n] - row_start;
    if (r < 0 || r >= rows) continue;
    for (int64_t c = 0; c < C; ++c) dtable[r * C + c] += dout[n * C + c];
  }
}

}  // namespace mtron::kernels::ref
