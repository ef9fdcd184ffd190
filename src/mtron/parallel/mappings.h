// defines: TensorParallel, the TP/SP region mappings as conjugate pairs, reduce_from_tp,
//          scatter_to_sp, gather_from_sp
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
//
// The vocabulary-parallel embedding's output (partial sums over the TP ranks' vocabulary shards)
// leaves through reduce_from_tp and, with SP, scatter_to_sp (Megatron's
// reduce_from_tensor_model_parallel_region and scatter_to_sequence_parallel_region); the
// backward of the scatter is gather_from_sp (gather_from_sequence_parallel_region).
#pragma once

#include <cstdint>

#include "mtron/comm/comm.h"
#include "mtron/kernels/ctx.h"

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

// x[n] summed over the TP group in place (nothing with TP 1).
void reduce_from_tp(const TensorParallel& tp, float* x, int64_t n);
// local[sp_rows, C] <- this rank's block of full[rows, C] (SP only; a copy on k's device).
void scatter_to_sp(const kernels::Ctx& k,
                   const TensorParallel& tp,
                   float* local,
                   const float* full,
                   int64_t rows,
                   int64_t C);
// full[rows, C] <- every rank's local[sp_rows, C] (SP only: all-gather).
void gather_from_sp(
    const TensorParallel& tp, float* full, const float* local, int64_t rows, int64_t C);

}  // namespace mtron::parallel
