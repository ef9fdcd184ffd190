// gemm (fp32 and bf16) against the naive reference: every transpose form, awkward sizes, padded
// leading dimensions, alpha/beta, and beta = 0 ignoring NaN in C.
#include <cmath>
#include <limits>

#include "kernel_test_util.h"
#include "mtron/kernels/gemm.h"
#include "mtron/kernels/ref/ref_ops.h"

namespace mtron::kernels::test {
namespace {

struct GemmCase {
  int64_t M, N, K;
};

const GemmCase kCases[] = {{1, 1, 1},    {31, 33, 32}, {32, 32, 32}, {33, 31, 33},
                           {67, 5, 130}, {1, 64, 77},  {130, 1, 3},  {96, 80, 256}};

template <bool kBf16>
void run_case(const GemmCase& c, Trans ta, Trans tb, float alpha, float beta, int64_t pad) {
  const int64_t M = c.M, N = c.N, K = c.K;
  // stored shapes: A is [M,K] or [K,M], B is [K,N] or [N,K]; rows padded by `pad`
  const int64_t arows = ta == Trans::kN ? M : K, acols = ta == Trans::kN ? K : M;
  const int64_t brows = tb == Trans::kN ? K : N, bcols = tb == Trans::kN ? N : K;
  const int64_t lda = acols + pad, ldb = bcols + pad, ldc = N + pad;
  auto A = randn(arows * lda, 1), B = randn(brows * ldb, 2), C0 = randn(M * ldc, 3);
  if (beta == 0)
    for (auto& x : C0) x = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> C = C0, Cref = C0;
  if constexpr (kBf16) {
    std::vector<bf16> Ab(A.size()), Bb(B.size());
    for (size_t i = 0; i < A.size(); ++i) Ab[i] = float_to_bf16(A[i]), A[i] = bf16_to_float(Ab[i]);
    for (size_t i = 0; i < B.size(); ++i) Bb[i] = float_to_bf16(B[i]), B[i] = bf16_to_float(Bb[i]);
    gemm(kCpu, ta, tb, M, N, K, alpha, Ab.data(), lda, Bb.data(), ldb, beta, C.data(), ldc);
  } else {
    gemm(kCpu, ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  }
  ref::gemm<float>(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, Cref.data(), ldc);
  const std::string what = std::string(kBf16 ? "bf16" : "f32") + " gemm " +
                           (ta == Trans::kN ? "N" : "T") + (tb == Trans::kN ? "N" : "T") + " " +
                           std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) +
                           " alpha " + std::to_string(alpha) + " beta " + std::to_string(beta);
  // products of bf16 inputs are exact in fp32; both accumulate in fp32 or wider
  const double tol = (kBf16 ? 1e-4 : 1e-5) * std::sqrt(double(K));
  for (int64_t i = 0; i < M; ++i)
    expect_close(C.data() + i * ldc, Cref.data() + i * ldc, N, tol, 1e-5, what);
  // padding columns of C are untouched
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = N; j < ldc; ++j) {
      if (beta != 0) {
        EXPECT_EQ(C[size_t(i * ldc + j)], C0[size_t(i * ldc + j)]) << what;
      }
    }
}

TEST(Gemm, F32MatchesReference) {
  for (const auto& c : kCases)
    for (Trans ta : {Trans::kN, Trans::kT})
      for (Trans tb : {Trans::kN, Trans::kT}) {
        run_case<false>(c, ta, tb, 1.0f, 0.0f, 0);
        run_case<false>(c, ta, tb, 0.5f, 1.0f, 3);
      }
}

TEST(Gemm, Bf16MatchesReferenceOnRoundedInputs) {
  for (const auto& c : kCases)
    for (Trans ta : {Trans::kN, Trans::kT})
      for (Trans tb : {Trans::kN, Trans::kT}) {
        run_case<true>(c, ta, tb, 1.0f, 0.0f, 0);
        run_case<true>(c, ta, tb, 1.0f, 1.0f, 5);
      }
}

TEST(Gemm, EmptyInnerDimensionScalesC) {
  std::vector<float> C = {1, 2, 3, 4}, A(1), B(1);
  gemm(kCpu, Trans::kN, Trans::kN, 2, 2, 0, 1.0f, A.data(), 1, B.data(), 2, 0.5f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>{0.5f, 1, 1.5f, 2}));
  gemm(kCpu, Trans::kN, Trans::kN, 2, 2, 0, 1.0f, A.data(), 1, B.data(), 2, 0.0f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>{0, 0, 0, 0}));
}

TEST(Gemm, OpenBlasRunsAvx512KernelsOnAvx512Cpus) {
  // The OpenBLAS core-type trap (docs/kernels.md): mtron_kernels must have made OpenBLAS pick
  // AVX-512 kernels, re-executing the process if needed, so fp32 GEMMs do not run on Prescott.
  const std::string info = gemm_library_info();
  if (__builtin_cpu_supports("avx512f")) {
    EXPECT_NE(info.find("fp32 OpenBLAS ("), std::string::npos) << info;
    EXPECT_EQ(info.find("Prescott"), std::string::npos) << info;
  }
}

TEST(Gemm, BadLeadingDimensionIsAUserError) {
  std::vector<float> A(16), B(16), C(16);
  EXPECT_THROW(
      gemm(kCpu, Trans::kN, Trans::kN, 4, 4, 4, 1.0f, A.data(), 3, B.data(), 4, 0.0f, C.data(), 4),
      Error);
}

}  // namespace
}  // namespace mtron::kernels::test
