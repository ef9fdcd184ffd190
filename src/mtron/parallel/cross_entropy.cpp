#include "mtron/parallel/cross_entropy.h"

#include "mtron/core/error.h"
#include "mtron/kernels/elementwise.h"
#include "mtron/kernels/xent.h"

namespace mtron::parallel {

VocabParallelCrossEntropy::VocabParallelCrossEntropy(
    const kernels::Ctx& k, const TensorParallel& tp, Arena& arena, int64_t max_rows, float scale)
    : k_(k),
      tp_(tp),
      R_(max_rows),
      scale_(scale),
      stats_(arena.alloc<float>(4 * max_rows)),
      global_(tp.size > 1 ? arena.alloc<float>(max_rows) : nullptr) {
  kernels::fill(k_, stats_ + 3 * R_, scale, R_);
}

template <typename L>
void VocabParallelCrossEntropy::forward(const L* logits,
                                        const int32_t* targets,
                                        int64_t n,
                                        int64_t Vl,
                                        int64_t col_start,
                                        int64_t vocab_valid,
                                        double* loss_sum,
                                        const float* row_mask) {
  MT_ASSERT(n <= R_, "a cross-entropy chunk of ", n, " rows exceeds ", R_);
  float* row_max = stats_;
  float* row_sum = stats_ + R_;
  float* row_tgt = stats_ + 2 * R_;
  kernels::xent_stats(k_, row_max, row_sum, row_tgt, logits, targets, n, Vl, col_start,
                      vocab_valid);
  if (tp_.size > 1) {
    // The global max, then every rank rescales its sum of exp to it; sums and target logits add.
    kernels::copy(k_, global_, row_max, int64_t(sizeof(float)) * n);
    tp_.comm->all_reduce(global_, n, ReduceOp::kMax);
    kernels::xent_rescale(k_, row_max, row_sum, global_, n);
    tp_.comm->all_reduce(row_sum, n);
    tp_.comm->all_reduce(row_tgt, n);
  }
  kernels::xent_loss_sum(k_, loss_sum, row_max, row_sum, row_tgt, row_mask, n);
  if (row_mask) {  // the rows' gradient scales: scale x 0 or 1, exactly
    kernels::copy(k_, stats_ + 3 * R_, row_mask, int64_t(sizeof(float)) * n);
    kernels::scale_inplace(k_, stats_ + 3 * R_, scale_, n);
  }
}
template void VocabParallelCrossEntropy::forward(
    const float*, const int32_t*, int64_t, int64_t, int64_t, int64_t, double*, const float*);
template void VocabParallelCrossEntropy::forward(
    const bf16*, const int32_t*, int64_t, int64_t, int64_t, int64_t, double*, const float*);

template <typename T, typename L>
void VocabParallelCrossEntropy::backward(T* dlogits,
                                         const L* logits,
                                         const int32_t* targets,
                                         int64_t n,
                                         int64_t Vl,
                                         int64_t col_start,
                                         int64_t vocab_valid) const {
  kernels::xent_backward(k_, dlogits, logits, targets, stats_, stats_ + R_, stats_ + 3 * R_, n, Vl,
                         col_start, vocab_valid);
}
template void VocabParallelCrossEntropy::backward(
    float*, const float*, const int32_t*, int64_t, int64_t, int64_t, int64_t) const;
template void VocabParallelCrossEntropy::backward(
    bf16*, const float*, const int32_t*, int64_t, int64_t, int64_t, int64_t) const;
template void VocabParallelCrossEntropy::backward(
    bf16*, const bf16*, const int32_t*, int64_t, int64_t, int64_t, int64_t) const;

}  // namespace mtron::parallel
