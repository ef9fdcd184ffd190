// The OpenMP regions of the CPU kernels (parallel.h says why they are here).
#include "mtron/kernels/cpu/parallel.h"

#include <omp.h>

namespace mtron::kernels::cpu {

int max_threads() {
  return omp_get_max_threads();
}

int threads_for(int64_t bytes) {
  const int64_t want = std::max<int64_t>(1, bytes / (256 << 10));
  return int(std::min<int64_t>(want, max_threads()));
}

void parallel_run(int nt, FnRef<void(int, int)> fn) {
  if (nt <= 1) return fn(0, 1);
#pragma omp parallel num_threads(nt)
  {
    const int got = omp_get_num_threads();
    for (int t = omp_get_thread_num(); t < nt; t += got) fn(t, nt);
  }
}

void parallel_ranges(int64_t n, int nt, int64_t align, FnRef<void(int64_t, int64_t)> fn) {
  parallel_run(nt, [&](int t, int workers) {
    int64_t begin, end;
    split_range(n, t, workers, align, &begin, &end);
    if (begin < end) fn(begin, end);
  });
}

void parallel_rows(int64_t n, int nt, FnRef<void(int64_t)> fn) {
  parallel_ranges(n, nt, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) fn(i);
  });
}

}  // namespace mtron::kernels::cpu
