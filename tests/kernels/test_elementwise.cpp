// The elementwise reference backward against float64 finite differences (the CPU kernels against
// the reference: the op table, test_op_table.cpp).
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernel_test_util.h"
#include "mtron/kernels/elementwise.h"
#include "mtron/kernels/ref/ref_ops.h"

namespace mtron::kernels::test {
namespace {

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

}  // namespace
}  // namespace mtron::kernels::test
