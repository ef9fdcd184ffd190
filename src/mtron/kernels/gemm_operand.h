// defines: GemmOperand, narrow_operand, bf16_data, gemm, gemm_bias, gemm_gelu and gemm_dgelu (of
//          dtype-tagged operands; gemm_bias also to a bf16 output)
//
// A GEMM input tagged with its dtype, so that a layer holding activations and weights in the
// run's precision (fp32, or their bf16 or fp16 copies) calls one gemm and never branches on
// precision: the call goes to the fp32, bf16 or fp16 gemm of kernels/gemm.h.
#pragma once

#include <cstdint>
#include <type_traits>

#include "mtron/core/dtype.h"
#include "mtron/core/error.h"
#include "mtron/kernels/elementwise.h"
#include "mtron/kernels/gemm.h"

namespace mtron::kernels {

// An fp32, bf16 or fp16 matrix as a GEMM reads it.
struct GemmOperand {
  DType dtype = DType::kF32;  // kF32, kBF16 or kF16
  const void* data = nullptr;

  static GemmOperand of(const float* p) { return {DType::kF32, p}; }
  static GemmOperand of(const bf16* p) { return {DType::kBF16, p}; }
  static GemmOperand of(const f16* p) { return {DType::kF16, p}; }
  // The operand starting `elems` elements further on (a block of rows).
  GemmOperand at(int64_t elems) const {
    return {dtype, static_cast<const char*>(data) + elems * int64_t(dtype_size(dtype))};
  }
};

// dst[0, n) = src[0, n) rounded to `dtype` (kBF16 or kF16; convert of kernels/elementwise.h),
// as the operand that starts at dst.
inline GemmOperand narrow_operand(
    const Ctx& ctx, DType dtype, void* dst, const float* src, int64_t n) {
  MT_ASSERT(dtype == DType::kBF16 || dtype == DType::kF16, "narrow_operand to ", dtype_name(dtype));
  if (dtype == DType::kF16) {
    convert(ctx, static_cast<f16*>(dst), src, n);
    return GemmOperand::of(static_cast<const f16*>(dst));
  }
  convert(ctx, static_cast<bf16*>(dst), src, n);
  return GemmOperand::of(static_cast<const bf16*>(dst));
}

// f(static_cast<const T*>(A.data), static_cast<const T*>(B.data)) for the operands' common type
// T: float, bf16 or f16.
template <typename F>
void with_operand_types(const char* what, GemmOperand A, GemmOperand B, F f) {
  MT_ASSERT(A.dtype == B.dtype &&
                (A.dtype == DType::kF32 || A.dtype == DType::kBF16 || A.dtype == DType::kF16),
            what, ": operands of dtypes ", dtype_name(A.dtype), " and ", dtype_name(B.dtype));
  auto run = [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    f(static_cast<const T*>(A.data), static_cast<const T*>(B.data));
  };
  if (A.dtype == DType::kBF16) return run(static_cast<bf16*>(nullptr));
  if (A.dtype == DType::kF16) return run(static_cast<f16*>(nullptr));
  run(static_cast<float*>(nullptr));
}

// gemm (kernels/gemm.h) of two operands of the same dtype: fp32, or bf16 or fp16 accumulated in
// fp32.
inline void gemm(const Ctx& ctx,
                 Trans ta,
                 Trans tb,
                 int64_t M,
                 int64_t N,
                 int64_t K,
                 float alpha,
                 GemmOperand A,
                 int64_t lda,
                 GemmOperand B,
                 int64_t ldb,
                 float beta,
                 float* C,
                 int64_t ldc) {
  with_operand_types("gemm", A, B, [&](auto* a, auto* b) {
    gemm(ctx, ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, C, ldc);
  });
}

// gemm_bias (kernels/gemm.h) of two operands of the same dtype.
inline void gemm_bias(const Ctx& ctx,
                      Trans ta,
                      Trans tb,
                      int64_t M,
                      int64_t N,
                      int64_t K,
                      GemmOperand A,
                      int64_t lda,
                      GemmOperand B,
                      int64_t ldb,
                      float* C,
                      const float* bias,
                      const float* residual) {
  with_operand_types("gemm_bias", A, B, [&](auto* a, auto* b) {
    gemm_bias(ctx, ta, tb, M, N, K, a, lda, b, ldb, C, bias, residual);
  });
}

// A bf16 operand's data (`op` names the GEMM in the error).
inline const bf16* bf16_data(const char* op, GemmOperand X) {
  MT_ASSERT(X.dtype == DType::kBF16, op, ": an operand of dtype ", dtype_name(X.dtype),
            " where bf16 ones are read");
  return static_cast<const bf16*>(X.data);
}

// gemm_bias to a bf16 C (kernels/gemm.h) of two bf16 operands.
inline void gemm_bias(const Ctx& ctx,
                      Trans ta,
                      Trans tb,
                      int64_t M,
                      int64_t N,
                      int64_t K,
                      GemmOperand A,
                      int64_t lda,
                      GemmOperand B,
                      int64_t ldb,
                      bf16* C,
                      const bf16* bias) {
  const char* op = "gemm_bias to bf16";
  gemm_bias(ctx, ta, tb, M, N, K, bf16_data(op, A), lda, bf16_data(op, B), ldb, C, bias);
}

// gemm_gelu (kernels/gemm.h) of two bf16 operands.
inline void gemm_gelu(const Ctx& ctx,
                      Trans ta,
                      Trans tb,
                      int64_t M,
                      int64_t N,
                      int64_t K,
                      GemmOperand A,
                      int64_t lda,
                      GemmOperand B,
                      int64_t ldb,
                      bf16* C,
                      bf16* pre,
                      const bf16* bias) {
  gemm_gelu(ctx, ta, tb, M, N, K, bf16_data("gemm_gelu", A), lda, bf16_data("gemm_gelu", B), ldb, C,
            pre, bias);
}

// gemm_dgelu (kernels/gemm.h) of two bf16 operands.
inline void gemm_dgelu(const Ctx& ctx,
                       Trans ta,
                       Trans tb,
                       int64_t M,
                       int64_t N,
                       int64_t K,
                       GemmOperand A,
                       int64_t lda,
                       GemmOperand B,
                       int64_t ldb,
                       bf16* C,
                       const bf16* pre) {
  gemm_dgelu(ctx, ta, tb, M, N, K, bf16_data("gemm_dgelu", A), lda, bf16_data("gemm_dgelu", B), ldb,
             C, pre);
}

}  // namespace mtron::kernels
