#include "mtron/comm/nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

#include "mtron/core/error.h"

namespace mtron {
namespace {

[[noreturn]] void cuda_fail(const char* file, int line, const char* call, cudaError_t e) {
  detail::throw_internal(file, line, call,
                         str("failed: ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}
[[noreturn]] void nccl_fail(const char* file, int line, const char* call, ncclResult_t r) {
  detail::throw_internal(file, line, call, str("failed: ", ncclGetErrorString(r)));
}

#define CUDA_CHECK(call)                                             \
  do {                                                               \
    const cudaError_t e_ = (call);                                   \
    if (e_ != cudaSuccess) cuda_fail(__FILE__, __LINE__, #call, e_); \
  } while (0)
#define NCCL_CHECK(call)                                             \
  do {                                                               \
    const ncclResult_t r_ = (call);                                  \
    if (r_ != ncclSuccess) nccl_fail(__FILE__, __LINE__, #call, r_); \
  } while (0)

ncclDataType_t reduce_type(DType t) {
  switch (t) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF64:
      return ncclFloat64;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    case DType::kU8:
      return ncclUint8;
    case DType::kF16:
      return ncclFloat16;
    case DType::kU16:
      break;
  }
  MT_CHECK(false, "NCCL cannot reduce ", dtype_name(t),
           " (use float32, float64, bfloat16, int32, "
           "int64 or uint8)");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  return reduce_op_value(op, ncclSum, ncclMax, ncclMin);
}

size_t bytes_of(int64_t count, DType t) {
  return size_t(count) * dtype_size(t);
}

bool is_host(const void* p) {
  if (!p) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return true;
  }
  return a.type == cudaMemoryTypeHost || a.type == cudaMemoryTypeUnregistered;
}

cudaEvent_t new_event() {
  cudaEvent_t e;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

// The sends and receives posted by isend/irecv since the last launch (see nccl.h).
struct P2pBatch {
  struct Op {
    bool send;
    void* buf;
    size_t bytes;
    int peer;
  };
  std::vector<Op> ops;
  cudaEvent_t done = nullptr;  // set at launch, on the communicator's stream
  bool launched = false;
  ~P2pBatch() {
    if (done) cudaEventDestroy(done);
  }
};

class NcclComm;

// A completed-on-the-GPU marker: `done` is recorded on the communicator's stream after the
// operation. For deferred p2p operations the event belongs to their batch.
class NcclRequest final : public Request {
 public:
  NcclRequest(NcclComm* comm, cudaEvent_t done) : comm_(comm), done_(done) {}
  NcclRequest(NcclComm* comm, std::shared_ptr<P2pBatch> batch)
      : comm_(comm), batch_(std::move(batch)) {}
  ~NcclRequest() override;
  void wait() override;
  bool test() override;

 private:
  cudaEvent_t event();

  NcclComm* comm_;
  cudaEvent_t done_ = nullptr;  // owned when not from a batch
  std::shared_ptr<P2pBatch> batch_;
  bool waited_ = false;
};

class NcclComm final : public Comm {
 public:
  NcclComm(ncclComm_t comm, cudaStream_t compute) : comm_(comm), compute_(compute) {
    NCCL_CHECK(ncclCommUserRank(comm_, &rank_));
    NCCL_CHECK(ncclCommCount(comm_, &size_));
    int lo = 0, hi = 0;  // numerically lower is higher priority
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    // Non-blocking: ordered with the compute stream by events only (nccl.h).
    CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, hi));
  }

  ~NcclComm() override {
    if (std::uncaught_exceptions() == 0) {
      try {
        flush();
      } catch (...) {
      }
    }
    cudaStreamSynchronize(stream_);
    ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

  void all_reduce(void* buf, int64_t count, DType t, ReduceOp op) override {
    const size_t n = bytes_of(count, t);
    blocking({{buf, n, true, true}}, [&](void** p) {
      NCCL_CHECK(
          ncclAllReduce(p[0], p[0], size_t(count), reduce_type(t), nccl_op(op), comm_, stream_));
    });
    bytes_sent_ += 2 * (size_ - 1) * int64_t(n) / size_;
  }

  void all_gather(const void* send, void* recv, int64_t count, DType t) override {
    const size_t n = bytes_of(count, t);
    blocking(
        {{const_cast<void*>(send), n, true, false}, {recv, n * size_t(size_), false, true}},
        [&](void** p) { NCCL_CHECK(ncclAllGather(p[0], p[1], n, ncclUint8, comm_, stream_)); });
    bytes_sent_ += (size_ - 1) * int64_t(n);
  }

  void reduce_scatter(const void* send, void* recv, int64_t count, DType t, ReduceOp op) override {
    const size_t n = bytes_of(count, t);
    blocking({{const_cast<void*>(send), n * size_t(size_), true, false}, {recv, n, false, true}},
             [&](void** p) {
               NCCL_CHECK(ncclReduceScatter(p[0], p[1], size_t(count), reduce_type(t), nccl_op(op),
                                            comm_, stream_));
             });
    bytes_sent_ += (size_ - 1) * int64_t(n);
  }

  void all_to_all_v_impl(const AllToAllV& a) override {
    const size_t es = dtype_size(a.t);
    // The extent of each side's buffer: host buffers (the expert dispatch's counts) are staged.
    size_t send_bytes = 0, recv_bytes = 0;
    for (int r = 0; r < size_; ++r) {
      send_bytes = std::max(send_bytes, size_t(a.send_displs[r] + a.send_counts[r]) * es);
      recv_bytes = std::max(recv_bytes, size_t(a.recv_displs[r] + a.recv_counts[r]) * es);
    }
    blocking(
        {{const_cast<void*>(a.send), send_bytes, true, false}, {a.recv, recv_bytes, false, true}},
        [&](void** p) {
          const char* send = static_cast<const char*>(p[0]);
          char* recv = static_cast<char*>(p[1]);
          NCCL_CHECK(ncclGroupStart());
          for (int r = 0; r < size_; ++r) {
            if (r == rank_) continue;
            if (a.send_counts[r] > 0)
              NCCL_CHECK(ncclSend(send + a.send_displs[r] * int64_t(es),
                                  size_t(a.send_counts[r]) * es, ncclUint8, r, comm_, stream_));
            if (a.recv_counts[r] > 0)
              NCCL_CHECK(ncclRecv(recv + a.recv_displs[r] * int64_t(es),
                                  size_t(a.recv_counts[r]) * es, ncclUint8, r, comm_, stream_));
          }
          NCCL_CHECK(ncclGroupEnd());
          if (a.send_counts[rank_] > 0)
            CUDA_CHECK(cudaMemcpyAsync(recv + a.recv_displs[rank_] * int64_t(es),
                                       send + a.send_displs[rank_] * int64_t(es),
                                       size_t(a.send_counts[rank_]) * es, cudaMemcpyDeviceToDevice,
                                       stream_));
        });
    bytes_sent_ += a.sent * int64_t(es);
  }

  void broadcast(void* buf, int64_t count, DType t, int root) override {
    const size_t n = bytes_of(count, t);
    blocking({{buf, n, true, true}}, [&](void** p) {
      NCCL_CHECK(ncclBroadcast(p[0], p[0], n, ncclUint8, root, comm_, stream_));
    });
    bytes_sent_ += (size_ - 1) * int64_t(n) / size_;
  }

  void send(const void* buf, int64_t count, DType t, int peer, int) override {
    const size_t n = bytes_of(count, t);
    blocking({{const_cast<void*>(buf), n, true, false}},
             [&](void** p) { NCCL_CHECK(ncclSend(p[0], n, ncclUint8, peer, comm_, stream_)); });
    bytes_sent_ += int64_t(n);
  }

  void recv(void* buf, int64_t count, DType t, int peer, int) override {
    const size_t n = bytes_of(count, t);
    blocking({{buf, n, false, true}},
             [&](void** p) { NCCL_CHECK(ncclRecv(p[0], n, ncclUint8, peer, comm_, stream_)); });
  }

  void barrier() override {
    // A one-element all-reduce, then the host waits for it.
    void* dev = nullptr;
    CUDA_CHECK(cudaMallocAsync(&dev, sizeof(float), compute_));
    CUDA_CHECK(cudaMemsetAsync(dev, 0, sizeof(float), compute_));
    begin();
    NCCL_CHECK(ncclAllReduce(dev, dev, 1, ncclFloat32, ncclSum, comm_, stream_));
    join();
    CUDA_CHECK(cudaFreeAsync(dev, compute_));
    CUDA_CHECK(cudaStreamSynchronize(compute_));
  }

  std::unique_ptr<Request> iall_reduce(void* buf, int64_t count, DType t, ReduceOp op) override {
    MT_CHECK(!is_host(buf), "NCCL iall_reduce needs a GPU buffer");
    const int64_t n = int64_t(bytes_of(count, t));
    begin();
    NCCL_CHECK(ncclAllReduce(buf, buf, size_t(count), reduce_type(t), nccl_op(op), comm_, stream_));
    bytes_sent_ += 2 * (size_ - 1) * n / size_;
    return std::make_unique<NcclRequest>(this, record());
  }

  std::unique_ptr<Request> ireduce_scatter(
      const void* send, void* recv, int64_t count, DType t, ReduceOp op) override {
    MT_CHECK(!is_host(send) && !is_host(recv), "NCCL ireduce_scatter needs GPU buffers");
    begin();
    NCCL_CHECK(
        ncclReduceScatter(send, recv, size_t(count), reduce_type(t), nccl_op(op), comm_, stream_));
    bytes_sent_ += (size_ - 1) * int64_t(bytes_of(count, t));
    return std::make_unique<NcclRequest>(this, record());
  }

  std::unique_ptr<Request> iall_gather(const void* send,
                                       void* recv,
                                       int64_t count,
                                       DType t) override {
    MT_CHECK(!is_host(send) && !is_host(recv), "NCCL iall_gather needs GPU buffers");
    const size_t n = bytes_of(count, t);
    begin();
    NCCL_CHECK(ncclAllGather(send, recv, n, ncclUint8, comm_, stream_));
    bytes_sent_ += (size_ - 1) * int64_t(n);
    return std::make_unique<NcclRequest>(this, record());
  }

  std::unique_ptr<Request> isend(const void* buf, int64_t count, DType t, int peer, int) override {
    MT_CHECK(!is_host(buf), "NCCL isend needs a GPU buffer");
    const size_t n = bytes_of(count, t);
    bytes_sent_ += int64_t(n);
    return defer({true, const_cast<void*>(buf), n, peer});
  }

  std::unique_ptr<Request> irecv(void* buf, int64_t count, DType t, int peer, int) override {
    MT_CHECK(!is_host(buf), "NCCL irecv needs a GPU buffer");
    return defer({false, buf, bytes_of(count, t), peer});
  }

  std::unique_ptr<Comm> split(int color, int key) override {
    flush();
    ncclComm_t child = nullptr;
    NCCL_CHECK(ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child, nullptr));
    if (color < 0 || child == nullptr) return nullptr;
    return std::make_unique<NcclComm>(child, compute_);
  }

  // Launches the open batch of deferred sends and receives, if any.
  void flush() {
    if (!open_ || open_->ops.empty()) return;
    std::shared_ptr<P2pBatch> b = std::move(open_);
    open_.reset();
    begin();
    NCCL_CHECK(ncclGroupStart());
    for (const P2pBatch::Op& op : b->ops) {
      if (op.send)
        NCCL_CHECK(ncclSend(op.buf, op.bytes, ncclUint8, op.peer, comm_, stream_));
      else
        NCCL_CHECK(ncclRecv(op.buf, op.bytes, ncclUint8, op.peer, comm_, stream_));
    }
    NCCL_CHECK(ncclGroupEnd());
    b->done = record();
    b->launched = true;
  }

  // The compute stream waits for `done` (recorded on this communicator's stream).
  void join_event(cudaEvent_t done) { CUDA_CHECK(cudaStreamWaitEvent(compute_, done, 0)); }

 private:
  // One buffer of a blocking call: staged through GPU memory when it is host memory.
  struct Buf {
    void* ptr;
    size_t bytes;
    bool in, out;  // read by the operation / written by it
  };

  // Runs `op` (given the device pointers of `bufs`) on this communicator's stream, ordered after
  // the compute stream and before its later work. Host buffers are copied in, the results
  // copied back, and the call waits for them.
  template <typename F>
  void blocking(std::vector<Buf> bufs, F op) {
    std::vector<void*> dev(bufs.size());
    bool staged = false;
    for (size_t i = 0; i < bufs.size(); ++i) {
      dev[i] = bufs[i].ptr;
      if (!is_host(bufs[i].ptr) || bufs[i].bytes == 0) continue;
      staged = true;
      CUDA_CHECK(cudaMallocAsync(&dev[i], bufs[i].bytes, compute_));
      if (bufs[i].in)
        CUDA_CHECK(
            cudaMemcpyAsync(dev[i], bufs[i].ptr, bufs[i].bytes, cudaMemcpyHostToDevice, compute_));
    }
    begin();
    op(dev.data());
    join();
    if (!staged) return;
    for (size_t i = 0; i < bufs.size(); ++i) {
      if (dev[i] == bufs[i].ptr) continue;
      if (bufs[i].out)
        CUDA_CHECK(
            cudaMemcpyAsync(bufs[i].ptr, dev[i], bufs[i].bytes, cudaMemcpyDeviceToHost, compute_));
      CUDA_CHECK(cudaFreeAsync(dev[i], compute_));
    }
    CUDA_CHECK(cudaStreamSynchronize(compute_));
  }

  // Orders this communicator's stream after the work queued so far on the compute stream
  // (launching any deferred p2p first, to keep the call order).
  void begin() {
    flush();
    cudaEvent_t ready = new_event();
    CUDA_CHECK(cudaEventRecord(ready, compute_));
    CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
    CUDA_CHECK(cudaEventDestroy(ready));  // destruction is deferred until the event completes
  }
  // An event marking the end of the work queued so far on this communicator's stream.
  cudaEvent_t record() {
    cudaEvent_t done = new_event();
    CUDA_CHECK(cudaEventRecord(done, stream_));
    return done;
  }
  // The compute stream waits for the work queued so far on this communicator's stream.
  void join() {
    cudaEvent_t done = record();
    join_event(done);
    CUDA_CHECK(cudaEventDestroy(done));
  }

  std::unique_ptr<Request> defer(P2pBatch::Op op) {
    if (!open_) open_ = std::make_shared<P2pBatch>();
    open_->ops.push_back(op);
    return std::make_unique<NcclRequest>(this, open_);
  }

  ncclComm_t comm_;
  cudaStream_t compute_;
  cudaStream_t stream_ = nullptr;
  int rank_ = 0, size_ = 1;
  std::shared_ptr<P2pBatch> open_;
};

cudaEvent_t NcclRequest::event() {
  if (!batch_) return done_;
  if (!batch_->launched) comm_->flush();
  return batch_->done;
}

NcclRequest::~NcclRequest() {
  // Not waited on: wait (so the compute stream never runs ahead of buffers in flight), except
  // during unwinding, when the process is about to abort.
  if (!waited_ && std::uncaught_exceptions() == 0) {
    try {
      wait();
    } catch (...) {
    }
  }
  if (done_) cudaEventDestroy(done_);
}

void NcclRequest::wait() {
  if (waited_) return;
  comm_->join_event(event());
  waited_ = true;
}

bool NcclRequest::test() {
  const cudaError_t e = cudaEventQuery(event());
  if (e == cudaErrorNotReady) return false;
  CUDA_CHECK(e);
  return true;
}

}  // namespace

std::unique_ptr<Comm> make_nccl_comm(Comm& bootstrap, void* stream) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (bootstrap.rank() == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  bootstrap.broadcast(&id, int64_t(sizeof id), DType::kU8, 0);
  ncclComm_t comm = nullptr;
  NCCL_CHECK(ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank()));
  auto c = std::make_unique<NcclComm>(comm, static_cast<cudaStream_t>(stream));
  c->set_name(bootstrap.name());
  return c;
}

}  // namespace mtron
