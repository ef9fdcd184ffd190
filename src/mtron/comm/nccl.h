// defines: make_nccl_comm
//
// The NCCL backend of Comm (comm.h), for buffers in GPU memory, built with MTRON_CUDA.
//
// Bootstrap: make_nccl_comm is collective over an existing Comm (the MPI world, in practice):
// its rank 0 creates an NCCL unique id, broadcasts it over that Comm, and every rank joins the
// NCCL communicator with the same rank and size. Each rank uses the GPU its thread has selected
// (kernels::init_device, usually with the node-local rank). split() uses ncclCommSplit.
//
// Streams. Every NCCL operation of a communicator runs on that communicator's own stream (a
// high-priority non-blocking stream), in the order the calls were made, which is the same on
// every rank; NCCL gives no progress guarantee to two operations of one communicator running on
// different streams, so there is never more than one stream per communicator. The caller's
// compute stream (`stream`: kernels::default_stream(Device::kCUDA) for work queued through a
// Ctx without a stream) orders with it through events only, so communication overlaps compute:
// - an operation starts after everything already queued on the compute stream (its inputs);
// - a blocking call (all_reduce, send, ...) returns as soon as it is queued, with the compute
//   stream made to wait for it, so every kernel queued afterwards sees its result. The host does
//   not wait: read results through kernels::copy_to_host (which synchronises), as with any
//   kernel output. Megatron and PyTorch use NCCL the same way.
// - a non-blocking call (iall_reduce, ...) lets the compute stream run on; Request::wait() makes
//   the compute stream wait for it (still without blocking the host), Request::test() reports
//   whether it has finished on the GPU. This is how gradient reduction overlaps the backward.
//   Its buffers must stay allocated until the request has been waited for (or destroyed, which
//   waits): the caching allocator frees on the compute stream, which only the wait orders after
//   the communication (the CUDA emulation aborts on such a free, tests/train/sim_nccl.cpp).
// Host buffers: blocking calls, all_to_all_v among them, also accept host memory (e.g.
// Comm::all_reduce_sum(double), the expert dispatch's counts): the data is staged through GPU
// memory and the call then returns only when the result is on the host. Non-blocking calls need
// GPU memory.
//
// Point-to-point: NCCL has no tags; between two ranks of a communicator messages arrive in the
// order they were posted, whatever their tags, so matching sends and receives must be posted in
// the same order on both sides (the pipeline schedules do). isend/irecv are not launched at once:
// they collect into one NCCL group that starts at the first wait()/test() of any of them or at
// the next other call on this Comm, so an exchange that posts all its sends and receives before
// waiting (as Megatron's batched p2p does) cannot deadlock. A blocking send and recv that cross
// between two ranks deadlock, as with MPI for large messages.
//
// Types: every DType moves; reductions support fp32, fp64, bf16 (NCCL reduces bf16 pairwise in
// fp32, rounding back after each step, as comm.h's ReduceOp says), int32, int64 and uint8.
// Counts are 64-bit (no splitting). bytes_sent() counts as comm.h's table.
//
// Not yet: the collective watchdog of the MPI backend (a hung NCCL call shows up as a stream
// synchronisation that never returns).
//
// A build without CUDA links no_nccl.cpp, whose make_nccl_comm throws mtron::Error.
#pragma once

#include <memory>

#include "mtron/comm/comm.h"

namespace mtron {

std::unique_ptr<Comm> make_nccl_comm(Comm& bootstrap, void* stream);

}  // namespace mtron
