#include "mtron/parallel/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "mtron/core/error.h"
#include "mtron/kernels/device.h"
#include "mtron/kernels/elementwise.h"
#include "mtron/kernels/xent.h"

namespace mtron::parallel {

VocabParallelCrossEntropy::VocabParallelCrossEntropy(
    const kernels::Ctx& k, const TensorParallel& tp, Arena& arena, int64_t max_rows, float scale)
    : k_(k),
      tp_(tp),
      R_(max_rows),
      stats_(arena.alloc<float>(4 * max_rows)),
      host_(size_t(3 * max_rows)),
      global_(tp.size > 1 ? size_t(max_rows) : 0) {
  kernels::fill(k_, stats_ + 3 * R_, scale, R_);
}

double VocabParallelCrossEntropy::forward(const float* logits,
                                          const int32_t* targets,
                                          int64_t n,
                                          int64_t Vl,
                                          int64_t col_start,
                                          int64_t vocab_valid,
                                          float* losses) {
  MT_ASSERT(n <= R_, "a cross-entropy chunk of ", n, " rows exceeds ", R_);
  kernels::xent_stats(k_, stats_, stats_ + R_, stats_ + 2 * R_, logits, targets, n, Vl, col_start,
                      vocab_valid);
  kernels::copy_to_host(k_, host_.data(), stats_, int64_t(sizeof(float)) * 3 * R_);
  float* row_max = host_.data();
  float* row_sum = row_max + R_;
  float* row_tgt = row_max + 2 * R_;
  if (tp_.size > 1) {
    // The global max, then every rank rescales its sum of exp to it; sums and target logits add.
    std::copy(row_max, row_max + n, global_.data());
    tp_.comm->all_reduce(global_.data(), n, ReduceOp::kMax);
    for (int64_t i = 0; i < n; ++i) {
      row_sum[i] = row_max[i] == -std::numeric_limits<float>::infinity()
                       ? 0.0f
                       : row_sum[i] * std::exp(row_max[i] - global_[size_t(i)]);
      row_max[i] = global_[size_t(i)];
    }
    tp_.comm->all_reduce(row_sum, n);
    tp_.comm->all_reduce(row_tgt, n);
    kernels::copy_from_host(k_, stats_, host_.data(), int64_t(sizeof(float)) * 2 * R_);
  }
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double l = std::log(double(row_sum[i])) + double(row_max[i]) - double(row_tgt[i]);
    sum += l;
    if (losses) losses[i] = float(l);
  }
  return sum;
}

void VocabParallelCrossEntropy::backward(float* dlogits,
                                         const float* logits,
                                         const int32_t* targets,
                                         int64_t n,
                                         int64_t Vl,
                                         int64_t col_start,
                                         int64_t vocab_valid) const {
  kernels::xent_backward(k_, dlogits, logits, targets, stats_, stats_ + R_, stats_ + 3 * R_, n, Vl,
                         col_start, vocab_valid);
}

}  // namespace mtron::parallel
