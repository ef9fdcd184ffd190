// Embedding lookup and backward: against the reference, out-of-shard ids, determinism across
// thread counts, and the backward as the adjoint of the forward (finite differences).
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

TEST(Embedding, ForwardAndBackwardMatchReference) {
  const int64_t V = 37;
  for (int64_t N : {1, 31, 32, 33, 300})
    for (int64_t C : {1, 31, 32, 33, 100})
      for (int64_t row_start : {0, 10}) {
        const int64_t rows = 20;  // this shard holds global rows [row_start, row_start + 20)
        auto ids = random_ids(N, int32_t(V), uint64_t(N * C));
        auto table = randn(rows * C, 1), out = randn(N * C, 2), dout = randn(N * C, 3);
        for (bool acc : {false, true}) {
          auto got = out, want = out;
          embedding_forward(kCpu, got.data(), ids.data(), table.data(), N, C, row_start, rows, acc);
          ref::embedding_forward(want.data(), ids.data(), table.data(), N, C, row_start, rows, acc);
          expect_close(got, want, 0, 0, "embedding_forward");
        }
        auto dt = randn(rows * C, 4), dtw = dt;
        embedding_backward(kCpu, dt.data(), dout.data(), ids.data(), N, C, row_start, rows);
        ref::embedding_backward(dtw.data(), dout.data(), ids.data(), N, C, row_start, rows);
        expect_close(dt, dtw, 1e-5, 1e-5, "embedding_backward");
      }
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
