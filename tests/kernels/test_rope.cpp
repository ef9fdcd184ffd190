// RoPE against values computed the way Megatron-Core computes them, the reference backward
// against finite differences, and the rot_dim check (the kernels against the reference, QKV
// split/merge included: the op table, test_op_table.cpp).
#include <array>
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
  rope_forward(kCpu, x.data(), &pos, 1, 1, 4, 4, RopeFreq{100.0f}, 0);
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
  ref::rope_backward(dx.data(), pos.data(), N, nh, D, R, RopeFreq{10000.0f}, 0);
  expect_fd(
      x, dx,
      [&] {
        auto y = x;
        ref::rope_forward(y.data(), pos.data(), N, nh, D, R, RopeFreq{10000.0f}, 0);
        return project(y, Rp);
      },
      "rope x");
}

// YaRN's frequencies, written out as Megatron's YarnRotaryEmbedding computes them (fp32): R 8,
// factor 40, correction range [1, 3]: pair 0 and 1 extrapolated, 2 half way, 3 interpolated;
// cos and sin times the concentration factor 1.25.
TEST(Rope, YarnFrequenciesAndConcentration) {
  const RopeFreq f{10000.0f, 40.0f, 1.0f, 3.0f, 1.25f};
  for (int64_t i = 0; i < 4; ++i) {
    const float extra = 1.0f / std::pow(10000.0f, float(2 * i) / 8.0f);
    const float inter = 1.0f / (40.0f * std::pow(10000.0f, float(2 * i) / 8.0f));
    const float ramp = std::array{0.0f, 0.0f, 0.5f, 1.0f}[size_t(i)];
    EXPECT_FLOAT_EQ(f.inv_freq(i, 8), inter * ramp + extra * (1 - ramp)) << i;
  }
  EXPECT_EQ(RopeFreq{10000.0f}.inv_freq(3, 8), 1.0f / std::pow(10000.0f, 0.75f));  // plain
  std::vector<float> x = {1, 0, 0, 0, 0, 0, 0, 0};
  const int32_t pos = 3;
  rope_forward(kCpu, x.data(), &pos, 1, 1, 8, 8, f, 0);
  EXPECT_NEAR(x[0], 1.25 * std::cos(3.0), 1e-6);
  EXPECT_NEAR(x[4], 1.25 * std::sin(3.0), 1e-6);
  // the same correction range at both ends (high bumped by 0.001): a step at `low`
  const RopeFreq step{10000.0f, 4.0f, 2.0f, 2.0f, 1.0f};
  EXPECT_FLOAT_EQ(step.inv_freq(3, 8), 1.0f / (4.0f * std::pow(10000.0f, 0.75f)));
  EXPECT_FLOAT_EQ(step.inv_freq(1, 8), 1.0f / std::pow(10000.0f, 0.25f));
}

TEST(Rope, ReferenceYarnBackwardMatchesFiniteDifferences) {
  const int64_t N = 3, nh = 2, D = 10, R = 8;
  const RopeFreq f{10000.0f, 40.0f, 1.0f, 3.0f, 1.25f};
  auto x = to_double(randn(N * nh * D, 3)), Rp = to_double(randn(N * nh * D, 4));
  const std::vector<int32_t> pos = {0, 7, 4000};
  auto dx = Rp;
  ref::rope_backward(dx.data(), pos.data(), N, nh, D, R, f, 0);
  expect_fd(
      x, dx,
      [&] {
        auto y = x;
        ref::rope_forward(y.data(), pos.data(), N, nh, D, R, f, 0);
        return project(y, Rp);
      },
      "yarn rope x");
}

TEST(Rope, OddRotaryDimIsAUserError) {
  std::vector<float> x(8);
  const int32_t pos = 0;
  EXPECT_THROW(rope_forward(kCpu, x.data(), &pos, 1, 1, 8, 3, RopeFreq{10000.0f}, 0), Error);
}

}  // namespace
}  // namespace mtron::kernels::test
