// defines: ReduceOp, reduce_op_value, Request, Comm
//
// The communication interface every parallel feature is written against.
// Backends: single process (single.h), MPI (mpi.h), NCCL (with the CUDA backend). A group of
// size 1 returns immediately (or copies, for out-of-place calls). Collectives are blocking;
// the i* variants return a Request to wait() on, for overlapping communication with compute.
//
// Every rank of a group must make the same collective calls in the same order (as MPI and NCCL
// require). Buffers are host or device memory according to the backend. Counts are elements of
// the given DType and may exceed INT_MAX (the MPI backend splits such calls).
//
// Threads: only the thread that created the world Comm may call it (MPI_THREAD_FUNNELED). A
// Request must be completed (or destroyed) before its Comm is destroyed.
//
// Bytes sent (bytes_sent()): each call adds this rank's share of the payload that the operation
// must move, independent of the algorithm the backend picks, so benchmarks can compare a step's
// total with the analytic volume of a layout. With p = size(), e = bytes per element:
//   all_reduce      (count)        2(p-1)/p * count*e   (reduce-scatter + all-gather)
//   all_gather      (count/rank)   (p-1) * count*e      (= (p-1)/p of the gathered bytes)
//   reduce_scatter  (count/rank)   (p-1) * count*e      (= (p-1)/p of the input bytes)
//   all_to_all_v                   sum over peers r != rank() of send_counts[r]*e
//   broadcast       (count)        (p-1)/p * count*e on every rank (the average share of the
//                                  (p-1)*count*e that must reach the non-roots)
//   send / isend    (count)        count*e;  recv, barrier, split: 0
// Fractions round down. A group of one therefore counts 0 for everything.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "mtron/core/dtype.h"
#include "mtron/core/error.h"

namespace mtron {

// bf16 reductions accumulate each element pair in fp32 and round back to bf16 (round to nearest
// even) after every pairwise step, so a p-rank sum carries up to p-1 bf16 roundings and depends
// on the backend's reduction order. Reduce in fp32 where that matters (gradients do).
enum class ReduceOp { kSum, kMax, kMin };

// A backend's value for op (its sum, max or min operation).
template <typename T>
T reduce_op_value(ReduceOp op, T sum, T max, T min) {
  const T values[] = {sum, max, min};  // ReduceOp's order
  MT_ASSERT(int(op) >= 0 && int(op) < 3, "unknown reduce op ", int(op));
  return values[int(op)];
}

class Request {
 public:
  // Destroying a request that was not waited on waits for it (so buffers stay valid), except
  // during stack unwinding, where it is abandoned: the process is about to abort.
  virtual ~Request() = default;
  virtual void wait() = 0;
  // True once the operation has completed (wait() then returns at once). Also drives progress:
  // Open MPI advances non-blocking collectives only inside MPI calls, so a long computation that
  // overlaps one should call test() now and then.
  virtual bool test() = 0;
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
  // send holds size() * count elements; rank r receives the reduction of block r. recv must not
  // overlap send.
  virtual void reduce_scatter(
      const void* send, void* recv, int64_t count, DType t, ReduceOp op) = 0;
  // Counts and displacements in elements, one per rank. Counts may be zero; each pair's
  // send_counts[j] on rank i must equal recv_counts[i] on rank j. This rank's counts are checked
  // here (none negative, as many to itself as from itself: mtron::InternalError otherwise),
  // then the backend's all_to_all_v_impl moves the data.
  void all_to_all_v(const void* send,
                    const int64_t* send_counts,
                    const int64_t* send_displs,
                    void* recv,
                    const int64_t* recv_counts,
                    const int64_t* recv_displs,
                    DType t);
  virtual void broadcast(void* buf, int64_t count, DType t, int root) = 0;
  // Messages between a pair of ranks with the same tag arrive in the order they were sent.
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

  // Collective over this group: ranks with the same color form a new group, ordered by key (then
  // by rank). A rank passing a negative color joins no group and gets nullptr.
  virtual std::unique_ptr<Comm> split(int color, int key) = 0;

  // Typed conveniences.
  void all_reduce(float* x, int64_t n, ReduceOp op = ReduceOp::kSum) {
    all_reduce(x, n, DType::kF32, op);
  }
  double all_reduce_sum(double x);
  double all_reduce_max(double x);

  // Bytes this rank has sent through this communicator (see the table above).
  int64_t bytes_sent() const { return bytes_sent_; }

  // The group's name ("tp", "dp-cp", ...) for error and timeout messages; "" until set.
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }

 protected:
  // The arguments of an all_to_all_v whose counts were checked; `sent`: the elements this rank
  // sends to the other ranks.
  struct AllToAllV {
    const void* send;
    const int64_t* send_counts;
    const int64_t* send_displs;
    void* recv;
    const int64_t* recv_counts;
    const int64_t* recv_displs;
    DType t;
    int64_t sent;
  };
  virtual void all_to_all_v_impl(const AllToAllV& a) = 0;

  int64_t bytes_sent_ = 0;
  std::string name_;
};

}  // namespace mtron
