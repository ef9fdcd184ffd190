// AdamW step against the reference over several steps, with and without weight decay, and the
// bf16 copy written in the same pass.
#include "kernel_test_util.h"
#include "mtron/kernels/adamw.h"
#include "mtron/kernels/ref/ref_ops.h"

namespace mtron::kernels::test {
namespace {

TEST(AdamW, MatchesReferenceOverSteps) {
  for (int64_t n : {1, 31, 32, 33, 10007})
    for (float wd : {0.0f, 0.1f}) {
      auto p = randn(n, 1), pr = p;
      std::vector<float> m(size_t(n), 0.0f), v(size_t(n), 0.0f), mr = m, vr = v;
      std::vector<bf16> pb(static_cast<size_t>(n));
      AdamWParams hp;
      hp.lr = 1e-2f;
      hp.weight_decay = wd;
      for (int64_t step = 1; step <= 5; ++step) {
        hp.step = step;
        auto g = randn(n, uint64_t(10 + step));
        adamw_step(kCpu, p.data(), m.data(), v.data(), g.data(), pb.data(), n, hp);
        ref::adamw_step(pr.data(), mr.data(), vr.data(), g.data(), n, hp);
      }
      expect_close(p, pr, 1e-6, 1e-5, "param");
      expect_close(m, mr, 1e-7, 1e-5, "m");
      expect_close(v, vr, 1e-7, 1e-5, "v");
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(pb[size_t(i)].bits, float_to_bf16(p[size_t(i)]).bits) << "bf16 copy at " << i;
    }
}

TEST(AdamW, NoBf16CopyWhenNull) {
  std::vector<float> p = {1.0f}, m = {0.0f}, v = {0.0f}, g = {0.5f};
  AdamWParams hp;
  hp.lr = 0.1f;
  adamw_step(kCpu, p.data(), m.data(), v.data(), g.data(), nullptr, 1, hp);
  // first step: m/bc1 = g, v/bc2 = g^2, so the update is lr * g / (|g| + eps)
  EXPECT_NEAR(p[0], 1.0f - 0.1f, 1e-6);
}

}  // namespace
}  // namespace mtron::kernels::test
