// RoPE against values computed the way Megatron-Core computes them, the reference backward
// against finite differences, and the rot_dim check (the kernels against the reference, QKV
// split/merge included: the op table, test_op_table.cpp).
#include <cmath>

#include "kernel_test_util.h"
#include "mtron/kernels/ref/ref_ops.h"
#include "mtron/kernels/rope.h"

namespace mtron::kernels::test {
namespace {

TEST(Rope, KnownRotation) {
  // D = R = 4, base 100: inv_freq = {1, 1/10}; at pos 2 the angles are {2, 0.2}.
  std::vector<float> x = {1, 2, 3, 4};
  const int32_t pos = 2;
  rope_forward(kCpu, x.data(), &pos, 1, 1, 4, 4, 100.0f);
  const double c0 = std::cos(2.0), s0 = std::sin(2.0), c1 = std::cos(0.2f), s1 = std::sin(0.2f);
  const std::vector<float> want = {float(1 * c0 - 3 * s0), float(2 * c1 - 4 * s1),
                                   float(3 * c0 + 1 * s0), float(4 * c1 + 2 * s1)};
  expect_close(x, want, 1e-6, 1e-6, "rope values");
}

TEST(Rope, ReferenceBackwardMatchesFiniteDifferences) {
  const int64_t N = 3, nh = 2, D = 6, R = 4;
  auto x = to_double(randn(N * nh * D, 1)), Rp = to_double(randn(N * nh * D, 2));
  const std::vector<int32_t> pos = {0, 5, 1000};
  auto dx = Rp;
  ref::rope_backward(dx.data(), pos.data(), N, nh, D, R, 10000.0f);
  expect_fd(
      x, dx,
      [&] {
        auto y = x;
        ref::rope_forward(y.data(), pos.data(), N, nh, D, R, 10000.0f);
        return project(y, Rp);
      },
      "rope x");
}

TEST(Rope, OddRotaryDimIsAUserError) {
  std::vector<float> x(8);
  const int32_t pos = 0;
  EXPECT_THROW(rope_forward(kCpu, x.data(), &pos, 1, 1, 8, 3, 10000.0f), Error);
}

}  // namespace
}  // namespace mtron::kernels::test
