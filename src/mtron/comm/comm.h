// defines: ReduceOp, Request, Comm
//
// The communication interface every parallel feature is written against (design.md, "comm").
// Backends: single process (single.h), MPI (mpi.h), NCCL (with the CUDA backend). A group of
// size 1 returns immediately (or copies, for out-of-place calls). Collectives are blocking;
// the i* variants return a Request to wait() on, for overlapping communication with compute.
//
// Every rank of a group must make the same collective calls in the same order (as MPI and NCCL
// require). Buffers are host or device memory according to the backend.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "mtron/core/dtype.h"

namespace mtron {

enum class ReduceOp { kSum, kMax, kMin };

class Request {
 public:
  virtual ~Request() = default;
  virtual void wait() = 0;
};

class Comm {
 public:
  virtual ~Comm() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;

  // In place over count elements.
  virtual void all_reduce(void* buf, int64_t count, DType t, ReduceOp op) = 0;
  // recv holds size() * count elements, rank-major; send may be recv + rank() * count.
  virtual void all_gather(const void* send, void* recv, int64_t count, DType t) = 0;
  // send holds size() * count elements; rank r receives the reduction of block r.
  virtual void reduce_scatter(
      const void* send, void* recv, int64_t count, DType t, ReduceOp op) = 0;
  // Counts and displacements in elements, one per rank.
  virtual void all_to_all_v(const void* send,
                            const int64_t* send_counts,
                            const int64_t* send_displs,
                            void* recv,
                            const int64_t* recv_counts,
                            const int64_t* recv_displs,
                            DType t) = 0;
  virtual void broadcast(void* buf, int64_t count, DType t, int root) = 0;
  virtual void send(const void* buf, int64_t count, DType t, int peer, int tag) = 0;
  virtual void recv(void* buf, int64_t count, DType t, int peer, int tag) = 0;
  virtual void barrier() = 0;

  virtual std::unique_ptr<Request> iall_reduce(void* buf, int64_t count, DType t, ReduceOp op) = 0;
  virtual std::unique_ptr<Request> ireduce_scatter(
      const void* send, void* recv, int64_t count, DType t, ReduceOp op) = 0;
  virtual std::unique_ptr<Request> iall_gather(const void* send,
                                               void* recv,
                                               int64_t count,
                                               DType t) = 0;
  virtual std::unique_ptr<Request> isend(
      const void* buf, int64_t count, DType t, int peer, int tag) = 0;
  virtual std::unique_ptr<Request> irecv(void* buf, int64_t count, DType t, int peer, int tag) = 0;

  // Ranks with the same color form a new group, ordered by key (then by rank).
  virtual std::unique_ptr<Comm> split(int color, int key) = 0;

  // Typed conveniences.
  void all_reduce(float* x, int64_t n, ReduceOp op = ReduceOp::kSum) {
    all_reduce(x, n, DType::kF32, op);
  }
  double all_reduce_sum(double x);
  double all_reduce_max(double x);

  // Bytes this rank has sent through this communicator (payload, for the bandwidth benchmarks).
  int64_t bytes_sent() const { return bytes_sent_; }

 protected:
  int64_t bytes_sent_ = 0;
};

}  // namespace mtron
