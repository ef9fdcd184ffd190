// defines: TensorParallel, the TP/SP region mappings as conjugate pairs
//
// Megatron's mappings (tensor_parallel/mappings.py), written by hand as forward/backward pairs
// over token rows (sequence-major, rows = S*B, C channels per row):
//
//   entering a column-parallel layer        leaving a row-parallel layer
//   no SP: copy_to_tp       (id / all-reduce)     reduce_from_tp        (all-reduce / id)
//   SP:    gather_from_sp   (all-gather / r-s)    reduce_scatter_to_sp  (r-s / all-gather)
//
// enter_* and exit_* pick the pair from tp.sequence_parallel, so layers are written once. With
// SP the "local" side holds rows/tp rows (this rank's contiguous block of the sequence); without
// it both sides hold all rows and the buffers may be the same.
#pragma once

#include <cstdint>

#include "mtron/comm/comm.h"

namespace mtron::parallel {

struct TensorParallel {
  Comm* comm = nullptr;  // the TP group
  int64_t rank = 0;
  int64_t size = 1;
  bool sequence_parallel = false;

  // Rows this rank holds in the sequence-parallel region for `rows` full rows.
  int64_t sp_rows(int64_t rows) const { return sequence_parallel ? rows / size : rows; }
};

// full[rows, C] <- local[sp_rows, C]   (SP: all-gather; else full must equal local)
void enter_tp_forward(
    const TensorParallel& tp, float* full, const float* local, int64_t rows, int64_t C);
// dlocal[sp_rows, C] <- dfull[rows, C] (SP: reduce-scatter; else all-reduce in place, dlocal ==
// dfull)
void enter_tp_backward(
    const TensorParallel& tp, float* dlocal, float* dfull, int64_t rows, int64_t C);
// local[sp_rows, C] <- partial[rows, C] (SP: reduce-scatter; else all-reduce in place)
void exit_tp_forward(
    const TensorParallel& tp, float* local, float* partial, int64_t rows, int64_t C);
// dpartial[rows, C] <- dlocal[sp_rows, C] (SP: all-gather; else identity, dpartial == dlocal)
void exit_tp_backward(
    const TensorParallel& tp, float* dpartial, const float* dlocal, int64_t rows, int64_t C);

}  // namespace mtron::parallel
