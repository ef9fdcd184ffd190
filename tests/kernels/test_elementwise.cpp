// add, scale, convert, bias add/backward, sum_squares against the reference.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernel_test_util.h"
#include "mtron/kernels/elementwise.h"
#include "mtron/kernels/ref/ref_ops.h"

namespace mtron::kernels::test {
namespace {

const int64_t kSizes[] = {0, 1, 15, 31, 32, 33, 1000, 100003};

TEST(Elementwise, AddAndScale) {
  for (int64_t n : kSizes) {
    auto a = randn(n, 1), b = randn(n, 2);
    std::vector<float> out(static_cast<size_t>(n)), want(static_cast<size_t>(n));
    add(kCpu, out.data(), a.data(), b.data(), n);
    ref::add(want.data(), a.data(), b.data(), n);
    expect_close(out, want, 0, 0, "add");
    add(kCpu, a.data(), a.data(), b.data(), n);  // aliasing out = a
    expect_close(a, want, 0, 0, "add in place");
    scale_inplace(kCpu, a.data(), 0.37f, n);
    ref::scale_inplace(want.data(), 0.37f, n);
    expect_close(a, want, 0, 0, "scale");
  }
}

TEST(Elementwise, ConvertRoundsToNearestEvenBitExactly) {
  std::vector<float> x = randn(100003, 7, 3.0f);
  const float specials[] = {0.0f,
                            -0.0f,
                            1.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::denorm_min(),
                            1e-40f,
                            -3e-39f,
                            std::numeric_limits<float>::max(),
                            1.00390625f,  // 1 + 2^-8: a tie, rounds down to even 1.0
                            1.01171875f,  // 1 + 3 * 2^-8: a tie, rounds up to 1 + 2^-6
                            3.3895314e38f};
  for (size_t i = 0; i < std::size(specials); ++i) x[i] = specials[i];
  for (int64_t n : kSizes) {
    std::vector<bf16> got(static_cast<size_t>(n));
    convert(kCpu, got.data(), x.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const bf16 want = ref::to_bf16(x[size_t(i)]);
      if (std::isnan(x[size_t(i)])) {
        EXPECT_TRUE(std::isnan(bf16_to_float(got[size_t(i)])));
        continue;
      }
      ASSERT_EQ(got[size_t(i)].bits, want.bits) << "x = " << x[size_t(i)];
      ASSERT_EQ(got[size_t(i)].bits, float_to_bf16(x[size_t(i)]).bits) << "x = " << x[size_t(i)];
    }
    std::vector<float> back(static_cast<size_t>(n));
    convert(kCpu, back.data(), got.data(), n);
    for (int64_t i = 0; i < n; ++i)
      if (!std::isnan(x[size_t(i)])) {
        ASSERT_EQ(back[size_t(i)], bf16_to_float(got[size_t(i)]));
      }
  }
  EXPECT_EQ(ref::to_bf16(1.00390625f).bits, 0x3f80);
  EXPECT_EQ(ref::to_bf16(1.01171875f).bits, 0x3f82);
}

TEST(Elementwise, BiasAddAndBackward) {
  for (int64_t N : {1, 31, 33, 257})
    for (int64_t C : {1, 31, 32, 33, 768}) {
      auto out = randn(N * C, 1), bias = randn(C, 2), dout = randn(N * C, 3), db = randn(C, 4);
      auto want = out, dbw = db;
      bias_add(kCpu, out.data(), bias.data(), N, C);
      ref::bias_add(want.data(), bias.data(), N, C);
      expect_close(out, want, 0, 0, "bias_add");
      bias_backward(kCpu, db.data(), dout.data(), N, C);
      ref::bias_backward(dbw.data(), dout.data(), N, C);
      expect_close(db, dbw, 1e-5 * std::sqrt(double(N)), 1e-5, "bias_backward");
    }
}

TEST(Elementwise, BiasBackwardMatchesFiniteDifferences) {
  const int64_t N = 5, C = 7;
  auto x = to_double(randn(N * C, 1)), bias = to_double(randn(C, 2)),
       R = to_double(randn(N * C, 3));
  std::vector<double> db(size_t(C), 0.0);
  ref::bias_backward(db.data(), R.data(), N, C);
  expect_fd(
      bias, db,
      [&] {
        auto out = x;
        ref::bias_add(out.data(), bias.data(), N, C);
        return project(out, R);
      },
      "bias");
}

TEST(Elementwise, SumSquares) {
  for (int64_t n : kSizes) {
    auto x = randn(n, 9);
    const double got = sum_squares(kCpu, x.data(), n), want = ref::sum_squares(x.data(), n);
    EXPECT_NEAR(got, want, 1e-6 * want + 1e-12) << "n = " << n;
  }
}

}  // namespace
}  // namespace mtron::kernels::test
