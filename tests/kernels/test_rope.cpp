// RoPE against values computed the way Megatron-Core computes them, the reference backward
// against finite differences, and the rot_dim check (the kernels against the reference, QKV
// split/merge included: the op table, test_op_table.cpp).
#include <array>
#include <cmath>
#include <cstring>

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

// Llama 3.x's frequencies against PyTorch's: Megatron-Core 0.15's RotaryEmbedding._apply_scaling
// (factor 8) run by Debian's python3-torch 1.13 on the plain frequencies 1 / base^(2i/R) in
// fp32, bit for bit: R 16 at base 10000 (pairs 0-5 kept, 6 blended, 7 divided by the factor) and
// Llama 3.1 8B's R 128 at base 500000 (0-28 kept, 29-35 blended, 36-63 divided).
TEST(Rope, Llama3ScalingIsPyTorchsBitForBit) {
  const auto bits = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  struct Case {
    std::vector<uint32_t> plain, scaled;
  };
  const Case cases[] = {
      {{0x3f800000, 0x3ea1e89b, 0x3dcccccd, 0x3d0186e3, 0x3c23d70a, 0x3b4f3e38, 0x3a83126f,
        0x39a5cb60},
       {0x3f800000, 0x3ea1e89b, 0x3dcccccd, 0x3d0186e3, 0x3c23d70a, 0x3b4f3e38, 0x395ffbd9,
        0x3825cb60}},
      {{0x3f800000, 0x3f508ac1, 0x3f29e1c6, 0x3f0a6384, 0x3ee177bc, 0x3eb7ab7d, 0x3e959ee3,
        0x3e73c461, 0x3e4693b0, 0x3e21c3a0, 0x3e03c6a0, 0x3dd6b19c, 0x3daee4ad, 0x3d8e7898,
        0x3d681e67, 0x3d3d1684, 0x3d1a08c8, 0x3cfaf53f, 0x3ccc6f49, 0x3ca68939, 0x3c87a9c3,
        0x3c5d06ec, 0x3c340d6d, 0x3c12ac7f, 0x3beef74f, 0x3bc2aa76, 0x3b9e9402, 0x3b812e35,
        0x3b527720, 0x3b2b72dc, 0x3b0baa41, 0x3ae38c10, 0x3ab95d21, 0x3a970023, 0x3a7603ea,
        0x3a486886, 0x3a23418d, 0x3a04fdbf, 0x39d8ac81, 0x39b08199, 0x398fc8f8, 0x396a426f,
        0x393ed4f4, 0x391b7475, 0x38fd45c3, 0x38ce51f5, 0x38a8126b, 0x3888ea0f, 0x385f10c4,
        0x3835b687, 0x381406cb, 0x37f12b80, 0x37c47610, 0x37a00a69, 0x37825f34, 0x37546808,
        0x372d07a7, 0x370cf400, 0x36e5a54d, 0x36bb12c7, 0x369864a7, 0x367848c2, 0x364a41b0,
        0x3624c2ff},
       {0x3f800000, 0x3f508ac1, 0x3f29e1c6, 0x3f0a6384, 0x3ee177bc, 0x3eb7ab7d, 0x3e959ee3,
        0x3e73c461, 0x3e4693b0, 0x3e21c3a0, 0x3e03c6a0, 0x3dd6b19c, 0x3daee4ad, 0x3d8e7898,
        0x3d681e67, 0x3d3d1684, 0x3d1a08c8, 0x3cfaf53f, 0x3ccc6f49, 0x3ca68939, 0x3c87a9c3,
        0x3c5d06ec, 0x3c340d6d, 0x3c12ac7f, 0x3beef74f, 0x3bc2aa76, 0x3b9e9402, 0x3b812e35,
        0x3b527720, 0x3b0dfd06, 0x3ab3d11d, 0x3a60979e, 0x3a0995d2, 0x39a3f108, 0x393b2dd2,
        0x38c86886, 0x38a3418d, 0x3884fdbf, 0x3858ac81, 0x38308199, 0x380fc8f8, 0x37ea426f,
        0x37bed4f4, 0x379b7475, 0x377d45c3, 0x374e51f5, 0x3728126b, 0x3708ea0f, 0x36df10c4,
        0x36b5b687, 0x369406cb, 0x36712b80, 0x36447610, 0x36200a69, 0x36025f34, 0x35d46808,
        0x35ad07a7, 0x358cf400, 0x3565a54d, 0x353b12c7, 0x351864a7, 0x34f848c2, 0x34ca41b0,
        0x34a4c2ff}}};
  const RopeFreq f{.llama3_factor = 8.0f};
  for (const Case& c : cases)
    for (size_t i = 0; i < c.plain.size(); ++i)
      EXPECT_EQ(f.llama3(bits(c.plain[i])), bits(c.scaled[i])) << c.plain.size() << " " << i;
  // inv_freq applies it to its own plain frequency
  const RopeFreq g{.base = 500000.0f, .llama3_factor = 8.0f};
  EXPECT_EQ(g.inv_freq(40, 128), g.llama3(RopeFreq{.base = 500000.0f}.inv_freq(40, 128)));
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
