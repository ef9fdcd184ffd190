// make_nccl_comm for the programs linked with the CUDA emulation (mtron_cudasim,
// test_train_cudasim), in place of comm/no_nccl.cpp: the bootstrap Comm (MPI) itself, with the
// emulated device memory accessible during each of its blocking calls, as NCCL reads and writes
// GPU buffers, and its non-blocking calls staged through host copies (DeviceRequest). So
// multi-rank --device cuda runs the trainer's NCCL code path on the emulation. Open MPI must not
// copy between processes outside their own calls (the receiver reading the sender's memory):
// run with OMPI_MCA_btl_vader_single_copy_mechanism=none.
#include <cstring>
#include <memory>
#include <vector>

#include "mtron/comm/nccl.h"
#include "mtron/core/error.h"
#include "mtron/kernels/cuda/sim/sim.h"

namespace mtron {
namespace {

// A device buffer of a non-blocking transfer.
struct DeviceBuf {
  const void* dev;
  size_t bytes;
  bool in, out;  // read by the transfer / written by it
};

// A non-blocking transfer staged through host copies of its device buffers: the inputs are
// copied when it starts, the outputs back when it completes. So the bootstrap Comm never
// touches device memory outside a DeviceAccess (MPI progresses a pending transfer inside any
// later call, such as a host all-reduce of the loss), as NCCL on a GPU never touches host
// memory. Until then the device buffers are pinned (sim.h): freeing one first, which on a GPU
// would hand memory still in use by the NCCL stream to the next allocation, aborts.
class DeviceRequest : public Request {
 public:
  DeviceRequest(const char* what, std::vector<DeviceBuf> bufs) : bufs_(std::move(bufs)) {
    for (const DeviceBuf& b : bufs_)  // all checked before any is pinned
      MT_CHECK(b.bytes == 0 || sim::is_device_memory(b.dev), "NCCL ", what, " needs GPU buffers");
    const sim::DeviceAccess access;
    host_.resize(bufs_.size());
    for (size_t i = 0; i < bufs_.size(); ++i) {
      const DeviceBuf& b = bufs_[i];
      host_[i].resize(b.bytes);
      if (b.in && b.bytes > 0) std::memcpy(host_[i].data(), b.dev, b.bytes);
      pins_.push_back(sim::pin_in_flight(b.dev, b.bytes));
    }
  }
  ~DeviceRequest() override {
    if (!done_) {  // destroyed before it was waited for: wait, as comm/nccl.cpp's requests do
      try {
        wait();
      } catch (...) {
      }
    }
    for (uint64_t p : pins_) sim::unpin_in_flight(p);
  }
  void* host(size_t i) { return host_[i].data(); }
  void start(std::unique_ptr<Request> r) { r_ = std::move(r); }

  void wait() override {
    if (done_) return;
    r_->wait();
    finish();
  }
  bool test() override {
    if (done_) return true;
    if (!r_->test()) return false;
    finish();
    return true;
  }

 private:
  void finish() {
    const sim::DeviceAccess access;
    for (size_t i = 0; i < bufs_.size(); ++i)
      if (bufs_[i].out && bufs_[i].bytes > 0)
        std::memcpy(const_cast<void*>(bufs_[i].dev), host_[i].data(), bufs_[i].bytes);
    for (uint64_t p : pins_) sim::unpin_in_flight(p);
    pins_.clear();
    done_ = true;
  }

  std::vector<DeviceBuf> bufs_;
  std::vector<std::vector<char>> host_;
  std::vector<uint64_t> pins_;
  std::unique_ptr<Request> r_;
  bool done_ = false;
};

// Every call of `inner` with the device memory accessible. Owns `inner` unless it is the
// bootstrap Comm.
class DeviceComm : public Comm {
 public:
  DeviceComm(Comm* inner, std::unique_ptr<Comm> owned) : c_(inner), owned_(std::move(owned)) {}

  int rank() const override { return c_->rank(); }
  int size() const override { return c_->size(); }
  std::string backend() const override { return "nccl-emulated(" + c_->backend() + ")"; }
  void all_reduce(void* buf, int64_t count, DType t, ReduceOp op) override {
    call([&] { c_->all_reduce(buf, count, t, op); });
  }
  void all_gather(const void* send, void* recv, int64_t count, DType t) override {
    call([&] { c_->all_gather(send, recv, count, t); });
  }
  void reduce_scatter(const void* send, void* recv, int64_t count, DType t, ReduceOp op) override {
    call([&] { c_->reduce_scatter(send, recv, count, t, op); });
  }
  void all_to_all_v_impl(const AllToAllV& a) override {
    call([&] {
      c_->all_to_all_v(a.send, a.send_counts, a.send_displs, a.recv, a.recv_counts, a.recv_displs,
                       a.t);
    });
  }
  void broadcast(void* buf, int64_t count, DType t, int root) override {
    call([&] { c_->broadcast(buf, count, t, root); });
  }
  void send(const void* buf, int64_t count, DType t, int peer, int tag) override {
    call([&] { c_->send(buf, count, t, peer, tag); });
  }
  void recv(void* buf, int64_t count, DType t, int peer, int tag) override {
    call([&] { c_->recv(buf, count, t, peer, tag); });
  }
  void barrier() override {
    call([&] { c_->barrier(); });
  }
  std::unique_ptr<Request> iall_reduce(void* buf, int64_t count, DType t, ReduceOp op) override {
    return request("iall_reduce", {{buf, bytes(count, t), true, true}},
                   [&](DeviceRequest& r) { return c_->iall_reduce(r.host(0), count, t, op); });
  }
  std::unique_ptr<Request> ireduce_scatter(
      const void* send, void* recv, int64_t count, DType t, ReduceOp op) override {
    return request(
        "ireduce_scatter",
        {{send, bytes(count, t) * size_t(size()), true, false},
         {recv, bytes(count, t), false, true}},
        [&](DeviceRequest& r) { return c_->ireduce_scatter(r.host(0), r.host(1), count, t, op); });
  }
  std::unique_ptr<Request> iall_gather(const void* send,
                                       void* recv,
                                       int64_t count,
                                       DType t) override {
    return request(
        "iall_gather",
        {{send, bytes(count, t), true, false},
         {recv, bytes(count, t) * size_t(size()), false, true}},
        [&](DeviceRequest& r) { return c_->iall_gather(r.host(0), r.host(1), count, t); });
  }
  std::unique_ptr<Request> isend(
      const void* buf, int64_t count, DType t, int peer, int tag) override {
    return request("isend", {{buf, bytes(count, t), true, false}},
                   [&](DeviceRequest& r) { return c_->isend(r.host(0), count, t, peer, tag); });
  }
  std::unique_ptr<Request> irecv(void* buf, int64_t count, DType t, int peer, int tag) override {
    return request("irecv", {{buf, bytes(count, t), false, true}},
                   [&](DeviceRequest& r) { return c_->irecv(r.host(0), count, t, peer, tag); });
  }
  std::unique_ptr<Comm> split(int color, int key) override {
    std::unique_ptr<Comm> c = c_->split(color, key);
    if (!c) return nullptr;
    Comm* raw = c.get();
    return std::make_unique<DeviceComm>(raw, std::move(c));
  }

 private:
  template <typename F>
  void call(F&& f) {
    const sim::DeviceAccess access;
    f();
    bytes_sent_ = c_->bytes_sent();
  }
  static size_t bytes(int64_t count, DType t) { return size_t(count) * dtype_size(t); }
  template <typename F>
  std::unique_ptr<Request> request(const char* what, std::vector<DeviceBuf> bufs, F&& f) {
    auto r = std::make_unique<DeviceRequest>(what, std::move(bufs));
    r->start(f(*r));
    bytes_sent_ = c_->bytes_sent();
    return r;
  }

  Comm* c_;
  std::unique_ptr<Comm> owned_;
};

}  // namespace

std::unique_ptr<Comm> make_nccl_comm(Comm& bootstrap, void*) {
  return std::make_unique<DeviceComm>(&bootstrap, nullptr);
}

}  // namespace mtron
