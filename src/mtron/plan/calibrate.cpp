#include "mtron/plan/calibrate.h"

#include <fmt/core.h>
#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <vector>

#include "mtron/comm/comm.h"
#include "mtron/core/dtype.h"
#include "mtron/core/error.h"
#include "mtron/core/hardware.h"
#include "mtron/core/timer.h"
#include "mtron/kernels/cpu_isa.h"
#include "mtron/kernels/gemm.h"
#include "mtron/parallel/launch.h"
#include "mtron/plan/calibration.h"

namespace mtron::plan {
namespace {

// Times the kernel layer's GEMM (kernels/gemm.h: what the trainer's linear layers call; oneDNN
// on the AMX units for bf16, OpenBLAS or oneDNN for fp32) on one shape, every rank at once.
// ta/tb: A / B stored transposed.
double measure_gemm(Comm& w, bool bf16, bool ta, bool tb, int64_t M, int64_t N, int64_t K) {
  using kernels::Trans;
  const kernels::Ctx ctx;
  std::vector<float> a(size_t(M * K)), b(size_t(K * N)), c(size_t(M * N));
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(i % 17) * 0.01f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = float(i % 13) * 0.01f;
  const Trans opa = ta ? Trans::kT : Trans::kN, opb = tb ? Trans::kT : Trans::kN;
  const int64_t lda = ta ? M : K, ldb = tb ? K : N;
  if (!bf16) {
    return time_ranks(w, [&] {
      kernels::gemm(ctx, opa, opb, M, N, K, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), N);
    });
  }
  std::vector<mtron::bf16> a16(a.size()), b16(b.size());
  for (size_t i = 0; i < a.size(); ++i) a16[i] = float_to_bf16(a[i]);
  for (size_t i = 0; i < b.size(); ++i) b16[i] = float_to_bf16(b[i]);
  return time_ranks(w, [&] {
    kernels::gemm(ctx, opa, opb, M, N, K, 1.0f, a16.data(), lda, b16.data(), ldb, 0.0f, c.data(),
                  N);
  });
}

// Bytes/s one rank streams (a = b + s*c, three arrays) while every rank does the same.
double measure_memory_bandwidth(Comm& w, size_t n) {
  std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n, 3.0f);
  const double sec = time_ranks(w, [&] {
    const int64_t nn = int64_t(n);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < nn; ++i) a[size_t(i)] = b[size_t(i)] + 0.5f * c[size_t(i)];
  });
  return 3.0 * 4.0 * double(n) / sec;
}

// The collectives through the comm layer (the MPI backend under mpirun, as the CPU trainer's
// groups use it), 4 KiB to 16 MiB (quick: 1 MiB) of fp32, timed over the whole world.
void measure_collectives(Comm& w, bool quick, std::vector<CollectiveSample>* out) {
  if (w.size() < 2) return;
  const int64_t max_bytes = quick ? (1 << 20) : (1 << 24);
  auto run = [&](Comm& comm, Collective op) {
    const int n = comm.size(), me = comm.rank();
    for (int64_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
      const int64_t count = bytes / 4, part = count / n;
      std::vector<float> send(size_t(count), 1.0f), recv(size_t(count), 0.0f);
      std::vector<int64_t> counts(size_t(n), part), displs(size_t(n), 0);
      for (int r = 0; r < n; ++r) displs[size_t(r)] = r * part;
      const double sec = time_ranks(
          w,
          [&] {
            switch (op) {
              case Collective::kAllReduce:
                comm.all_reduce(send.data(), count, DType::kF32, ReduceOp::kSum);
                break;
              case Collective::kAllGather:
                comm.all_gather(send.data(), recv.data(), part, DType::kF32);
                break;
              case Collective::kReduceScatter:
                comm.reduce_scatter(send.data(), recv.data(), part, DType::kF32, ReduceOp::kSum);
                break;
              case Collective::kAllToAll:
                comm.all_to_all_v(send.data(), counts.data(), displs.data(), recv.data(),
                                  counts.data(), displs.data(), DType::kF32);
                break;
              case Collective::kSendRecv: {
                const int peer = me ^ 1;
                if (peer < n) {
                  const auto r = comm.irecv(recv.data(), count, DType::kF32, peer, 7);
                  comm.send(send.data(), count, DType::kF32, peer, 7);
                  r->wait();
                }
                break;
              }
            }
          },
          0.02, 3);
      out->push_back({op, n, double(bytes), sec});
    }
  };
  for (Collective op : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                        Collective::kAllToAll, Collective::kSendRecv})
    run(w, op);
  if (w.size() >= 4) {  // pairs at once, as TP=2 groups run beside each other
    const std::unique_ptr<Comm> pairs = w.split(w.rank() / 2, w.rank());
    run(*pairs, Collective::kAllReduce);
  }
}

std::string today() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M", std::localtime(&t));
  return buf;
}

// The CPU calibration on the ranks of `launch`.
int calibrate_cpu(const CalibrateOptions& o, Launch& launch) {
  Comm& w = launch.world();
  const int ranks = w.size();
  const Hardware cpu = detect_local_cpu();
  const int cores = cpu.gpus_per_node;
  // cores/ranks threads each, but no more than the cores this rank is bound to.
  cpu_set_t mask;
  CPU_ZERO(&mask);
  const int bound = sched_getaffinity(0, sizeof(mask), &mask) == 0 ? CPU_COUNT(&mask) : cores;
  int threads = std::max(1, std::min(bound, cores / ranks));
  if (const char* env = std::getenv("OMP_NUM_THREADS"); env && std::atoi(env) > 0)
    threads = std::atoi(env);
  omp_set_num_threads(threads);
  if (w.rank() == 0)
    std::fprintf(stderr,
                 "mtron plan --calibrate: %d rank%s x %d thread%s on %s (%s); this takes "
                 "about a minute\n",
                 ranks, ranks == 1 ? "" : "s", threads, threads == 1 ? "" : "s",
                 cpu.description.c_str(), kernels::cpu_summary().c_str());

  RankCalibration r;
  r.ranks_per_node = ranks;
  r.threads_per_rank = threads;
  // Forward (NT), dgrad (NN) and wgrad (TN) GEMMs of linear layers [tokens, in] -> [tokens, out].
  const std::vector<int64_t> tokens =
      o.quick ? std::vector<int64_t>{256} : std::vector<int64_t>{256, 1024, 4096};
  const std::vector<std::pair<int64_t, int64_t>> linears =
      o.quick ? std::vector<std::pair<int64_t, int64_t>>{{256, 768}, {768, 256}}
              : std::vector<std::pair<int64_t, int64_t>>{{256, 768},  {768, 768},   {768, 3072},
                                                         {3072, 768}, {1024, 4096}, {2048, 2048}};
  for (bool bf16 : {false, true}) {
    auto& samples = r.gemm[bf16 ? "bf16" : "fp32"];
    for (int64_t T : tokens) {
      for (auto [in, out] : linears) {
        samples.push_back({T, out, in, measure_gemm(w, bf16, false, true, T, out, in)});
        samples.push_back({T, in, out, measure_gemm(w, bf16, false, false, T, in, out)});
        samples.push_back({out, in, T, measure_gemm(w, bf16, true, false, out, in, T)});
      }
    }
  }
  r.memory_bandwidth = measure_memory_bandwidth(w, o.quick ? (size_t(1) << 22) : (size_t(1) << 25));
  measure_collectives(w, o.quick, &r.collectives);

  if (w.rank() == 0) {
    Calibration cal = load_or_new_calibration(o.path);
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    cal.host = host;
    cal.cpu = cpu.description;
    cal.date = today();
    cal.by_ranks[ranks] = r;
    save_calibration(cal, o.path);
    std::printf("calibration for %d rank%s per node (%d thread%s each) written to %s\n", ranks,
                ranks == 1 ? "" : "s", threads, threads == 1 ? "" : "s", o.path.c_str());
    for (const auto& [prec, v] : r.gemm) {
      const GemmFit f = fit_gemm(v, parse_precision(prec));
      std::printf(
          "  GEMM %s: %.1f GFLOP/s per rank, operands at %.1f GB/s, %.1f us per call "
          "(median error of the fit %.0f%% over %zu shapes)\n",
          prec.c_str(), f.flops / 1e9, f.bandwidth / 1e9, f.overhead * 1e6,
          100 * f.median_rel_error, v.size());
    }
    std::printf("  memory bandwidth: %.1f GB/s per rank\n", r.memory_bandwidth / 1e9);
    if (!r.collectives.empty()) {
      const Link l = fit_link(r.collectives);
      std::printf("  MPI collectives: bus bandwidth %.2f GB/s per rank, latency %.1f us per step\n",
                  l.bandwidth / 1e9, l.latency * 1e6);
    } else {
      std::printf("  MPI collectives: not measured (one rank; run under mpirun -np N)\n");
    }
  }
  return 0;
}

}  // namespace

double time_ranks(Comm& world, const std::function<void()>& fn, double min_seconds, int min_reps) {
  fn();
  std::vector<double> times;
  double spent = 0;
  while ((int(times.size()) < min_reps || spent < min_seconds) && times.size() < 50) {
    world.barrier();
    const double t0 = now_seconds();
    fn();
    const double dt = world.all_reduce_max(now_seconds() - t0);
    times.push_back(dt);
    spent += dt;
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

int run_calibration(const CalibrateOptions& o) {
  char name[] = "mtron";
  char* argv[] = {name, nullptr};
  return run_main(1, argv, [&](Launch& launch) {
    return o.cuda ? run_gpu_calibration(o, launch) : calibrate_cpu(o, launch);
  });
}

}  // namespace mtron::plan
