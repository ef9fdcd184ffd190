#include "mtron/parallel/mappings.h"

#include "mtron/core/error.h"

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

}  // namespace mtron::parallel
