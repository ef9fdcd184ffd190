// Embedding backward: determinism across thread counts, and the backward as the adjoint of the
// forward (finite differences). The kernels against the reference, out-of-shard ids included:
// the op table, test_op_table.cpp.
#include <omp.h>

#include "kernel_test_util.h"
#include "mtron/kernels/embedding.h"
#include "mtron/kernels/ref/ref_ops.h"

namespace mtron::kernels::test {
namespace {

std::vector<int32_t> random_ids(int64_t N, int32_t hi, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int32_t> d(0, hi - 1);
  std::vector<int32_t> ids(static_cast<size_t>(N));
  for (auto& i : ids) i = d(rng);
  return ids;
}

TEST(Embedding, BackwardIsBitwiseDeterministicAcrossThreadCounts) {
  const int64_t N = 4096, C = 768, V = 50;  // many repeats of each id
  auto ids = random_ids(N, int32_t(V), 5);
  auto dout = randn(N * C, 6);
  std::vector<float> d1(size_t(V * C), 0.0f), d2(size_t(V * C), 0.0f);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  embedding_backward(kCpu, d1.data(), dout.data(), ids.data(), N, C, 0, V);
  omp_set_num_threads(std::max(2, saved));
  embedding_backward(kCpu, d2.data(), dout.data(), ids.data(), N, C, 0, V);
  omp_set_num_threads(saved);
  EXPECT_EQ(d1, d2);
}

TEST(Embedding, BackwardMatchesFiniteDifferences) {
  const int64_t N = 9, C = 3, rows = 4;
  auto ids = random_ids(N, 6, 3);  // ids 4 and 5 fall outside the shard
  auto table = to_double(randn(rows * C, 1)), R = to_double(randn(N * C, 2));
  std::vector<double> dt(size_t(rows * C), 0.0);
  ref::embedding_backward(dt.data(), R.data(), ids.data(), N, C, 0, rows);
  expect_fd(
      table, dt,
      [&] {
        std::vector<double> out(size_t(N * C));
        ref::embedding_forward(out.data(), ids.data(), table.data(), N, C, 0, rows, false);
        return project(out, R);
      },
      "embedding table");
}

}  // namespace
}  // namespace mtron::kernels::test
