// gemm: the K = 0 product, bad leading dimensions, and which library runs fp32 GEMMs (every
// transpose form, awkward size, padding and alpha/beta against the reference: the op table,
// test_op_table.cpp); the FP8 bytes gemm_fp8 packs on CUDA, and its E5M2 x E5M2 refusal.
#include <cmath>
#include <limits>

#include "kernel_test_util.h"
#include "mtron/kernels/cpu_isa.h"
#include "mtron/kernels/gemm.h"
#include "mtron/kernels/ref/ref_ops.h"

namespace mtron::kernels::test {
namespace {

TEST(Gemm, EmptyInnerDimensionScalesC) {
  std::vector<float> C = {1, 2, 3, 4}, A(1), B(1);
  gemm(kCpu, Trans::kN, Trans::kN, 2, 2, 0, 1.0f, A.data(), 1, B.data(), 2, 0.5f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>{0.5f, 1, 1.5f, 2}));
  gemm(kCpu, Trans::kN, Trans::kN, 2, 2, 0, 1.0f, A.data(), 1, B.data(), 2, 0.0f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>{0, 0, 0, 0}));
}

TEST(Gemm, Fp32RunsOnOpenBlasOnlyWhereItsKernelsFitTheCpu) {
  // The OpenBLAS core-type trap (docs/kernels.md): unfit OpenBLAS kernels (Prescott on an AVX2 or
  // AVX-512 CPU, as kernels.openblas_unfit_uses_onednn makes them look) must not run fp32 GEMMs.
  const std::string paths = cpu_gemm_paths();
  EXPECT_EQ(paths.find(openblas_core_fits() ? "fp32 OpenBLAS (" : "fp32 oneDNN"), 0u) << paths;
}

// A mixture of experts' expert GEMMs take a new row count per expert and micro-batch: more
// shapes than the CPU's primitive cache holds, each right, the first ones right again after their
// eviction, and the cache no larger than its capacity (where bf16 GEMMs run on oneDNN).
TEST(Gemm, Bf16StaysRightOverMoreShapesThanTheCacheHolds) {
  const int64_t N = 8, K = 16, maxM = 300;
  const std::vector<float> a = randn(maxM * K, 1), b = randn(N * K, 2);
  std::vector<bf16> A(a.size()), B(b.size());
  std::vector<float> Aw(a.size()), Bw(b.size());  // the bf16 values widened
  for (size_t i = 0; i < a.size(); ++i) Aw[i] = bf16_to_float(A[i] = float_to_bf16(a[i]));
  for (size_t i = 0; i < b.size(); ++i) Bw[i] = bf16_to_float(B[i] = float_to_bf16(b[i]));
  for (const int64_t last : {maxM, int64_t(40)})  // the second pass finds M = 1..40 evicted
    for (int64_t M = 1; M <= last; ++M) {
      std::vector<float> C(size_t(M * N)), want(size_t(M * N));
      gemm(kCpu, Trans::kN, Trans::kT, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f, C.data(), N);
      ref::gemm(Trans::kN, Trans::kT, M, N, K, 1.0f, Aw.data(), K, Bw.data(), K, 0.0f, want.data(),
                N);
      expect_close(C, want, 1e-5, 1e-5, "M=" + std::to_string(M));
      if (HasFailure()) return;
    }
  const OneDnnPrimitives p = cpu_gemm_primitives();
  if (cpu_gemm_paths().find("bf16 oneDNN") == std::string::npos) return;  // widened to fp32
  EXPECT_LT(p.capacity, maxM);
  EXPECT_GE(p.made, maxM + 40);  // every shape made, the evicted ones again
  EXPECT_EQ(p.cached, p.capacity);
}

// Every byte of both formats decodes to a value on the format's grid (the reference's rounding,
// an independent definition) and encodes back to itself; the largest finite values and NaN are
// where the formats put them.
TEST(Fp8Bytes, EveryByteDecodesOntoTheGridAndEncodesBack) {
  for (const Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    int finite = 0;
    for (int b = 0; b < 256; ++b) {
      const float v = fp8_decode(uint8_t(b), f);
      if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(fp8_decode(fp8_encode(v, f), f))) << b;
        continue;
      }
      if (std::isinf(v)) continue;  // E5M2's infinities: fp8_quantize saturates instead
      ++finite;
      EXPECT_EQ(ref::fp8_round(v, f), v) << b;
      EXPECT_EQ(fp8_encode(v, f), uint8_t(b)) << b << " " << v;
    }
    // E4M3: 2 x 127 finite bytes (S.1111.111 is NaN); E5M2: 2 x 124 (exponent 31 is inf/NaN)
    EXPECT_EQ(finite, f == Fp8Format::kE4M3 ? 254 : 248);
  }
  EXPECT_EQ(fp8_decode(0x7E, Fp8Format::kE4M3), 448.0f);
  EXPECT_EQ(fp8_decode(0x7B, Fp8Format::kE5M2), 57344.0f);
  EXPECT_EQ(fp8_decode(0x01, Fp8Format::kE4M3), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_decode(0x01, Fp8Format::kE5M2), std::ldexp(1.0f, -16));
  EXPECT_EQ(fp8_encode(-0.0f, Fp8Format::kE4M3), 0x80);
}

TEST(Gemm, Fp8RefusesE5m2TimesE5m2) {
  std::vector<bf16> A(4), B(4);
  std::vector<float> C(4);
  EXPECT_THROW(gemm_fp8(kCpu, Trans::kN, Trans::kN, 2, 2, 2, 1.0f, A.data(), Fp8Format::kE5M2, 2,
                        B.data(), Fp8Format::kE5M2, 2, 0.0f, C.data(), 2),
               Error);
}

TEST(Gemm, BadLeadingDimensionIsAUserError) {
  std::vector<float> A(16), B(16), C(16);
  EXPECT_THROW(
      gemm(kCpu, Trans::kN, Trans::kN, 4, 4, 4, 1.0f, A.data(), 3, B.data(), 4, 0.0f, C.data(), 4),
      Error);
}

}  // namespace
}  // namespace mtron::kernels::test
