// The MPI backend against serial computations, run under mpirun at 1, 2, 3, 4 and 8 ranks (and
// again with --max-count=7, which splits every call into pieces of at most 7 elements). Each rank
// can compute every rank's input, so each checks its own result against a serial reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "mpi_test_main.h"
#include "mtron/core/error.h"

namespace mtron {
namespace {

Comm& world() {
  return mpi_test_launch().world();
}

// Element conversions for the tested types (bf16 through float).
template <typename T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, bf16>)
    return float_to_bf16(float(v));
  else
    return T(v);
}
template <typename T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, bf16>)
    return bf16_to_float(v);
  else
    return double(v);
}
template <typename T>
DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::kF32;
  if constexpr (std::is_same_v<T, double>) return DType::kF64;
  if constexpr (std::is_same_v<T, int32_t>) return DType::kI32;
  if constexpr (std::is_same_v<T, int64_t>) return DType::kI64;
  if constexpr (std::is_same_v<T, bf16>) return DType::kBF16;
}

// Small integers: exact in every tested type and in any sum of up to 8 ranks (|sum| <= 64).
double val(int rank, int64_t i) {
  return double((rank * 7 + i * 3 + (i >> 4)) % 17) - 8;
}

// A pseudo-random float in [-1, 1) (splitmix64).
double rnd(uint64_t key) {
  key += 0x9e3779b97f4a7c15ull;
  key = (key ^ (key >> 30)) * 0xbf58476d1ce4e5b9ull;
  key = (key ^ (key >> 27)) * 0x94d049bb133111ebull;
  key ^= key >> 31;
  return double(key >> 11) / double(1ull << 52) - 1.0;
}

double reduce_ref(ReduceOp op, int p, int64_t i) {
  double acc = val(0, i);
  for (int r = 1; r < p; ++r) {
    const double v = val(r, i);
    acc = op == ReduceOp::kSum   ? acc + v
          : op == ReduceOp::kMax ? std::max(acc, v)
                                 : std::min(acc, v);
  }
  return acc;
}

const int64_t kCounts[] = {0, 1, 7, 31, 32, 33, 1000};

template <typename T>
void check_all_reduce(Comm& c) {
  const DType t = dtype_of<T>();
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin})
    for (int64_t n : kCounts) {
      std::vector<T> x(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) x[size_t(i)] = from_double<T>(val(c.rank(), i));
      c.all_reduce(x.data(), n, t, op);
      int bad = 0;
      for (int64_t i = 0; i < n; ++i)
        if (to_double(x[size_t(i)]) != reduce_ref(op, c.size(), i) && bad++ < 3)
          ADD_FAILURE() << dtype_name(t) << " op " << int(op) << " n " << n << " [" << i
                        << "] = " << to_double(x[size_t(i)]) << ", want "
                        << reduce_ref(op, c.size(), i);
    }
}

TEST(MpiComm, AllReduceEveryTypeAndOp) {
  check_all_reduce<float>(world());
  check_all_reduce<double>(world());
  check_all_reduce<int32_t>(world());
  check_all_reduce<int64_t>(world());
  check_all_reduce<bf16>(world());
}

TEST(MpiComm, AllReduceRandomFp32IsAccurateAndIdenticalOnAllRanks) {
  Comm& c = world();
  const int p = c.size();
  for (int64_t n : {int64_t(33), int64_t(100003)}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      x[size_t(i)] = float(rnd(uint64_t(c.rank()) << 40 | uint64_t(i)));
    c.all_reduce(x.data(), n, DType::kF32, ReduceOp::kSum);
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      double ref = 0;
      for (int r = 0; r < p; ++r) ref += double(float(rnd(uint64_t(r) << 40 | uint64_t(i))));
      if (std::abs(x[size_t(i)] - ref) > 1e-6 * p && bad++ < 3)
        ADD_FAILURE() << "n " << n << " [" << i << "] " << x[size_t(i)] << " vs " << ref;
    }
    // Replicated state (weights after a DP all-reduce) must stay bitwise identical across ranks.
    std::vector<float> all(size_t(n * p));
    c.all_gather(x.data(), all.data(), n, DType::kF32);
    for (int r = 0; r < p; ++r)
      EXPECT_EQ(std::memcmp(all.data() + r * n, x.data(), size_t(n) * 4), 0)
          << "rank " << r << " holds a different sum (n " << n << ")";
  }
}

TEST(MpiComm, AllReduceBf16RoundsWithinBound) {
  // Random bf16 values: each pairwise step rounds once, so |error| <= (p-1) 2^-8 sum |v|.
  Comm& c = world();
  const int p = c.size();
  const int64_t n = 1001;
  std::vector<bf16> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    x[size_t(i)] = float_to_bf16(float(rnd(uint64_t(c.rank()) << 40 | uint64_t(i))));
  c.all_reduce(x.data(), n, DType::kBF16, ReduceOp::kSum);
  for (int64_t i = 0; i < n; ++i) {
    double exact = 0, mag = 0;
    for (int r = 0; r < p; ++r) {
      const double v = bf16_to_float(float_to_bf16(float(rnd(uint64_t(r) << 40 | uint64_t(i)))));
      exact += v;
      mag += std::abs(v);
    }
    EXPECT_LE(std::abs(bf16_to_float(x[size_t(i)]) - exact), (p - 1) * mag / 256 + 1e-30) << i;
  }
}

template <typename T>
void check_all_gather(Comm& c, bool in_place) {
  const DType t = dtype_of<T>();
  const int p = c.size();
  for (int64_t n : kCounts) {
    std::vector<T> recv(size_t(n * p), from_double<T>(99));
    std::vector<T> send(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) send[size_t(i)] = from_double<T>(val(c.rank(), i));
    if (in_place) {
      std::copy(send.begin(), send.end(), recv.begin() + c.rank() * n);
      c.all_gather(recv.data() + c.rank() * n, recv.data(), n, t);
    } else {
      c.all_gather(send.data(), recv.data(), n, t);
    }
    int bad = 0;
    for (int r = 0; r < p; ++r)
      for (int64_t i = 0; i < n; ++i)
        if (to_double(recv[size_t(r * n + i)]) != val(r, i) && bad++ < 3)
          ADD_FAILURE() << dtype_name(t) << (in_place ? " in place" : "") << " n " << n << " block "
                        << r << " [" << i << "]";
  }
}

TEST(MpiComm, AllGather) {
  for (bool in_place : {false, true}) {
    check_all_gather<float>(world(), in_place);
    check_all_gather<bf16>(world(), in_place);
    check_all_gather<int64_t>(world(), in_place);
  }
}

template <typename T>
void check_reduce_scatter(Comm& c, ReduceOp op) {
  const DType t = dtype_of<T>();
  const int p = c.size();
  for (int64_t n : kCounts) {
    // Rank r's block b, element i holds val(r, b * n + i).
    std::vector<T> send(size_t(n * p));
    for (int64_t j = 0; j < n * p; ++j) send[size_t(j)] = from_double<T>(val(c.rank(), j));
    std::vector<T> recv(static_cast<size_t>(n));
    c.reduce_scatter(send.data(), recv.data(), n, t, op);
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double ref = reduce_ref(op, p, c.rank() * n + i);
      if (to_double(recv[size_t(i)]) != ref && bad++ < 3)
        ADD_FAILURE() << dtype_name(t) << " n " << n << " [" << i << "] "
                      << to_double(recv[size_t(i)]) << " want " << ref;
    }
  }
}

TEST(MpiComm, ReduceScatter) {
  check_reduce_scatter<float>(world(), ReduceOp::kSum);
  check_reduce_scatter<double>(world(), ReduceOp::kMin);
  check_reduce_scatter<int32_t>(world(), ReduceOp::kMax);
  check_reduce_scatter<int64_t>(world(), ReduceOp::kSum);
  check_reduce_scatter<bf16>(world(), ReduceOp::kSum);
  check_reduce_scatter<bf16>(world(), ReduceOp::kMax);
}

// Elements rank src sends to rank dst: uneven, zero for some pairs (and for src == dst at times).
int64_t a2a_count(int src, int dst, int64_t scale) {
  return ((src * 7 + dst * 3) % 5) * scale;
}

template <typename T>
void check_all_to_all_v(Comm& c, int64_t scale) {
  const DType t = dtype_of<T>();
  const int p = c.size(), me = c.rank();
  const T sentinel = from_double<T>(-99);
  // Blocks laid out in rank order with a one-element gap after each, to test displacements.
  std::vector<int64_t> sc(static_cast<size_t>(p)), sd(static_cast<size_t>(p)),
      rc(static_cast<size_t>(p)), rd(static_cast<size_t>(p));
  int64_t so = 0, ro = 0;
  for (int r = 0; r < p; ++r) {
    sc[size_t(r)] = a2a_count(me, r, scale);
    sd[size_t(r)] = so;
    so += sc[size_t(r)] + 1;
    rc[size_t(r)] = a2a_count(r, me, scale);
    rd[size_t(r)] = ro;
    ro += rc[size_t(r)] + 1;
  }
  std::vector<T> send(size_t(so), sentinel), recv(size_t(ro), sentinel);
  // Element i of the message src -> dst: (src * 8 + dst) * 4 + i % 4 - 100, exact in bf16.
  auto elem = [](int src, int dst, int64_t i) { return double((src * 8 + dst) * 4 + i % 4 - 100); };
  for (int r = 0; r < p; ++r)
    for (int64_t i = 0; i < sc[size_t(r)]; ++i)
      send[size_t(sd[size_t(r)] + i)] = from_double<T>(elem(me, r, i));
  const int64_t before = c.bytes_sent();
  c.all_to_all_v(send.data(), sc.data(), sd.data(), recv.data(), rc.data(), rd.data(), t);
  int64_t to_peers = 0;
  for (int r = 0; r < p; ++r) {
    if (r != me) to_peers += sc[size_t(r)];
    for (int64_t i = 0; i < rc[size_t(r)]; ++i)
      EXPECT_EQ(to_double(recv[size_t(rd[size_t(r)] + i)]), elem(r, me, i))
          << dtype_name(t) << " from " << r << " [" << i << "]";
    EXPECT_EQ(to_double(recv[size_t(rd[size_t(r)] + rc[size_t(r)])]), -99) << "gap overwritten";
  }
  EXPECT_EQ(c.bytes_sent() - before, to_peers * int64_t(dtype_size(t)));
}

TEST(MpiComm, AllToAllVUnevenWithZeros) {
  for (int64_t scale : {1, 13}) {
    check_all_to_all_v<float>(world(), scale);
    check_all_to_all_v<int64_t>(world(), scale);
    check_all_to_all_v<bf16>(world(), scale);
  }
}

TEST(MpiComm, AllToAllVCountMismatchIsAnInternalError) {
  Comm& c = world();
  const int p = c.size();
  if (p < 2) GTEST_SKIP() << "needs 2 ranks";
  // Rank 0 expects 3 elements from rank 1, which sends 2.
  std::vector<int64_t> sc(size_t(p), 0), sd(size_t(p), 0), rc(size_t(p), 0), rd(size_t(p), 0);
  if (c.rank() == 1) sc[0] = 2;
  if (c.rank() == 0) rc[1] = 3;
  std::vector<float> send(4, 1.f), recv(4, 0.f);
  if (c.rank() == 0) {
    EXPECT_THROW(c.all_to_all_v(send.data(), sc.data(), sd.data(), recv.data(), rc.data(),
                                rd.data(), DType::kF32),
                 InternalError);
  } else {
    c.all_to_all_v(send.data(), sc.data(), sd.data(), recv.data(), rc.data(), rd.data(),
                   DType::kF32);
  }
}

template <typename T>
void check_broadcast(Comm& c) {
  const DType t = dtype_of<T>();
  const int p = c.size();
  for (int root : {0, p - 1, p / 2})
    for (int64_t n : {int64_t(1), int64_t(33), int64_t(1000)}) {
      std::vector<T> x(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i)
        x[size_t(i)] = from_double<T>(c.rank() == root ? val(root, i) : 99);
      c.broadcast(x.data(), n, t, root);
      for (int64_t i = 0; i < n; ++i)
        if (to_double(x[size_t(i)]) != val(root, i)) {
          ADD_FAILURE() << dtype_name(t) << " root " << root << " n " << n << " [" << i << "]";
          break;
        }
    }
}

TEST(MpiComm, Broadcast) {
  check_broadcast<float>(world());
  check_broadcast<int64_t>(world());
  check_broadcast<bf16>(world());
  check_broadcast<double>(world());
}

TEST(MpiComm, SendRecvRing) {
  Comm& c = world();
  const int p = c.size(), me = c.rank();
  if (p < 2) GTEST_SKIP() << "needs 2 ranks";
  const int next = (me + 1) % p, prev = (me + p - 1) % p;
  for (int64_t n : {int64_t(1), int64_t(33), int64_t(100000)}) {
    std::vector<float> out(static_cast<size_t>(n)), in(size_t(n), -1.f);
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = float(val(me, i));
    // Even ranks send first, odd ranks receive first: blocking calls cannot deadlock.
    if (me % 2 == 0) {
      c.send(out.data(), n, DType::kF32, next, 5);
      c.recv(in.data(), n, DType::kF32, prev, 5);
    } else {
      c.recv(in.data(), n, DType::kF32, prev, 5);
      c.send(out.data(), n, DType::kF32, next, 5);
    }
    for (int64_t i = 0; i < n; ++i)
      if (in[size_t(i)] != float(val(prev, i))) {
        ADD_FAILURE() << "n " << n << " [" << i << "]";
        break;
      }
  }
}

TEST(MpiComm, NonBlockingRingTagsAndOrder) {
  Comm& c = world();
  const int p = c.size(), me = c.rank();
  if (p < 2) GTEST_SKIP() << "needs 2 ranks";
  const int next = (me + 1) % p, prev = (me + p - 1) % p;
  const int64_t n = 1000;
  // Two tags sent in one order, received in the other; two messages on one tag stay in order.
  std::vector<int64_t> a(n, me * 10 + 1), b(n, me * 10 + 2), c1(n, me * 10 + 3), c2(n, me * 10 + 4);
  std::vector<int64_t> ra(n), rb(n), rc1(n), rc2(n);
  auto rq_b = c.irecv(rb.data(), n, DType::kI64, prev, 2);
  auto rq_a = c.irecv(ra.data(), n, DType::kI64, prev, 1);
  auto rq_c1 = c.irecv(rc1.data(), n, DType::kI64, prev, 3);
  auto rq_c2 = c.irecv(rc2.data(), n, DType::kI64, prev, 3);
  auto s1 = c.isend(a.data(), n, DType::kI64, next, 1);
  auto s2 = c.isend(b.data(), n, DType::kI64, next, 2);
  auto s3 = c.isend(c1.data(), n, DType::kI64, next, 3);
  auto s4 = c.isend(c2.data(), n, DType::kI64, next, 3);
  for (auto* r :
       {rq_a.get(), rq_b.get(), rq_c1.get(), rq_c2.get(), s1.get(), s2.get(), s3.get(), s4.get()})
    r->wait();
  EXPECT_EQ(ra[n - 1], prev * 10 + 1);
  EXPECT_EQ(rb[0], prev * 10 + 2);
  EXPECT_EQ(rc1[7], prev * 10 + 3);
  EXPECT_EQ(rc2[n - 1], prev * 10 + 4);
  EXPECT_TRUE(s1->test());  // completed requests stay completed
}

TEST(MpiComm, RecvOfWrongLengthIsAnInternalError) {
  Comm& c = world();
  if (c.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  std::vector<float> x(8, 1.f);
  if (c.rank() == 0) c.send(x.data(), 5, DType::kF32, 1, 9);
  if (c.rank() == 1) {
    EXPECT_THROW(c.recv(x.data(), 6, DType::kF32, 0, 9), InternalError);
  }
  c.barrier();
}

TEST(MpiComm, NonBlockingCollectivesOverlap) {
  Comm& c = world();
  const int p = c.size(), me = c.rank();
  const int64_t n = 4099;
  std::vector<double> ar(static_cast<size_t>(n));
  std::vector<float> rs_in(size_t(n * p)), rs_out(static_cast<size_t>(n));
  std::vector<int32_t> ag(size_t(n * p), -1);
  for (int64_t i = 0; i < n; ++i) {
    ar[size_t(i)] = val(me, i);
    ag[size_t(me * n + i)] = int32_t(val(me, i));
  }
  for (int64_t j = 0; j < n * p; ++j) rs_in[size_t(j)] = float(val(me, j));
  auto r1 = c.iall_reduce(ar.data(), n, DType::kF64, ReduceOp::kSum);
  auto r2 = c.ireduce_scatter(rs_in.data(), rs_out.data(), n, DType::kF32, ReduceOp::kSum);
  auto r3 = c.iall_gather(ag.data() + me * n, ag.data(), n, DType::kI32);
  // Poll as a compute loop would, then wait.
  for (int spins = 0; spins < 100000 && !(r1->test() && r2->test() && r3->test()); ++spins) {
  }
  r1->wait();
  r2->wait();
  r3->wait();
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(ar[size_t(i)], reduce_ref(ReduceOp::kSum, p, i));
    EXPECT_EQ(rs_out[size_t(i)], reduce_ref(ReduceOp::kSum, p, me * n + i));
  }
  for (int r = 0; r < p; ++r)
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(ag[size_t(r * n + i)], int32_t(val(r, i)));
  // A request dropped without wait() completes in its destructor.
  std::vector<float> y(33, 1.f);
  { auto dropped = c.iall_reduce(y.data(), 33, DType::kF32, ReduceOp::kSum); }
  for (float v : y) EXPECT_EQ(v, float(p));
}

TEST(MpiComm, SplitReorderedByKeyAndExcluded) {
  Comm& c = world();
  const int p = c.size(), me = c.rank();
  // Parity classes, ordered by descending world rank.
  auto sub = c.split(me % 2, -me);
  ASSERT_NE(sub, nullptr);
  int members = 0, above = 0;
  for (int r = 0; r < p; ++r)
    if (r % 2 == me % 2) {
      ++members;
      if (r > me) ++above;
    }
  EXPECT_EQ(sub->size(), members);
  EXPECT_EQ(sub->rank(), above);
  double sum = sub->all_reduce_sum(me);
  double want = 0;
  for (int r = me % 2; r < p; r += 2) want += r;
  EXPECT_EQ(sum, want);
  // Rank 0 opts out with a negative color.
  auto rest = c.split(me == 0 ? -1 : 7, me);
  if (me == 0) {
    EXPECT_EQ(rest, nullptr);
  } else {
    ASSERT_NE(rest, nullptr);
    EXPECT_EQ(rest->size(), p - 1);
    EXPECT_EQ(rest->rank(), me - 1);
    // A split of a split.
    auto pairs = rest->split(rest->rank() / 2, 0);
    EXPECT_EQ(pairs->size(), std::min(2, p - 1 - rest->rank() / 2 * 2));
    pairs->barrier();
  }
}

TEST(MpiComm, BytesSentFollowTheDocumentedVolumes) {
  Comm& c = world();
  const int64_t p = c.size(), me = c.rank();
  const int64_t n = 1000;
  std::vector<float> x(size_t(n * p), 1.f), y(size_t(n * p));
  auto delta = [&](auto f) {
    const int64_t b = c.bytes_sent();
    f();
    return c.bytes_sent() - b;
  };
  EXPECT_EQ(delta([&] { c.all_reduce(x.data(), n, DType::kF32, ReduceOp::kSum); }),
            2 * (p - 1) * n * 4 / p);
  EXPECT_EQ(delta([&] { c.all_gather(x.data(), y.data(), n, DType::kF32); }), (p - 1) * n * 4);
  EXPECT_EQ(delta([&] { c.reduce_scatter(x.data(), y.data(), n, DType::kF32, ReduceOp::kSum); }),
            (p - 1) * n * 4);
  EXPECT_EQ(delta([&] { c.broadcast(x.data(), n, DType::kBF16, 0); }), (p - 1) * n * 2 / p);
  EXPECT_EQ(delta([&] { c.iall_reduce(x.data(), n, DType::kF64, ReduceOp::kSum)->wait(); }),
            2 * (p - 1) * n * 8 / p);
  EXPECT_EQ(delta([&] { c.barrier(); }), 0);
  if (p >= 2) {
    const int next = int((me + 1) % p), prev = int((me + p - 1) % p);
    EXPECT_EQ(delta([&] {
                auto r = c.irecv(y.data(), 17, DType::kF32, prev, 1);
                c.isend(x.data(), 17, DType::kF32, next, 1)->wait();
                r->wait();
              }),
              17 * 4);
  }
}

}  // namespace
}  // namespace mtron
