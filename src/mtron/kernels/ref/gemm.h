// The reference kernels of kernels/gemm.h (ref_ops.h).
#pragma once

#include "mtron/kernels/ref/common.h"

namespace mtron::kernels::ref {

template <typename T>
void gemm(Trans ta,
          Trans tb,
          int64_t M,
          int64_t N,
          int64_t K,
          T alpha,
          const T* A,
          int64_t lda,
          const T* B,
          int64_t ldb,
          T beta,
          T* C,
          int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      Acc<T> acc = 0;
      for (int64_t p = 0; p < K; ++p) {
        const T a = ta == Trans::kN ? A[i * lda + p] : A[p * lda + i];
        const T b = tb == Trans::kN ? B[p * ldb + j] : B[j * ldb + p];
        acc += Acc<T>(a) * Acc<T>(b);
      }
      const Acc<T> old = beta == T(0) ? Acc<T>(0) : Acc<T>(beta) * Acc<T>(C[i * ldc + j]);
      C[i * ldc + j] = T(Acc<T>(alpha) * acc + old);
    }
}

}  // namespace mtron::kernels::ref
