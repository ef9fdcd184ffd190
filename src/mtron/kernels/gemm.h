// defines: Trans, gemm (fp32 and bf16 inputs, fp32 output), gemm_library_info
//
// Row-major GEMM: C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C.
// op(X) = X (kN) or X^T (kT); lda/ldb/ldc are row strides in elements of the stored matrices.
// The three forms a linear layer needs (X [N,in], W [out,in], row-major):
//   forward  Y  = X  W^T   gemm(kN, kT, N, out, in, ...)
//   dgrad    dX = dY W     gemm(kN, kN, N, in, out, ...)
//   wgrad    dW += dY^T X  gemm(kT, kN, out, in, N, ..., beta = 1)
// bf16 inputs accumulate in fp32 and write fp32 (on the CPU: oneDNN, on the AMX units where the
// CPU has them). fp32 on the CPU: OpenBLAS (docs/kernels.md says why, and how the OpenBLAS
// core-type trap is handled).
// beta == 0 means C is write-only (its old contents, even NaN, are ignored).
#pragma once

#include <cstdint>
#include <string>

#include "mtron/kernels/ctx.h"

namespace mtron::kernels {

enum class Trans { kN, kT };

void gemm(const Ctx& ctx,
          Trans ta,
          Trans tb,
          int64_t M,
          int64_t N,
          int64_t K,
          float alpha,
          const float* A,
          int64_t lda,
          const float* B,
          int64_t ldb,
          float beta,
          float* C,
          int64_t ldc);

void gemm(const Ctx& ctx,
          Trans ta,
          Trans tb,
          int64_t M,
          int64_t N,
          int64_t K,
          float alpha,
          const bf16* A,
          int64_t lda,
          const bf16* B,
          int64_t ldb,
          float beta,
          float* C,
          int64_t ldc);

// One line naming the CPU GEMM libraries and the kernels they run, for start-up logs.
std::string gemm_library_info();

}  // namespace mtron::kernels
