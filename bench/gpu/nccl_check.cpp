// nccl_check: the NCCL Comm (comm/nccl.h) on GPU buffers, one rank per GPU.
//
//   mpirun -np <GPUs> nccl_check        (or plainly: one rank)
//
// Bootstraps NCCL through the MPI world, then checks every operation against values each rank
// can predict (rank r contributes r + 1 + i at index i): all_reduce (fp32 sum/max, bf16 sum,
// host double), all_gather (also in place), reduce_scatter, broadcast, all_to_all_v, the
// non-blocking collectives, isend/irecv around a ring (posted together, as nccl.h requires),
// barrier and split. With one rank the collectives are copies, which still exercises the
// streams, events, staging of host buffers and the deferred p2p group. Prints one line per
// check; exit status 1 if any fails.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "mtron/comm/mpi.h"
#include "mtron/comm/nccl.h"
#include "mtron/core/tensor.h"
#include "mtron/kernels/device.h"

namespace {

using namespace mtron;
using namespace mtron::kernels;

const Ctx kDev{Device::kCUDA, nullptr};
int g_failed = 0;

Tensor upload(const std::vector<float>& v) {
  Tensor t = Tensor::empty({int64_t(v.size())}, DType::kF32, Device::kCUDA);
  copy_from_host(kDev, t.raw(), v.data(), int64_t(v.size() * sizeof(float)));
  return t;
}
std::vector<float> download(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  copy_to_host(kDev, v.data(), t.raw(), int64_t(v.size() * sizeof(float)));
  return v;
}

void expect(bool ok, int rank, const std::string& what) {
  if (rank == 0 || !ok) std::printf("rank %d  %-44s %s\n", rank, what.c_str(), ok ? "ok" : "FAIL");
  if (!ok) ++g_failed;
}

bool equal(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::abs(got[i] - want[i]) > 1e-6f * std::max(1.0f, std::abs(want[i]))) return false;
  return true;
}

// Rank r's contribution at index i.
float val(int r, int64_t i) {
  return float(r + 1) + float(i % 97);
}

void run_checks(Comm& c) {
  const int r = c.rank(), p = c.size();
  const int64_t n = 1000;
  {
    std::vector<float> mine(n), sum(n), mx(n);
    for (int64_t i = 0; i < n; ++i) {
      mine[size_t(i)] = val(r, i);
      sum[size_t(i)] = 0;
      for (int q = 0; q < p; ++q) sum[size_t(i)] += val(q, i);
      mx[size_t(i)] = val(p - 1, i);
    }
    Tensor a = upload(mine);
    c.all_reduce(a.raw(), n, DType::kF32, ReduceOp::kSum);
    expect(equal(download(a), sum), r, "all_reduce fp32 sum");
    Tensor b = upload(mine);
    c.all_reduce(b.raw(), n, DType::kF32, ReduceOp::kMax);
    expect(equal(download(b), mx), r, "all_reduce fp32 max");
    Tensor d = upload(mine);
    auto req = c.iall_reduce(d.raw(), n, DType::kF32, ReduceOp::kSum);
    req->wait();
    expect(equal(download(d), sum), r, "iall_reduce fp32 sum + wait");
  }
  {
    // bf16: small integers are exact in bf16
    std::vector<bf16> mine(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) mine[size_t(i)] = float_to_bf16(float(r + 1));
    Tensor a = Tensor::empty({n}, DType::kBF16, Device::kCUDA);
    copy_from_host(kDev, a.raw(), mine.data(), n * 2);
    c.all_reduce(a.raw(), n, DType::kBF16, ReduceOp::kSum);
    std::vector<bf16> got(static_cast<size_t>(n));
    copy_to_host(kDev, got.data(), a.raw(), n * 2);
    bool ok = true;
    for (const bf16& x : got) ok &= bf16_to_float(x) == float(p * (p + 1) / 2);
    expect(ok, r, "all_reduce bf16 sum");
  }
  {
    const double s = c.all_reduce_sum(double(r + 1));  // a host buffer, staged
    expect(s == double(p * (p + 1) / 2), r, "all_reduce_sum(double) on the host");
  }
  {
    std::vector<float> mine(n), all(size_t(n * p));
    for (int64_t i = 0; i < n; ++i) mine[size_t(i)] = val(r, i);
    for (int q = 0; q < p; ++q)
      for (int64_t i = 0; i < n; ++i) all[size_t(q * n + i)] = val(q, i);
    Tensor send = upload(mine);
    Tensor recv_dev = upload(std::vector<float>(size_t(n * p), -1.0f));
    c.all_gather(send.raw(), recv_dev.raw(), n, DType::kF32);
    expect(equal(download(recv_dev), all), r, "all_gather");
    Tensor inplace = upload(std::vector<float>(size_t(n * p), -1.0f));
    copy_from_host(kDev, inplace.f32() + r * n, mine.data(), n * 4);
    c.all_gather(inplace.f32() + r * n, inplace.raw(), n, DType::kF32);
    expect(equal(download(inplace), all), r, "all_gather in place");
    Tensor again = upload(std::vector<float>(size_t(n * p), -1.0f));
    auto req = c.iall_gather(send.raw(), again.raw(), n, DType::kF32);
    req->wait();
    expect(equal(download(again), all), r, "iall_gather + wait");
  }
  {
    std::vector<float> mine(static_cast<size_t>(n * p)), want(n);
    for (int q = 0; q < p; ++q)
      for (int64_t i = 0; i < n; ++i) mine[size_t(q * n + i)] = val(r, q * n + i);
    for (int64_t i = 0; i < n; ++i) {
      want[size_t(i)] = 0;
      for (int q = 0; q < p; ++q) want[size_t(i)] += val(q, r * n + i);
    }
    Tensor send = upload(mine), recv = upload(std::vector<float>(n, -1.0f));
    c.reduce_scatter(send.raw(), recv.raw(), n, DType::kF32, ReduceOp::kSum);
    expect(equal(download(recv), want), r, "reduce_scatter");
    Tensor recv2 = upload(std::vector<float>(n, -1.0f));
    auto req = c.ireduce_scatter(send.raw(), recv2.raw(), n, DType::kF32, ReduceOp::kSum);
    while (!req->test()) {
    }
    req->wait();
    expect(equal(download(recv2), want), r, "ireduce_scatter + test/wait");
  }
  {
    std::vector<float> root(n);
    for (int64_t i = 0; i < n; ++i) root[size_t(i)] = val(p - 1, i);
    Tensor b = upload(r == p - 1 ? root : std::vector<float>(n, -1.0f));
    c.broadcast(b.raw(), n, DType::kF32, p - 1);
    expect(equal(download(b), root), r, "broadcast from the last rank");
  }
  {
    // rank r sends q + 1 elements to rank q, all of value 100 r + q
    const size_t np = static_cast<size_t>(p);
    std::vector<int64_t> sc(np), sd(np), rc(np), rd(np);
    int64_t st = 0, rt = 0;
    for (int q = 0; q < p; ++q) {
      sc[size_t(q)] = q + 1;
      sd[size_t(q)] = st;
      st += q + 1;
      rc[size_t(q)] = r + 1;
      rd[size_t(q)] = rt;
      rt += r + 1;
    }
    std::vector<float> send(static_cast<size_t>(st)), want(static_cast<size_t>(rt));
    for (int q = 0; q < p; ++q) {
      for (int64_t i = 0; i < sc[size_t(q)]; ++i) send[size_t(sd[size_t(q)] + i)] = 100.0f * r + q;
      for (int64_t i = 0; i < rc[size_t(q)]; ++i) want[size_t(rd[size_t(q)] + i)] = 100.0f * q + r;
    }
    Tensor s = upload(send), d = upload(std::vector<float>(size_t(rt), -1.0f));
    c.all_to_all_v(s.raw(), sc.data(), sd.data(), d.raw(), rc.data(), rd.data(), DType::kF32);
    expect(equal(download(d), want), r, "all_to_all_v");
  }
  {
    // a ring: send to r + 1, receive from r - 1, both posted before either is waited on
    std::vector<float> mine(n), want(n);
    const int prev = (r + p - 1) % p, next = (r + 1) % p;
    for (int64_t i = 0; i < n; ++i) {
      mine[size_t(i)] = val(r, i);
      want[size_t(i)] = val(prev, i);
    }
    Tensor s = upload(mine), d = upload(std::vector<float>(n, -1.0f));
    auto rq = c.irecv(d.raw(), n, DType::kF32, prev, 7);
    auto sq = c.isend(s.raw(), n, DType::kF32, next, 7);
    rq->wait();
    sq->wait();
    expect(equal(download(d), want), r, "isend/irecv ring (one group)");
  }
  c.barrier();
  expect(true, r, "barrier");
  {
    // split into even and odd ranks; each half all-reduces its ranks' ids
    auto half = c.split(r % 2, r);
    expect(half != nullptr, r, "split");
    if (half) {
      Tensor a = upload(std::vector<float>(4, float(r)));
      half->all_reduce(a.raw(), 4, DType::kF32, ReduceOp::kSum);
      float want = 0;
      for (int q = r % 2; q < p; q += 2) want += float(q);
      expect(equal(download(a), std::vector<float>(4, want)), r,
             "all_reduce on the split communicator");
    }
    auto none = c.split(-1, r);
    expect(none == nullptr, r, "split with a negative colour gives no communicator");
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    MpiRuntime mpi(&argc, &argv);
    auto world = mpi.world();
    const int gpus = device_count(Device::kCUDA);
    if (gpus == 0) {
      std::fprintf(stderr, "nccl_check: no CUDA GPU visible\n");
      return 2;
    }
    init_device(Device::kCUDA, mpi.local_rank() % gpus);
    auto nccl = make_nccl_comm(*world, default_stream(Device::kCUDA));
    if (world->rank() == 0)
      std::printf("nccl_check: %d rank(s), backend %s, GPU \"%s\"\n", nccl->size(),
                  nccl->backend().c_str(), device_properties(Device::kCUDA).name.c_str());
    run_checks(*nccl);
    synchronize(kDev);
    const double failed = world->all_reduce_sum(double(g_failed));
    if (world->rank() == 0) std::printf("nccl_check: %d check(s) failed\n", int(failed));
    nccl.reset();
    return failed == 0 ? 0 : 1;
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "nccl_check: %s\n", ex.what());
    return 1;
  }
}
