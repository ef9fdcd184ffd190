// LayerNorm and RMSNorm: CPU against the reference (forward, saved statistics, backward with
// += semantics), and the reference backward against float64 finite differences.
#include "kernel_test_util.h"
#include "mtron/kernels/norm.h"
#include "mtron/kernels/ref/ref_ops.h"

namespace mtron::kernels::test {
namespace {

const int64_t kRows[] = {1, 31, 32, 33, 130};
const int64_t kCols[] = {1, 31, 32, 33, 768};

TEST(LayerNorm, MatchesReference) {
  for (int64_t N : kRows)
    for (int64_t C : kCols) {
      auto x = randn(N * C, 1, 2.0f), w = randn(C, 2), b = randn(C, 3), dy = randn(N * C, 4);
      for (size_t i = 0; i < x.size(); ++i) x[i] += 0.5f;  // a non-zero mean
      std::vector<float> y(size_t(N * C)), mean(static_cast<size_t>(N)),
          rstd(static_cast<size_t>(N));
      auto yr = y, meanr = mean, rstdr = rstd;
      layernorm_forward(kCpu, y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N,
                        C, 1e-5f);
      ref::layernorm_forward(yr.data(), meanr.data(), rstdr.data(), x.data(), w.data(), b.data(), N,
                             C, 1e-5f);
      expect_close(y, yr, 1e-5, 1e-5, "layernorm out");
      expect_close(mean, meanr, 1e-6, 1e-5, "layernorm mean");
      expect_close(rstd, rstdr, 0, 1e-5, "layernorm rstd");
      auto dx = randn(N * C, 5), dw = randn(C, 6), db = randn(C, 7);
      auto dxr = dx, dwr = dw, dbr = db;
      layernorm_backward(kCpu, dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(),
                         mean.data(), rstd.data(), N, C);
      ref::layernorm_backward(dxr.data(), dwr.data(), dbr.data(), dy.data(), x.data(), w.data(),
                              meanr.data(), rstdr.data(), N, C);
      expect_close(dx, dxr, 1e-5, 1e-4, "layernorm dinp");
      expect_close(dw, dwr, 1e-5 * std::sqrt(double(N)), 1e-4, "layernorm dweight");
      expect_close(db, dbr, 1e-5 * std::sqrt(double(N)), 1e-4, "layernorm dbias");
    }
}

TEST(RMSNorm, MatchesReference) {
  for (int64_t N : kRows)
    for (int64_t C : kCols) {
      auto x = randn(N * C, 1, 2.0f), w = randn(C, 2), dy = randn(N * C, 4);
      std::vector<float> y(size_t(N * C)), rstd(static_cast<size_t>(N));
      auto yr = y, rstdr = rstd;
      rmsnorm_forward(kCpu, y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
      ref::rmsnorm_forward(yr.data(), rstdr.data(), x.data(), w.data(), N, C, 1e-6f);
      expect_close(y, yr, 1e-5, 1e-5, "rmsnorm out");
      expect_close(rstd, rstdr, 0, 1e-5, "rmsnorm rstd");
      auto dx = randn(N * C, 5), dw = randn(C, 6);
      auto dxr = dx, dwr = dw;
      rmsnorm_backward(kCpu, dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N,
                       C);
      ref::rmsnorm_backward(dxr.data(), dwr.data(), dy.data(), x.data(), w.data(), rstdr.data(), N,
                            C);
      expect_close(dx, dxr, 1e-5, 1e-4, "rmsnorm dinp");
      expect_close(dw, dwr, 1e-5 * std::sqrt(double(N)), 1e-4, "rmsnorm dweight");
    }
}

TEST(LayerNorm, ReferenceBackwardMatchesFiniteDifferences) {
  const int64_t N = 3, C = 7;
  auto x = to_double(randn(N * C, 1)), w = to_double(randn(C, 2)), b = to_double(randn(C, 3));
  auto R = to_double(randn(N * C, 4));
  auto loss = [&] {
    std::vector<double> y(size_t(N * C)), mean(static_cast<size_t>(N)),
        rstd(static_cast<size_t>(N));
    ref::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                           1e-5);
    return project(y, R);
  };
  std::vector<double> y(size_t(N * C)), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N));
  ref::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                         1e-5);
  std::vector<double> dx(size_t(N * C), 0.0), dw(size_t(C), 0.0), db(size_t(C), 0.0);
  ref::layernorm_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(),
                          mean.data(), rstd.data(), N, C);
  expect_fd(x, dx, loss, "layernorm x");
  expect_fd(w, dw, loss, "layernorm weight");
  expect_fd(b, db, loss, "layernorm bias");
}

TEST(RMSNorm, ReferenceBackwardMatchesFiniteDifferences) {
  const int64_t N = 3, C = 7;
  auto x = to_double(randn(N * C, 1)), w = to_double(randn(C, 2)), R = to_double(randn(N * C, 4));
  auto loss = [&] {
    std::vector<double> y(size_t(N * C)), rstd(static_cast<size_t>(N));
    ref::rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6);
    return project(y, R);
  };
  std::vector<double> y(size_t(N * C)), rstd(static_cast<size_t>(N));
  ref::rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6);
  std::vector<double> dx(size_t(N * C), 0.0), dw(size_t(C), 0.0);
  ref::rmsnorm_backward(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), N, C);
  expect_fd(x, dx, loss, "rmsnorm x");
  expect_fd(w, dw, loss, "rmsnorm weight");
}

}  // namespace
}  // namespace mtron::kernels::test
