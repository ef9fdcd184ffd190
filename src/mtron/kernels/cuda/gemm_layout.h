// defines: ColMajorGemm, to_col_major, gemm_fp8_packed
//
// cuBLAS(Lt) is column-major; mtron's gemm is row-major (gemm.h). A row-major matrix with row
// stride ld is the column-major view of its transpose with the same ld, so
//   C = op(A) op(B)   (row-major, M x N)   <=>   C^T = op(B)^T op(A)^T   (column-major, N x M)
// and the column-major product takes the stored B as its first operand and the stored A as its
// second, each transposed exactly when the row-major call transposes it. This header holds that
// mapping alone, so the emulated GEMM of the sim build (sim/gemm_sim.cpp) executes the very
// descriptors the cuBLASLt path (gemm.cpp) hands to the library.
#pragma once

#include <cstdint>

#include "mtron/kernels/ctx.h"
#include "mtron/kernels/gemm.h"

namespace mtron::kernels::cuda {

// D[m x n] = alpha op(A)[m x k] op(B)[k x n] + beta C, column-major (cuBLAS's names). Each
// operand is described as stored: rows x cols with leading dimension ld (rows <= ld).
struct ColMajorGemm {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  const void* a = nullptr;
  int64_t a_rows = 0, a_cols = 0, lda = 0;
  const void* b = nullptr;
  int64_t b_rows = 0, b_cols = 0, ldb = 0;
  int64_t c_rows = 0, c_cols = 0, ldc = 0;
  // Added to every column of D (cuBLASLt's bias epilogue: bias[i] to row i, m values; the
  // row-major call's bias over its N columns), or none.
  const void* bias = nullptr;  // of D's type
  // The GELU epilogues' matrix of D's type and layout (ldc): GELU's input, written by the forward
  // epilogue and read by DGELU's; or none.
  const void* aux = nullptr;
};

inline ColMajorGemm to_col_major(Trans ta,
                                 Trans tb,
                                 int64_t M,
                                 int64_t N,
                                 int64_t K,
                                 const void* A,
                                 int64_t lda,
                                 const void* B,
                                 int64_t ldb,
                                 int64_t ldc) {
  ColMajorGemm g;
  g.m = N;
  g.n = M;
  g.k = K;
  // First operand: the stored B. Row-major K x N (kN) is column-major N x K; row-major N x K
  // (kT) is column-major K x N, transposed by the library.
  g.trans_a = tb == Trans::kT;
  g.a = B;
  g.a_rows = g.trans_a ? K : N;
  g.a_cols = g.trans_a ? N : K;
  g.lda = ldb;
  // Second operand: the stored A. Row-major M x K (kN) is column-major K x M; row-major K x M
  // (kT) is column-major M x K, transposed by the library.
  g.trans_b = ta == Trans::kT;
  g.b = A;
  g.b_rows = g.trans_b ? M : K;
  g.b_cols = g.trans_b ? K : M;
  g.ldb = lda;
  g.c_rows = N;
  g.c_cols = M;
  g.ldc = ldc;
  return g;
}

// C[M x N] = alpha a b^T + beta C (row-major, row stride ldc) of FP8 bytes packed K-contiguous:
// a[M][K] of format fa, b[N][K] of fb, K a multiple of 16 (gemm_fp8 packs them). In cuBLASLt's
// column-major terms the first operand is b, transposed, and the second a, not: "TN", the one
// form its FP8 GEMMs take. gemm.cpp runs it on cuBLASLt, the emulation (sim/gemm_sim.cpp) with
// loops that check that form. False, with nothing run, where cuBLASLt has no FP8 algorithm for it.
bool gemm_fp8_packed(const Ctx& ctx,
                     int64_t M,
                     int64_t N,
                     int64_t K,
                     float alpha,
                     const uint8_t* a,
                     Fp8Format fa,
                     const uint8_t* b,
                     Fp8Format fb,
                     float beta,
                     float* C,
                     int64_t ldc);

}  // namespace mtron::kernels::cuda
