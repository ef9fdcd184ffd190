// gemm: the K = 0 product, bad leading dimensions, and which library runs fp32 GEMMs (every
// transpose form, awkward size, padding and alpha/beta against the reference: the op table,
// test_op_table.cpp).
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

TEST(Gemm, BadLeadingDimensionIsAUserError) {
  std::vector<float> A(16), B(16), C(16);
  EXPECT_THROW(
      gemm(kCpu, Trans::kN, Trans::kN, 4, 4, 4, 1.0f, A.data(), 3, B.data(), 4, 0.0f, C.data(), 4),
      Error);
}

}  // namespace
}  // namespace mtron::kernels::test
