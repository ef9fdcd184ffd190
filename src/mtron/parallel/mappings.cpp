#include "mtron/parallel/mappings.h"

#include "mtron/core/error.h"
#include "mtron/kernels/elementwise.h"

namespace mtron::parallel {

namespace {

// Gathers the TP ranks' rows (`local`, rows / tp.size each) into `full` with sequence
// parallelism; without it the region already shares one buffer (`what` names the mapping).
void gather_tp_rows(const TensorParallel& tp,
                    float* full,
                    const float* local,
                    int64_t rows,
                    int64_t C,
                    const char* what) {
  if (tp.sequence_parallel) {
    tp.comm->all_gather(local, full, rows / tp.size * C, DType::kF32);
  } else {
    MT_ASSERT(full == local, what, ": without SP the region shares its buffer");
  }
}

// Sums `full` over TP: with sequence parallelism reduce-scattered into this rank's rows of
// `local`, without it all-reduced in place (`local` is the same buffer).
void sum_tp_rows(const TensorParallel& tp,
                 float* local,
                 float* full,
                 int64_t rows,
                 int64_t C,
                 const char* what) {
  if (tp.sequence_parallel) {
    tp.comm->reduce_scatter(full, local, rows / tp.size * C, DType::kF32, ReduceOp::kSum);
  } else {
    MT_ASSERT(local == full, what, ": without SP the region shares its buffer");
    if (tp.size > 1) tp.comm->all_reduce(full, rows * C);
  }
}

}  // namespace

void enter_tp_forward(
    const TensorParallel& tp, float* full, const float* local, int64_t rows, int64_t C) {
  gather_tp_rows(tp, full, local, rows, C, "copy_to_tp");
}

void enter_tp_backward(
    const TensorParallel& tp, float* dlocal, float* dfull, int64_t rows, int64_t C) {
  sum_tp_rows(tp, dlocal, dfull, rows, C, "copy_to_tp backward");
}

void exit_tp_forward(
    const TensorParallel& tp, float* local, float* partial, int64_t rows, int64_t C) {
  sum_tp_rows(tp, local, partial, rows, C, "reduce_from_tp");
}

void exit_tp_backward(
    const TensorParallel& tp, float* dpartial, const float* dlocal, int64_t rows, int64_t C) {
  gather_tp_rows(tp, dpartial, dlocal, rows, C, "reduce_from_tp backward");
}

void reduce_from_tp(const TensorParallel& tp, float* x, int64_t n) {
  if (tp.size > 1) tp.comm->all_reduce(x, n);
}

void scatter_to_sp(const kernels::Ctx& k,
                   const TensorParallel& tp,
                   float* local,
                   const float* full,
                   int64_t rows,
                   int64_t C) {
  MT_ASSERT(tp.sequence_parallel, "scatter_to_sp without sequence parallelism");
  const int64_t n = rows / tp.size * C;
  kernels::copy(k, local, full + tp.rank * n, int64_t(sizeof(float)) * n);
}

void gather_from_sp(
    const TensorParallel& tp, float* full, const float* local, int64_t rows, int64_t C) {
  MT_ASSERT(tp.sequence_parallel, "gather_from_sp without sequence parallelism");
  tp.comm->all_gather(local, full, rows / tp.size * C, DType::kF32);
}

}  // namespace mtron::parallel
