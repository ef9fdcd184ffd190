// make_nccl_comm for the programs linked with the CUDA emulation (mtron_cudasim,
// test_train_cudasim), in place of comm/no_nccl.cpp: the bootstrap Comm (MPI) itself, with the
// emulated device memory accessible during each of its calls, as NCCL reads and writes GPU
// buffers. So multi-rank --device cuda runs the trainer's NCCL code path on the emulation.
// Open MPI must not copy between processes outside their own calls (the receiver reading the
// sender's memory): run with OMPI_MCA_btl_vader_single_copy_mechanism=none.
#include <memory>

#include "mtron/comm/nccl.h"
#include "mtron/kernels/cuda/sim/sim.h"

namespace mtron {
namespace {

class DeviceRequest : public Request {
 public:
  explicit DeviceRequest(std::unique_ptr<Request> r) : r_(std::move(r)) {}
  ~DeviceRequest() override {
    const sim::DeviceAccess access;
    r_.reset();
  }
  void wait() override {
    const sim::DeviceAccess access;
    r_->wait();
  }
  bool test() override {
    const sim::DeviceAccess access;
    return r_->test();
  }

 private:
  std::unique_ptr<Request> r_;
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
    return request([&] { return c_->iall_reduce(buf, count, t, op); });
  }
  std::unique_ptr<Request> ireduce_scatter(
      const void* send, void* recv, int64_t count, DType t, ReduceOp op) override {
    return request([&] { return c_->ireduce_scatter(send, recv, count, t, op); });
  }
  std::unique_ptr<Request> iall_gather(const void* send,
                                       void* recv,
                                       int64_t count,
                                       DType t) override {
    return request([&] { return c_->iall_gather(send, recv, count, t); });
  }
  std::unique_ptr<Request> isend(
      const void* buf, int64_t count, DType t, int peer, int tag) override {
    return request([&] { return c_->isend(buf, count, t, peer, tag); });
  }
  std::unique_ptr<Request> irecv(void* buf, int64_t count, DType t, int peer, int tag) override {
    return request([&] { return c_->irecv(buf, count, t, peer, tag); });
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
  template <typename F>
  std::unique_ptr<Request> request(F&& f) {
    const sim::DeviceAccess access;
    auto r = std::make_unique<DeviceRequest>(f());
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
