// GELU (tanh), squared ReLU and SwiGLU: reference backward against finite differences, and GELU
// and squared ReLU against PyTorch's values (the CPU kernels against the reference: the op
// table, test_op_table.cpp).
#include "kernel_test_util.h"
#include "mtron/kernels/activation.h"
#include "mtron/kernels/ref/ref_ops.h"

namespace mtron::kernels::test {
namespace {

TEST(Gelu, KnownValues) {
  // torch.nn.functional.gelu(torch.tensor([-3., -1., 0.5, 2.]), approximate='tanh')
  const std::vector<float> x = {-3.0f, -1.0f, 0.5f, 2.0f};
  const std::vector<float> want = {-0.0036374f, -0.1588080f, 0.3457140f, 1.9545977f};
  std::vector<float> y(4);
  gelu_forward(kCpu, y.data(), x.data(), 4);
  expect_close(y, want, 1e-6, 1e-5, "gelu values");
}

TEST(Gelu, ReferenceBackwardMatchesFiniteDifferences) {
  const int64_t n = 40;
  auto x = to_double(randn(n, 1, 3.0f)), R = to_double(randn(n, 2));
  std::vector<double> dx(static_cast<size_t>(n));
  ref::gelu_backward(dx.data(), x.data(), R.data(), n);
  expect_fd(
      x, dx,
      [&] {
        std::vector<double> y(static_cast<size_t>(n));
        ref::gelu_forward(y.data(), x.data(), n);
        return project(y, R);
      },
      "gelu x");
}

TEST(Relu2, KnownValues) {
  // torch.pow(torch.nn.functional.relu(torch.tensor([-3., -1., 0.5, 2.])), 2) (Megatron's
  // squared_relu)
  const std::vector<float> x = {-3.0f, -1.0f, 0.5f, 2.0f};
  const std::vector<float> want = {0.0f, 0.0f, 0.25f, 4.0f};
  std::vector<float> y(4), dy(4);
  relu2_forward(kCpu, y.data(), x.data(), 4);
  expect_close(y, want, 0, 0, "relu2 values");
  const std::vector<float> ones(4, 1.0f), dwant = {0.0f, 0.0f, 1.0f, 4.0f};  // 2 max(x, 0)
  relu2_backward(kCpu, dy.data(), x.data(), ones.data(), 4);
  expect_close(dy, dwant, 0, 0, "relu2 derivative");
}

TEST(Relu2, ReferenceBackwardMatchesFiniteDifferences) {
  const int64_t n = 40;
  auto x = to_double(randn(n, 1, 3.0f)), R = to_double(randn(n, 2));
  std::vector<double> dx(static_cast<size_t>(n));
  ref::relu2_backward(dx.data(), x.data(), R.data(), n);
  expect_fd(
      x, dx,
      [&] {
        std::vector<double> y(static_cast<size_t>(n));
        ref::relu2_forward(y.data(), x.data(), n);
        return project(y, R);
      },
      "relu2 x");
}

TEST(SwiGLU, ReferenceBackwardMatchesFiniteDifferences) {
  const int64_t N = 3, F = 5;
  auto x = to_double(randn(N * 2 * F, 1, 2.0f)), R = to_double(randn(N * F, 2));
  std::vector<double> dx(size_t(N * 2 * F));
  ref::swiglu_backward(dx.data(), x.data(), R.data(), N, F);
  expect_fd(
      x, dx,
      [&] {
        std::vector<double> y(size_t(N * F));
        ref::swiglu_forward(y.data(), x.data(), N, F);
        return project(y, R);
      },
      "swiglu inp");
}

}  // namespace
}  // namespace mtron::kernels::test
