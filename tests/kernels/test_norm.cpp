// LayerNorm and RMSNorm: the reference backward against float64 finite differences (the CPU
// kernels against the reference: the op table, test_op_table.cpp).
#include "kernel_test_util.h"
#include "mtron/kernels/norm.h"
#include "mtron/kernels/ref/ref_ops.h"

namespace mtron::kernels::test {
namespace {

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
