#include "mtron/comm/single.h"

#include <cstring>

#include "mtron/core/error.h"

namespace mtron {
namespace {

class DoneRequest final : public Request {
 public:
  void wait() override {}
  bool test() override { return true; }
};

class SingleComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "single"; }

  void all_reduce(void*, int64_t, DType, ReduceOp) override {}
  void all_gather(const void* send, void* recv, int64_t count, DType t) override {
    copy(send, recv, count, t);
  }
  void reduce_scatter(const void* send, void* recv, int64_t count, DType t, ReduceOp) override {
    copy(send, recv, count, t);
  }
  void all_to_all_v_impl(const AllToAllV& a) override {
    const size_t es = dtype_size(a.t);
    copy(static_cast<const char*>(a.send) + a.send_displs[0] * es,
         static_cast<char*>(a.recv) + a.recv_displs[0] * es, a.send_counts[0], a.t);
  }
  void broadcast(void*, int64_t, DType, int root) override {
    MT_ASSERT(root == 0, "broadcast root ", root, " in a group of one");
  }
  void send(const void*, int64_t, DType, int peer, int) override {
    MT_ASSERT(false, "send to rank ", peer, " in a group of one");
  }
  void recv(void*, int64_t, DType, int peer, int) override {
    MT_ASSERT(false, "recv from rank ", peer, " in a group of one");
  }
  void barrier() override {}

  std::unique_ptr<Request> iall_reduce(void*, int64_t, DType, ReduceOp) override {
    return std::make_unique<DoneRequest>();
  }
  std::unique_ptr<Request> ireduce_scatter(
      const void* send, void* recv, int64_t count, DType t, ReduceOp) override {
    copy(send, recv, count, t);
    return std::make_unique<DoneRequest>();
  }
  std::unique_ptr<Request> iall_gather(const void* send,
                                       void* recv,
                                       int64_t count,
                                       DType t) override {
    copy(send, recv, count, t);
    return std::make_unique<DoneRequest>();
  }
  std::unique_ptr<Request> isend(const void*, int64_t, DType, int peer, int) override {
    MT_ASSERT(false, "isend to rank ", peer, " in a group of one");
  }
  std::unique_ptr<Request> irecv(void*, int64_t, DType, int peer, int) override {
    MT_ASSERT(false, "irecv from rank ", peer, " in a group of one");
  }
  std::unique_ptr<Comm> split(int color, int) override {
    if (color < 0) return nullptr;
    return std::make_unique<SingleComm>();
  }

 private:
  static void copy(const void* src, void* dst, int64_t count, DType t) {
    if (src != dst) std::memmove(dst, src, size_t(count) * dtype_size(t));
  }
};

}  // namespace

std::unique_ptr<Comm> make_single_comm() {
  return std::make_unique<SingleComm>();
}

}  // namespace mtron
