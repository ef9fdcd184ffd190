// Collective bandwidth of the MPI backend: all-reduce, reduce-scatter and all-gather over the
// world at a few sizes, with the bytes each rank counts (Comm::bytes_sent) against the analytic
// volume. Run under mpirun (bench/comm/run.sh); rank 0 prints a markdown table.
//
//   mpirun -np 4 comm_bench [--sizes=65536,1048576,16777216,67108864] [--min-time=0.5]
//
// n is the size of the full vector in bytes: all-reduce reduces n bytes in place; reduce-scatter
// reads n bytes and leaves n/p; all-gather assembles n bytes from n/p per rank. Time is the
// median over iterations of the slowest rank. algbw = n / time; busbw = algbw * 2(p-1)/p for
// all-reduce and (p-1)/p for the others (the nccl-tests convention: per-rank link bandwidth).
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "mtron/parallel/launch.h"

namespace {

using Clock = std::chrono::steady_clock;

std::vector<int64_t> parse_sizes(const char* s) {
  std::vector<int64_t> out;
  while (*s) {
    char* end = nullptr;
    out.push_back(std::strtoll(s, &end, 10));
    s = *end == ',' ? end + 1 : end;
  }
  return out;
}

int bench(mtron::Launch& l, const std::vector<int64_t>& sizes, double min_time) {
  mtron::Comm& c = l.world();
  const int64_t p = c.size();
  if (l.rank() == 0) {
    fmt::print("## {} ranks ({})\n\n", p, l.describe());
    fmt::print(
        "| op | n (bytes) | time (ms) | algbw (GB/s) | busbw (GB/s) | "
        "bytes sent/rank | analytic | ratio |\n");
    fmt::print("|---|---:|---:|---:|---:|---:|---:|---:|\n");
  }
  for (const char* op : {"all_reduce", "reduce_scatter", "all_gather"}) {
    for (int64_t n : sizes) {
      const int64_t count = n / 4 / p * p;  // fp32 elements, a multiple of p
      const int64_t nb = count * 4;
      std::vector<float> a(size_t(count), 1.0f), b(size_t(count), 0.0f);
      auto run = [&] {
        if (!std::strcmp(op, "all_reduce"))
          c.all_reduce(a.data(), count, mtron::DType::kF32, mtron::ReduceOp::kSum);
        else if (!std::strcmp(op, "reduce_scatter"))
          c.reduce_scatter(a.data(), b.data(), count / p, mtron::DType::kF32,
                           mtron::ReduceOp::kSum);
        else
          c.all_gather(a.data(), b.data(), count / p, mtron::DType::kF32);
      };
      run();  // warm-up: first touch of the pages and of Open MPI's buffers
      const int64_t before = c.bytes_sent();
      run();
      const int64_t sent = c.bytes_sent() - before;
      const int64_t analytic =
          !std::strcmp(op, "all_reduce") ? 2 * (p - 1) * nb / p : (p - 1) * nb / p;
      std::vector<double> times;
      const auto start = Clock::now();
      // At least 3 and at most 50 timed calls, until min_time has passed on rank 0's clock (the
      // decision is broadcast: every rank must make the same number of calls).
      while (true) {
        c.barrier();
        const auto t0 = Clock::now();
        run();
        const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
        times.push_back(c.all_reduce_max(dt));
        double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
        c.broadcast(&elapsed, 1, mtron::DType::kF64, 0);
        if ((elapsed >= min_time && times.size() >= 3) || times.size() >= 50) break;
      }
      std::sort(times.begin(), times.end());
      const double t = times[times.size() / 2];
      const double algbw = double(nb) / t / 1e9;
      const double factor = !std::strcmp(op, "all_reduce") ? 2.0 * double(p - 1) / double(p)
                                                           : double(p - 1) / double(p);
      if (l.rank() == 0)
        fmt::print("| {} | {} | {:.3f} | {:.2f} | {:.2f} | {} | {} | {:.3f} |\n", op, nb, t * 1e3,
                   algbw, algbw * factor, sent, analytic,
                   analytic ? double(sent) / double(analytic) : 1.0);
    }
  }
  if (l.rank() == 0) fmt::print("\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> sizes = {int64_t(1) << 16, int64_t(1) << 20, int64_t(1) << 24,
                                int64_t(1) << 26};
  double min_time = 0.5;
  for (int i = 1; i < argc; ++i) {
    if (!std::strncmp(argv[i], "--sizes=", 8)) sizes = parse_sizes(argv[i] + 8);
    if (!std::strncmp(argv[i], "--min-time=", 11)) min_time = std::atof(argv[i] + 11);
  }
  return mtron::run_main(argc, argv, [&](mtron::Launch& l) { return bench(l, sizes, min_time); });
}
