// Fused-QKV split/merge and RoPE: CPU against the reference, the adjoint relations, and RoPE
// against values computed the way Megatron-Core computes them.
#include <cmath>

#include "kernel_test_util.h"
#include "mtron/kernels/ref/ref_ops.h"
#include "mtron/kernels/rope.h"

namespace mtron::kernels::test {
namespace {

TEST(QkvSplit, MatchesReferenceAndMergeIsItsAdjoint) {
  for (int64_t N : {1, 31, 33})
    for (int64_t G : {1, 2, 3})
      for (int64_t hpg : {1, 4})
        for (int64_t D : {1, 16, 33}) {
          const int64_t H = G * hpg;
          auto qkv = randn(N * G * (hpg + 2) * D, 1);
          std::vector<float> q(size_t(N * H * D)), k(size_t(N * G * D)), v(size_t(N * G * D));
          auto qr = q, kr = k, vr = v;
          qkv_split(kCpu, q.data(), k.data(), v.data(), qkv.data(), N, G, hpg, D);
          ref::qkv_split(qr.data(), kr.data(), vr.data(), qkv.data(), N, G, hpg, D);
          expect_close(q, qr, 0, 0, "q");
          expect_close(k, kr, 0, 0, "k");
          expect_close(v, vr, 0, 0, "v");
          std::vector<float> back(qkv.size());
          qkv_merge_grad(kCpu, back.data(), q.data(), k.data(), v.data(), N, G, hpg, D);
          expect_close(back, qkv, 0, 0, "merge(split(x)) = x");
        }
}

TEST(Rope, MatchesReference) {
  for (int64_t N : {1, 31, 33})
    for (int64_t nh : {1, 3})
      for (int64_t D : {2, 32, 64, 80})
        for (int64_t R : {D, D / 2 - (D / 2) % 2}) {
          if (R <= 0) continue;
          auto x = randn(N * nh * D, 1);
          std::vector<int32_t> pos(static_cast<size_t>(N));
          for (int64_t n = 0; n < N; ++n) pos[size_t(n)] = int32_t((n * 37) % 2048);
          auto xr = x;
          rope_forward(kCpu, x.data(), pos.data(), N, nh, D, R, 10000.0f);
          ref::rope_forward(xr.data(), pos.data(), N, nh, D, R, 10000.0f);
          expect_close(x, xr, 1e-6, 1e-5, "rope forward");
          rope_backward(kCpu, x.data(), pos.data(), N, nh, D, R, 10000.0f);
          ref::rope_backward(xr.data(), pos.data(), N, nh, D, R, 10000.0f);
          expect_close(x, xr, 1e-6, 1e-5, "rope backward");
        }
}

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
