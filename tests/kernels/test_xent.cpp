// Cross-entropy building blocks: the reference gradient against finite differences of the loss,
// and chunked statistics combining to the full softmax (the kernels against the reference with
// padded columns and mid-vocabulary chunks: the op table, test_op_table.cpp).
#include <cmath>
#include <limits>

#include "kernel_test_util.h"
#include "mtron/kernels/ref/ref_ops.h"
#include "mtron/kernels/xent.h"

namespace mtron::kernels::test {
namespace {

TEST(Xent, ReferenceGradientMatchesFiniteDifferences) {
  const int64_t n = 4, V = 9, vocab_valid = 7;  // 2 padded columns
  auto logits = to_double(randn(n * V, 1, 2.0f)), scale = to_double(randn(n, 2));
  const std::vector<int32_t> targets = {0, 6, 3, 3};
  auto loss = [&] {
    std::vector<double> mx(static_cast<size_t>(n)), se(static_cast<size_t>(n)),
        tl(static_cast<size_t>(n));
    ref::xent_stats(mx.data(), se.data(), tl.data(), logits.data(), targets.data(), n, V, 0,
                    vocab_valid);
    double l = 0;
    for (int64_t r = 0; r < n; ++r)
      l += scale[size_t(r)] * (mx[size_t(r)] + std::log(se[size_t(r)]) - tl[size_t(r)]);
    return l;
  };
  std::vector<double> mx(static_cast<size_t>(n)), se(static_cast<size_t>(n)),
      tl(static_cast<size_t>(n)), dl(size_t(n * V));
  ref::xent_stats(mx.data(), se.data(), tl.data(), logits.data(), targets.data(), n, V, 0,
                  vocab_valid);
  ref::xent_backward(dl.data(), logits.data(), targets.data(), mx.data(), se.data(), scale.data(),
                     n, V, 0, vocab_valid);
  expect_fd(logits, dl, loss, "xent logits");
}

TEST(Xent, ChunkedStatsCombineToTheFullSoftmax) {
  // Two chunks [0, 20) and [20, 37) of a 37-wide vocabulary padded to 40.
  const int64_t n = 3;
  auto full = randn(n * 40, 5, 3.0f);
  const std::vector<int32_t> targets = {2, 25, 36};
  std::vector<float> mx(n), se(n), tl(n);
  xent_stats(kCpu, mx.data(), se.data(), tl.data(), full.data(), targets.data(), n, 40, 0, 37);
  std::vector<float> c0(n * 20), c1(n * 20);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < 20; ++c)
      c0[size_t(r * 20 + c)] = full[size_t(r * 40 + c)],
                         c1[size_t(r * 20 + c)] = full[size_t(r * 40 + 20 + c)];
  std::vector<float> m0(n), s0(n), t0(n), m1(n), s1(n), t1(n);
  xent_stats(kCpu, m0.data(), s0.data(), t0.data(), c0.data(), targets.data(), n, 20, 0, 37);
  xent_stats(kCpu, m1.data(), s1.data(), t1.data(), c1.data(), targets.data(), n, 20, 20, 37);
  for (int64_t r = 0; r < n; ++r) {
    const double m = std::max(m0[r], m1[r]);
    const double s = s0[r] * std::exp(m0[r] - m) + s1[r] * std::exp(m1[r] - m);
    EXPECT_FLOAT_EQ(float(m), mx[r]);
    EXPECT_NEAR(s, se[r], 1e-5 * se[r]);
    EXPECT_EQ(t0[r] + t1[r], tl[r]);
  }
}

}  // namespace
}  // namespace mtron::kernels::test
