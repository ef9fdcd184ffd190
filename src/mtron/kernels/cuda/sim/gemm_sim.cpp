// gemm.cpp for the CPU emulation: executes the column-major descriptor that gemm_layout.h
// derives (the one the cuBLASLt path hands to the library) with plain loops in double, so the
// row-major to column-major mapping is tested without a GPU.
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "mtron/core/error.h"
#include "mtron/kernels/cuda/cuda_ops.h"
#include "mtron/kernels/cuda/gelu.cuh"
#include "mtron/kernels/cuda/gemm_layout.h"
#include "mtron/kernels/cuda/runtime.h"

namespace mtron::kernels::cuda {
namespace {

float load(const float* p, int64_t i) {
  return p[i];
}
float load(const bf16* p, int64_t i) {
  return bf16_to_float(p[i]);
}
float load(const f16* p, int64_t i) {
  return f16_to_float(p[i]);
}

// cuBLAS semantics: D(i, j) = alpha sum_p op(A)(i, p) op(B)(p, j) + beta C(i, j) (+ bias[i]),
// column-major, the stored operands' elements read by load_a(index) and load_b(index),
// accumulated in double; C is Cin (D itself where null).
template <typename LoadA, typename LoadB>
void run_col_major(const ColMajorGemm& g,
                   LoadA load_a,
                   LoadB load_b,
                   float alpha,
                   float beta,
                   const float* Cin,
                   float* C) {
  if (!Cin) Cin = C;
  for (int64_t j = 0; j < g.n; ++j)
    for (int64_t i = 0; i < g.m; ++i) {
      double acc = 0;
      for (int64_t p = 0; p < g.k; ++p) {
        const float x = g.trans_a ? load_a(p + i * g.lda) : load_a(i + p * g.lda);
        const float y = g.trans_b ? load_b(j + p * g.ldb) : load_b(p + j * g.ldb);
        acc += double(x) * double(y);
      }
      float& c = C[i + j * g.ldc];
      c = float(alpha * acc) + (beta == 0.0f ? 0.0f : beta * Cin[i + j * g.ldc]);
      if (g.bias) c += static_cast<const float*>(g.bias)[i];  // fp32 here (a bf16 one widened)
    }
}

// The row-major call, its memory open to the caller.
template <typename T>
void multiply(Trans ta,
              Trans tb,
              int64_t M,
              int64_t N,
              int64_t K,
              float alpha,
              const T* A,
              int64_t lda,
              const T* B,
              int64_t ldb,
              float beta,
              float* C,
              int64_t ldc,
              const float* bias,
              const float* Cin) {
  ColMajorGemm g = to_col_major(ta, tb, M, N, K, A, lda, B, ldb, ldc);
  g.bias = bias;
  const T* a = static_cast<const T*>(g.a);
  const T* b = static_cast<const T*>(g.b);
  run_col_major(
      g, [&](int64_t i) { return load(a, i); }, [&](int64_t i) { return load(b, i); }, alpha, beta,
      Cin, C);
}

// Device pointers of a GEMM (checked), counted as one.
void gemm_pointers(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs) sim::check_device_pointer("gemm", p);
  ++work().gemms;
}

// The row-major call on device pointers, with the emulation's device access open.
template <typename T>
void run(Trans ta,
         Trans tb,
         int64_t M,
         int64_t N,
         int64_t K,
         float alpha,
         const T* A,
         int64_t lda,
         const T* B,
         int64_t ldb,
         float beta,
         float* C,
         int64_t ldc,
         const float* bias = nullptr,
         const float* Cin = nullptr) {
  gemm_pointers({A, B, C, bias, Cin});
  const sim::DeviceAccess access;
  multiply(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias, Cin);
}

}  // namespace

void gemm(const Ctx&, MT_PARAMS(gemm_fp32)) {
  run(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm(const Ctx&, MT_PARAMS(gemm_bf16)) {
  run(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm(const Ctx&, MT_PARAMS(gemm_fp16)) {
  run(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_bias(const Ctx&, MT_PARAMS(gemm_bias_fp32)) {
  run(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, residual ? 1.0f : 0.0f, C, N, bias, residual);
}
void gemm_bias(const Ctx&, MT_PARAMS(gemm_bias_bf16)) {
  run(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, residual ? 1.0f : 0.0f, C, N, bias, residual);
}
void gemm_bias(const Ctx&, MT_PARAMS(gemm_bias_fp16)) {
  run(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, residual ? 1.0f : 0.0f, C, N, bias, residual);
}

// The fp32 result of bf16 operands with a bias of D's type (bf16, widened; or none), before a
// bf16 D's rounding and the GELU epilogue.
std::vector<float> product_bf16(Trans ta,
                                Trans tb,
                                int64_t M,
                                int64_t N,
                                int64_t K,
                                const bf16* A,
                                int64_t lda,
                                const bf16* B,
                                int64_t ldb,
                                const bf16* bias) {
  std::vector<float> v(size_t(M * N)), wide_bias;
  if (bias)
    for (int64_t j = 0; j < N; ++j) wide_bias.push_back(bf16_to_float(bias[j]));
  multiply(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, v.data(), N,
           bias ? wide_bias.data() : nullptr, nullptr);
  return v;
}

// cuBLASLt's bf16 D: the fp32 result rounded once.
void gemm_bias(const Ctx&, MT_PARAMS(gemm_bias_to_bf16)) {
  gemm_pointers({A, B, C, bias});
  const sim::DeviceAccess access;
  const std::vector<float> v = product_bf16(ta, tb, M, N, K, A, lda, B, ldb, bias);
  for (int64_t i = 0; i < M * N; ++i) C[i] = float_to_bf16(v[size_t(i)]);
}

// cuBLASLt's GELU_AUX(_BIAS) epilogue on bf16 D and aux: GELU of the fp32 value (in fp32, as
// mtron's GELU kernels compute it: cuBLASLt's own arithmetic is not documented) and the value
// itself, each rounded once.
void gemm_gelu(const Ctx&, MT_PARAMS(gemm_gelu)) {
  gemm_pointers({A, B, C, pre, bias});
  const sim::DeviceAccess access;
  const std::vector<float> v = product_bf16(ta, tb, M, N, K, A, lda, B, ldb, bias);
  for (int64_t i = 0; i < M * N; ++i) {
    pre[i] = float_to_bf16(v[size_t(i)]);
    C[i] = float_to_bf16(gelu(v[size_t(i)]));
  }
}

// cuBLASLt's DGELU epilogue: the fp32 product times GELU's derivative at the bf16 aux input (in
// fp32, as gemm_gelu's), rounded once.
void gemm_dgelu(const Ctx&, MT_PARAMS(gemm_dgelu)) {
  gemm_pointers({A, B, C, pre});
  const sim::DeviceAccess access;
  const std::vector<float> dv = product_bf16(ta, tb, M, N, K, A, lda, B, ldb, nullptr);
  for (int64_t i = 0; i < M * N; ++i)
    C[i] = float_to_bf16(gelu_grad(bf16_to_float(pre[i]), dv[size_t(i)]));
}

bool gemm_fp8_packed(const Ctx&,
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
                     int64_t ldc) {
  gemm_pointers({a, b, C});
  const sim::DeviceAccess access;
  const ColMajorGemm g = to_col_major(Trans::kN, Trans::kT, M, N, K, a, K, b, K, ldc);
  // What cuBLASLt's FP8 GEMMs require: "TN", K a multiple of 16.
  MT_ASSERT(g.trans_a && !g.trans_b && K % 16 == 0, "FP8 GEMM not in TN form");
  const auto* ga = static_cast<const uint8_t*>(g.a);  // b's bytes, format fb
  const auto* gb = static_cast<const uint8_t*>(g.b);  // a's bytes, format fa
  run_col_major(
      g, [&](int64_t i) { return fp8_decode(ga[i], fb); },
      [&](int64_t i) { return fp8_decode(gb[i], fa); }, alpha, beta, nullptr, C);
  return true;
}

}  // namespace mtron::kernels::cuda
