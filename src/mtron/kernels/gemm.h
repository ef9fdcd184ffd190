// defines: Trans, gemm (fp32, bf16 and fp16 inputs, fp32 output), gemm_bias (fp32 output, or bf16
//          from bf16 inputs), gemm_gelu, gemm_dgelu, gemm_fp8
//
// Row-major GEMM: C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C.
// op(X) = X (kN) or X^T (kT); lda/ldb/ldc are row strides in elements of the stored matrices.
// The three forms a linear layer needs (X [N,in], W [out,in], row-major):
//   forward  Y  = X  W^T   gemm(kN, kT, N, out, in, ...)
//   dgrad    dX = dY W     gemm(kN, kN, N, in, out, ...)
//   wgrad    dW += dY^T X  gemm(kT, kN, out, in, N, ..., beta = 1)
// bf16 and fp16 inputs accumulate in fp32 and write fp32. On the CPU the library depends on the
// CPU (kernels/cpu_isa.h, docs/kernels.md): fp32 through OpenBLAS, bf16 through oneDNN (on the
// AMX units where the CPU has them) or, where oneDNN has no bf16 matmul, widened to fp32
// exactly; fp16 is always widened to fp32 exactly (every fp16 value is an fp32).
// beta == 0 means C is write-only (its old contents, even NaN, are ignored).
//
// gemm_bias: C = op(A) op(B) + bias + residual, bias[N] added to every row (a linear layer's
// forward with its bias), residual[M, N] (the residual stream a layer's output joins; not C
// itself), each optional (null), C write-only with row stride N. On CUDA one GEMM: the residual
// as cuBLASLt's C operand (beta 1, D = C written separately) and the bias in its epilogue, both
// added to the fp32 accumulator (the residual first); on the CPU the GEMM, bias_add, then add
// (the bias first): the same three fp32 roundings, in another order.
//
// gemm_bias to a bf16 C (bf16 operands, the bias bf16 or null, no residual): C = op(A) op(B) +
// bias accumulated in fp32 and rounded to bf16 once, as cuBLASLt writes a bf16 D (whose bias
// epilogue reads a bias of D's type): the GEMM output that only feeds bf16 consumers (fc1's
// pre-activation, the logits, dgrads a bf16 kernel reads). On the CPU the fp32 GEMM in blocks of
// rows, the widened bias added as bias_add adds it, then convert: the fp32 path's values rounded.
//
// gemm_gelu (bf16 operands, bias bf16 or null): v = op(A) op(B) + bias accumulated in fp32, pre =
// v rounded to bf16 (GELU's input, kept for the backward) and C = gelu(v) rounded to bf16
// (kernels/activation.h's GELU of the fp32 value, not of the rounded pre): an MLP's fc1 with its
// activation, as cuBLASLt's GELU_AUX_BIAS epilogue writes it (D and the aux matrix, both bf16).
// gemm_dgelu: C = op(A) op(B) * gelu'(pre) accumulated in fp32 and rounded to bf16 once, pre the
// bf16 GELU input gemm_gelu kept: fc2's dgrad times GELU's derivative, fc1's output gradient,
// as cuBLASLt's DGELU epilogue writes it. On the CPU (and on CUDA where cuBLASLt has no algorithm
// for the epilogue, or the row length is not a multiple of 8) the fp32 GEMM in blocks of rows, then
// the activation kernels on each block.
//
// gemm_fp8: the same product of two FP8 operands, A holding exact values of format fa and B of
// fb in bf16 storage (fp8_quantize's output; kernels/fp8.h), accumulated in fp32. On the CPU it is
// the bf16 GEMM. On CUDA the operands are first packed to FP8 bytes with K contiguous (the only
// form cuBLASLt's FP8 GEMMs take, "TN" in its column-major terms; K padded with zeros to a
// multiple of 16), then cuBLASLt multiplies them on the FP8 tensor cores. E5M2 x E5M2 has no
// such GEMM and is refused.
#pragma once

#include <cstdint>

#include "mtron/kernels/fp8.h"
#include "mtron/kernels/op.h"

namespace mtron::kernels {

enum class Trans { kN, kT };

#define MT_PARAMS_gemm_fp32                                                                       \
  (Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, \
   const float* B, int64_t ldb, float beta, float* C, int64_t ldc)
#define MT_PARAMS_gemm_bf16                                                                      \
  (Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A, int64_t lda, \
   const bf16* B, int64_t ldb, float beta, float* C, int64_t ldc)
#define MT_PARAMS_gemm_fp16                                                                     \
  (Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const f16* A, int64_t lda, \
   const f16* B, int64_t ldb, float beta, float* C, int64_t ldc)
#define MT_PARAMS_gemm_fp8                                                                        \
  (Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A, Fp8Format fa, \
   int64_t lda, const bf16* B, Fp8Format fb, int64_t ldb, float beta, float* C, int64_t ldc)
#define MT_PARAMS_gemm_bias_fp32                                                     \
  (Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, \
   const float* B, int64_t ldb, float* C, const float* bias, const float* residual)
#define MT_PARAMS_gemm_bias_bf16                                                                   \
  (Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda, const bf16* B, \
   int64_t ldb, float* C, const float* bias, const float* residual)
#define MT_PARAMS_gemm_bias_fp16                                                                 \
  (Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, const f16* A, int64_t lda, const f16* B, \
   int64_t ldb, float* C, const float* bias, const float* residual)
#define MT_PARAMS_gemm_bias_to_bf16                                                                \
  (Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda, const bf16* B, \
   int64_t ldb, bf16* C, const bf16* bias)
#define MT_PARAMS_gemm_gelu                                                                        \
  (Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda, const bf16* B, \
   int64_t ldb, bf16* C, bf16* pre, const bf16* bias)
#define MT_PARAMS_gemm_dgelu                                                                       \
  (Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda, const bf16* B, \
   int64_t ldb, bf16* C, const bf16* pre)
#define MTRON_GEMM_OPS(OP)                                                                        \
  OP(void, gemm, gemm_fp32, gemm_contract, MT_PARAMS_gemm_fp32,                                   \
     (ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))                                      \
  OP(void, gemm, gemm_bf16, gemm_contract, MT_PARAMS_gemm_bf16,                                   \
     (ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))                                      \
  OP(void, gemm, gemm_fp16, gemm_contract, MT_PARAMS_gemm_fp16,                                   \
     (ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))                                      \
  OP(void, gemm_bias, gemm_bias_fp32, gemm_bias_contract, MT_PARAMS_gemm_bias_fp32,               \
     (ta, tb, M, N, K, A, lda, B, ldb, C, bias, residual))                                        \
  OP(void, gemm_bias, gemm_bias_bf16, gemm_bias_contract, MT_PARAMS_gemm_bias_bf16,               \
     (ta, tb, M, N, K, A, lda, B, ldb, C, bias, residual))                                        \
  OP(void, gemm_bias, gemm_bias_fp16, gemm_bias_contract, MT_PARAMS_gemm_bias_fp16,               \
     (ta, tb, M, N, K, A, lda, B, ldb, C, bias, residual))                                        \
  OP(void, gemm_bias, gemm_bias_to_bf16, gemm_bias_to_bf16_contract, MT_PARAMS_gemm_bias_to_bf16, \
     (ta, tb, M, N, K, A, lda, B, ldb, C, bias))                                                  \
  OP(void, gemm_gelu, gemm_gelu, gemm_gelu_contract, MT_PARAMS_gemm_gelu,                         \
     (ta, tb, M, N, K, A, lda, B, ldb, C, pre, bias))                                             \
  OP(void, gemm_dgelu, gemm_dgelu, gemm_dgelu_contract, MT_PARAMS_gemm_dgelu,                     \
     (ta, tb, M, N, K, A, lda, B, ldb, C, pre))                                                   \
  OP(void, gemm_fp8, gemm_fp8, gemm_fp8_contract, MT_PARAMS_gemm_fp8,                             \
     (ta, tb, M, N, K, alpha, A, fa, lda, B, fb, ldb, beta, C, ldc))
MTRON_GEMM_OPS(MT_OP_DECLARE)

}  // namespace mtron::kernels
