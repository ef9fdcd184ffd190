#include "mtron/parallel/mappings.h"

#include "mtron/core/error.h"
#include "mtron/kernels/elementwise.h"

namespace mtron::parallel {

void enter_tp_forward(
    const TensorParallel& tp, float* full, const float* local, int64_t rows, int64_t C) {
  if (tp.sequence_parallel) {
    tp.comm->all_gather(local, full, rows / tp.size * C, DType::kF32);
  } else {
    MT_ASSERT(full == local, "copy_to_tp: without SP the region shares its buffer");
  }
}

void enter_tp_backward(
    const TensorParallel& tp, float* dlocal, float* dfull, int64_t rows, int64_t C) {
  if (tp.sequence_parallel) {
    tp.comm->reduce_scatter(dfull, dlocal, rows / tp.size * C, DType::kF32, ReduceOp::kSum);
  } else {
    MT_ASSERT(dlocal == dfull, "copy_to_tp backward: without SP the region shares its buffer");
    if (tp.size > 1) tp.comm->all_reduce(dfull, rows * C);
  }
}

void exit_tp_forward(
    const TensorParallel& tp, float* local, float* partial, int64_t rows, int64_t C) {
  if (tp.sequence_parallel) {
    tp.comm->reduce_scatter(partial, local, rows / tp.size * C, DType::kF32, ReduceOp::kSum);
  } else {
    MT_ASSERT(local == partial, "reduce_from_tp: without SP the region shares its buffer");
    if (tp.size > 1) tp.comm->all_reduce(partial, rows * C);
  }
}

void exit_tp_backward(
    const TensorParallel& tp, float* dpartial, const float* dlocal, int64_t rows, int64_t C) {
  if (tp.sequence_parallel) {
    tp.comm->all_gather(dlocal, dpartial, rows / tp.size * C, DType::kF32);
  } else {
    MT_ASSERT(dpartial == dlocal,
              "reduce_from_tp backward: without SP the region shares its buffer");
  }
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
