#include "mtron/comm/mpi.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>
#include <vector>

#include "mtron/core/error.h"

namespace mtron {
namespace detail {

struct MpiShared {
  Watchdog watchdog;
  int64_t max_count = INT_MAX;
  MPI_Op bf16_sum = MPI_OP_NULL;
  MPI_Op bf16_max = MPI_OP_NULL;
  MPI_Op bf16_min = MPI_OP_NULL;
  MPI_Comm error_comm = MPI_COMM_NULL;  // the fatal-error vote's own communicator
};

}  // namespace detail

namespace {

using detail::MpiShared;

[[noreturn]] void mpi_fail(const char* file, int line, const char* call, int rc) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  detail::throw_internal(file, line, call, str("failed: ", std::string(msg, size_t(len))));
}

#define MPI_CHECK(call)                                               \
  do {                                                                \
    const int rc_ = (call);                                           \
    if (rc_ != MPI_SUCCESS) mpi_fail(__FILE__, __LINE__, #call, rc_); \
  } while (0)

bool mpi_finalized() {
  int done = 0;
  MPI_Finalized(&done);
  return done != 0;
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kF64:
      return MPI_DOUBLE;
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kI64:
      return MPI_INT64_T;
    case DType::kU16:
    case DType::kF16:  // moved as bits (mtron reduces no fp16 tensor)
      return MPI_UINT16_T;
    case DType::kU8:
      return MPI_UINT8_T;
    case DType::kBF16:
      return MPI_UINT16_T;  // moved as bits; reduced by the bf16 operations
  }
  MT_ASSERT(false, "unknown dtype");
}

// The three bf16 reductions: fp32 per element pair, rounded back to bf16 (comm.h, ReduceOp).
template <typename F>
void bf16_apply(void* in, void* inout, int* len, F f) {
  const bf16* a = static_cast<const bf16*>(in);
  bf16* b = static_cast<bf16*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = float_to_bf16(f(bf16_to_float(a[i]), bf16_to_float(b[i])));
}
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  bf16_apply(in, inout, len, [](float x, float y) { return x + y; });
}
// Same comparison as Open MPI's predefined MPI_MAX/MPI_MIN on floats.
void bf16_max(void* in, void* inout, int* len, MPI_Datatype*) {
  bf16_apply(in, inout, len, [](float x, float y) { return x > y ? x : y; });
}
void bf16_min(void* in, void* inout, int* len, MPI_Datatype*) {
  bf16_apply(in, inout, len, [](float x, float y) { return x < y ? x : y; });
}

MPI_Op mpi_op(const MpiShared& sh, DType t, ReduceOp op) {
  if (t == DType::kBF16) return reduce_op_value(op, sh.bf16_sum, sh.bf16_max, sh.bf16_min);
  return reduce_op_value(op, MPI_SUM, MPI_MAX, MPI_MIN);
}

char* at(void* p, int64_t elems, DType t) {
  return static_cast<char*>(p) + elems * int64_t(dtype_size(t));
}
const char* at(const void* p, int64_t elems, DType t) {
  return static_cast<const char*>(p) + elems * int64_t(dtype_size(t));
}

// Calls f(offset, n) over [0, count) in pieces of at most max elements.
template <typename F>
void for_chunks(int64_t count, int64_t max, F f) {
  for (int64_t off = 0; off < count; off += max) f(off, std::min(max, count - off));
}

// Staging buffer for chunked all_gather / reduce_scatter: at most 64 MiB, at most max_count.
int64_t staging_elems(const MpiShared& sh, int p, DType t) {
  const int64_t by_bytes = (int64_t(64) << 20) / (int64_t(p) * int64_t(dtype_size(t)));
  return std::max<int64_t>(1, std::min(sh.max_count, by_bytes));
}

class MpiRequest final : public Request {
 public:
  MpiRequest(Watchdog* w,
             const char* op,
             const std::string* group,
             int group_size,
             int64_t bytes,
             std::vector<MPI_Request> reqs,
             MPI_Datatype recv_type = MPI_DATATYPE_NULL,
             std::vector<int> recv_counts = {})
      : w_(w),
        op_(op),
        group_(group),
        group_size_(group_size),
        bytes_(bytes),
        reqs_(std::move(reqs)),
        recv_type_(recv_type),
        recv_counts_(std::move(recv_counts)) {}

  ~MpiRequest() override {
    // Abandoned during unwinding (the job is about to abort); otherwise complete it so the
    // caller's buffers are not written after they are freed.
    if (done_ || std::uncaught_exceptions() > 0 || mpi_finalized()) return;
    try {
      wait();
    } catch (...) {
    }
  }

  void wait() override {
    if (done_) return;
    Watchdog::Scope scope(w_, op_, group_, group_size_, bytes_);
    std::vector<MPI_Status> st(reqs_.size());
    MPI_CHECK(MPI_Waitall(int(reqs_.size()), reqs_.data(), st.data()));
    finish(st);
  }

  bool test() override {
    if (done_) return true;
    std::vector<MPI_Status> st(reqs_.size());
    int flag = 0;
    MPI_CHECK(MPI_Testall(int(reqs_.size()), reqs_.data(), &flag, st.data()));
    if (flag) finish(st);
    return done_;
  }

 private:
  void finish(const std::vector<MPI_Status>& st) {
    done_ = true;
    for (size_t i = 0; i < recv_counts_.size(); ++i) {
      int got = 0;
      MPI_CHECK(MPI_Get_count(&st[i], recv_type_, &got));
      MT_ASSERT(got == recv_counts_[i], op_, " received ", got, " elements, expected ",
                recv_counts_[i]);
    }
  }

  Watchdog* w_;
  const char* op_;
  const std::string* group_;
  int group_size_;
  int64_t bytes_;
  std::vector<MPI_Request> reqs_;
  MPI_Datatype recv_type_;
  std::vector<int> recv_counts_;  // irecv only: the length each piece must have
  bool done_ = false;
};

class MpiComm final : public Comm {
 public:
  // Takes ownership of comm.
  MpiComm(MPI_Comm comm, std::shared_ptr<MpiShared> sh) : comm_(comm), sh_(std::move(sh)) {
    MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    MPI_CHECK(MPI_Comm_size(comm_, &size_));
    // all_to_all_v's point-to-point messages travel on a twin, apart from the user's tags.
    MPI_CHECK(MPI_Comm_dup(comm_, &p2p_));
  }
  ~MpiComm() override {
    if (mpi_finalized()) return;
    MPI_Comm_free(&p2p_);
    MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  void all_reduce(void* buf, int64_t count, DType t, ReduceOp op) override {
    const int64_t n = count * int64_t(dtype_size(t));
    Watchdog::Scope scope(&sh_->watchdog, "all_reduce", &name_, size_, n);
    for_chunks(count, sh_->max_count, [&](int64_t off, int64_t m) {
      MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, at(buf, off, t), int(m), mpi_type(t),
                              mpi_op(*sh_, t, op), comm_));
    });
    bytes_sent_ += 2 * (size_ - 1) * n / size_;
  }

  void all_gather(const void* send, void* recv, int64_t count, DType t) override {
    const int64_t n = count * int64_t(dtype_size(t));
    Watchdog::Scope scope(&sh_->watchdog, "all_gather", &name_, size_, n);
    all_gather_blocking(send, recv, count, t);
    bytes_sent_ += (size_ - 1) * n;
  }

  void reduce_scatter(const void* send, void* recv, int64_t count, DType t, ReduceOp op) override {
    const int64_t n = count * int64_t(dtype_size(t));
    Watchdog::Scope scope(&sh_->watchdog, "reduce_scatter", &name_, size_, n);
    reduce_scatter_blocking(send, recv, count, t, op);
    bytes_sent_ += (size_ - 1) * n;
  }

  void all_to_all_v_impl(const AllToAllV& a) override {
    const DType t = a.t;
    const int64_t es = int64_t(dtype_size(t));
    Watchdog::Scope scope(&sh_->watchdog, "all_to_all_v", &name_, size_, a.sent * es);
    // Pairwise exchange, as Open MPI's own alltoallv algorithms, but with 64-bit counts and
    // displacements. Peers are visited from rank+1 onwards to spread the load.
    std::vector<MPI_Request> reqs;
    std::vector<int> expect;
    for (int i = 1; i < size_; ++i) {
      const int r = (rank_ + size_ - i) % size_;
      for_chunks(a.recv_counts[r], sh_->max_count, [&](int64_t off, int64_t m) {
        reqs.emplace_back();
        expect.push_back(int(m));
        MPI_CHECK(MPI_Irecv(at(a.recv, a.recv_displs[r] + off, t), int(m), mpi_type(t), r, 0, p2p_,
                            &reqs.back()));
      });
    }
    const size_t nrecv = reqs.size();
    for (int i = 1; i < size_; ++i) {
      const int r = (rank_ + i) % size_;
      for_chunks(a.send_counts[r], sh_->max_count, [&](int64_t off, int64_t m) {
        reqs.emplace_back();
        MPI_CHECK(MPI_Isend(at(a.send, a.send_displs[r] + off, t), int(m), mpi_type(t), r, 0, p2p_,
                            &reqs.back()));
      });
    }
    if (a.send_counts[rank_] > 0)
      std::memmove(at(a.recv, a.recv_displs[rank_], t), at(a.send, a.send_displs[rank_], t),
                   size_t(a.send_counts[rank_] * es));
    std::vector<MPI_Status> st(reqs.size());
    MPI_CHECK(MPI_Waitall(int(reqs.size()), reqs.data(), st.data()));
    for (size_t i = 0; i < nrecv; ++i) {
      int got = 0;
      MPI_CHECK(MPI_Get_count(&st[i], mpi_type(t), &got));
      MT_ASSERT(got == expect[i], "all_to_all_v received ", got, " elements, expected ", expect[i],
                " (send and receive counts disagree between ranks)");
    }
    bytes_sent_ += a.sent * es;
  }

  void broadcast(void* buf, int64_t count, DType t, int root) override {
    const int64_t n = count * int64_t(dtype_size(t));
    Watchdog::Scope scope(&sh_->watchdog, "broadcast", &name_, size_, n);
    for_chunks(count, sh_->max_count, [&](int64_t off, int64_t m) {
      MPI_CHECK(MPI_Bcast(at(buf, off, t), int(m), mpi_type(t), root, comm_));
    });
    bytes_sent_ += (size_ - 1) * n / size_;
  }

  void send(const void* buf, int64_t count, DType t, int peer, int tag) override {
    const int64_t n = count * int64_t(dtype_size(t));
    Watchdog::Scope scope(&sh_->watchdog, "send", &name_, size_, n);
    for_chunks(count, sh_->max_count, [&](int64_t off, int64_t m) {
      MPI_CHECK(MPI_Send(at(buf, off, t), int(m), mpi_type(t), peer, tag, comm_));
    });
    bytes_sent_ += n;
  }

  void recv(void* buf, int64_t count, DType t, int peer, int tag) override {
    Watchdog::Scope scope(&sh_->watchdog, "recv", &name_, size_, count * int64_t(dtype_size(t)));
    for_chunks(count, sh_->max_count, [&](int64_t off, int64_t m) {
      MPI_Status st;
      MPI_CHECK(MPI_Recv(at(buf, off, t), int(m), mpi_type(t), peer, tag, comm_, &st));
      int got = 0;
      MPI_CHECK(MPI_Get_count(&st, mpi_type(t), &got));
      MT_ASSERT(got == m, "recv from rank ", peer, " got ", got, " elements, expected ", m);
    });
  }

  void barrier() override {
    Watchdog::Scope scope(&sh_->watchdog, "barrier", &name_, size_, 0);
    MPI_CHECK(MPI_Barrier(comm_));
  }

  std::unique_ptr<Request> iall_reduce(void* buf, int64_t count, DType t, ReduceOp op) override {
    const int64_t n = count * int64_t(dtype_size(t));
    std::vector<MPI_Request> reqs;
    for_chunks(count, sh_->max_count, [&](int64_t off, int64_t m) {
      reqs.emplace_back();
      MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, at(buf, off, t), int(m), mpi_type(t),
                               mpi_op(*sh_, t, op), comm_, &reqs.back()));
    });
    bytes_sent_ += 2 * (size_ - 1) * n / size_;
    return request("iall_reduce", n, std::move(reqs));
  }

  std::unique_ptr<Request> ireduce_scatter(
      const void* send, void* recv, int64_t count, DType t, ReduceOp op) override {
    const int64_t n = count * int64_t(dtype_size(t));
    std::vector<MPI_Request> reqs;
    if (count <= sh_->max_count) {
      reqs.emplace_back();
      MPI_CHECK(MPI_Ireduce_scatter_block(send, recv, int(count), mpi_type(t), mpi_op(*sh_, t, op),
                                          comm_, &reqs.back()));
    } else {
      Watchdog::Scope scope(&sh_->watchdog, "ireduce_scatter", &name_, size_, n);
      reduce_scatter_blocking(send, recv, count, t, op);
    }
    bytes_sent_ += (size_ - 1) * n;
    return request("ireduce_scatter", n, std::move(reqs));
  }

  std::unique_ptr<Request> iall_gather(const void* send,
                                       void* recv,
                                       int64_t count,
                                       DType t) override {
    const int64_t n = count * int64_t(dtype_size(t));
    std::vector<MPI_Request> reqs;
    if (count <= sh_->max_count) {
      const bool in_place = send == at(recv, rank_ * count, t);
      reqs.emplace_back();
      MPI_CHECK(MPI_Iallgather(in_place ? MPI_IN_PLACE : send, int(count), mpi_type(t), recv,
                               int(count), mpi_type(t), comm_, &reqs.back()));
    } else {
      Watchdog::Scope scope(&sh_->watchdog, "iall_gather", &name_, size_, n);
      all_gather_blocking(send, recv, count, t);
    }
    bytes_sent_ += (size_ - 1) * n;
    return request("iall_gather", n, std::move(reqs));
  }

  std::unique_ptr<Request> isend(
      const void* buf, int64_t count, DType t, int peer, int tag) override {
    const int64_t n = count * int64_t(dtype_size(t));
    std::vector<MPI_Request> reqs;
    for_chunks(count, sh_->max_count, [&](int64_t off, int64_t m) {
      reqs.emplace_back();
      MPI_CHECK(MPI_Isend(at(buf, off, t), int(m), mpi_type(t), peer, tag, comm_, &reqs.back()));
    });
    bytes_sent_ += n;
    return request("isend", n, std::move(reqs));
  }

  std::unique_ptr<Request> irecv(void* buf, int64_t count, DType t, int peer, int tag) override {
    std::vector<MPI_Request> reqs;
    std::vector<int> expect;
    for_chunks(count, sh_->max_count, [&](int64_t off, int64_t m) {
      reqs.emplace_back();
      expect.push_back(int(m));
      MPI_CHECK(MPI_Irecv(at(buf, off, t), int(m), mpi_type(t), peer, tag, comm_, &reqs.back()));
    });
    return std::make_unique<MpiRequest>(&sh_->watchdog, "irecv", &name_, size_,
                                        count * int64_t(dtype_size(t)), std::move(reqs),
                                        mpi_type(t), std::move(expect));
  }

  std::unique_ptr<Comm> split(int color, int key) override {
    MPI_Comm nc = MPI_COMM_NULL;
    MPI_CHECK(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &nc));
    if (nc == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiComm>(nc, sh_);
  }

 private:
  std::unique_ptr<Request> request(const char* op, int64_t n, std::vector<MPI_Request> reqs) {
    return std::make_unique<MpiRequest>(&sh_->watchdog, op, &name_, size_, n, std::move(reqs));
  }

  void all_gather_blocking(const void* send, void* recv, int64_t count, DType t) {
    const bool in_place = send == at(recv, rank_ * count, t);
    if (count <= sh_->max_count) {
      MPI_CHECK(MPI_Allgather(in_place ? MPI_IN_PLACE : send, int(count), mpi_type(t), recv,
                              int(count), mpi_type(t), comm_));
      return;
    }
    // Gather piece by piece into staging, then place each rank's piece in its block.
    const size_t es = dtype_size(t);
    const int64_t m_max = staging_elems(*sh_, size_, t);
    std::vector<char> stage(size_t(size_ * m_max) * es);
    for_chunks(count, m_max, [&](int64_t off, int64_t m) {
      MPI_CHECK(MPI_Allgather(at(send, off, t), int(m), mpi_type(t), stage.data(), int(m),
                              mpi_type(t), comm_));
      for (int r = 0; r < size_; ++r)
        std::memcpy(at(recv, r * count + off, t), stage.data() + size_t(r * m) * es,
                    size_t(m) * es);
    });
  }

  void reduce_scatter_blocking(const void* send, void* recv, int64_t count, DType t, ReduceOp op) {
    if (count <= sh_->max_count) {
      MPI_CHECK(MPI_Reduce_scatter_block(send, recv, int(count), mpi_type(t), mpi_op(*sh_, t, op),
                                         comm_));
      return;
    }
    // Pack the same piece of every rank's block contiguously, reduce-scatter that.
    const size_t es = dtype_size(t);
    const int64_t m_max = staging_elems(*sh_, size_, t);
    std::vector<char> stage(size_t(size_ * m_max) * es);
    for_chunks(count, m_max, [&](int64_t off, int64_t m) {
      for (int r = 0; r < size_; ++r)
        std::memcpy(stage.data() + size_t(r * m) * es, at(send, r * count + off, t),
                    size_t(m) * es);
      MPI_CHECK(MPI_Reduce_scatter_block(stage.data(), at(recv, off, t), int(m), mpi_type(t),
                                         mpi_op(*sh_, t, op), comm_));
    });
  }

  MPI_Comm comm_;
  MPI_Comm p2p_ = MPI_COMM_NULL;
  std::shared_ptr<MpiShared> sh_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

MpiRuntime::MpiRuntime(int* argc, char*** argv, const MpiOptions& opts)
    : shared_(std::make_shared<MpiShared>()) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  MT_CHECK(!initialized, "MPI is already initialised in this process (one MpiRuntime only)");
  MT_ASSERT(opts.max_count >= 1 && opts.max_count <= INT_MAX, "max_count ", opts.max_count);
  shared_->max_count = opts.max_count;
  MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &thread_level_));
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  MPI_Comm node;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
  MPI_CHECK(MPI_Comm_rank(node, &local_rank_));
  MPI_CHECK(MPI_Comm_size(node, &local_size_));
  MPI_CHECK(MPI_Comm_free(&node));
  char name[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_CHECK(MPI_Get_processor_name(name, &len));
  host_.assign(name, size_t(len));
  MPI_CHECK(MPI_Op_create(&bf16_sum, 1, &shared_->bf16_sum));
  MPI_CHECK(MPI_Op_create(&bf16_max, 1, &shared_->bf16_max));
  MPI_CHECK(MPI_Op_create(&bf16_min, 1, &shared_->bf16_min));
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &shared_->error_comm));
}

MpiRuntime::~MpiRuntime() {
  shared_->watchdog.set_timeout(0);
  MPI_Comm_free(&shared_->error_comm);
  MPI_Op_free(&shared_->bf16_sum);
  MPI_Op_free(&shared_->bf16_max);
  MPI_Op_free(&shared_->bf16_min);
  MPI_Finalize();
}

std::unique_ptr<Comm> MpiRuntime::world() {
  MPI_Comm c;
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
  auto comm = std::make_unique<MpiComm>(c, shared_);
  comm->set_name("world");
  return comm;
}

Watchdog& MpiRuntime::watchdog() {
  return shared_->watchdog;
}

MpiRuntime::ErrorVote MpiRuntime::vote_on_error(uint64_t message_hash, int code, double grace_s) {
  // MAX over (h, -h, code): every rank passed the same h iff max(h) == -max(-h).
  const int64_t h = int64_t(message_hash >> 1);
  int64_t buf[3] = {h, -h, code};
  MPI_Request req;
  if (MPI_Iallreduce(MPI_IN_PLACE, buf, 3, MPI_INT64_T, MPI_MAX, shared_->error_comm, &req) !=
      MPI_SUCCESS)
    return {false, false, code};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  int done = 0;
  while (true) {
    if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return {false, false, code};
    if (done || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Not done: some rank is elsewhere. The request is abandoned; the caller aborts the job.
  if (!done) return {false, false, code};
  return {true, buf[0] == -buf[1], int(buf[2])};
}

void MpiRuntime::abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

}  // namespace mtron
