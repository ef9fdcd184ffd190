// defines: kLine, split_range, threads_for: how the CPU kernels split work over OpenMP threads
//
// Independent of the SIMD target, so that every target splits a call the same way.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace mtron::kernels::cpu {

constexpr int64_t kLine = 16;  // floats per 64-byte cache line

// The contiguous share [begin, end) of n items for thread `t` of `nt`, in units of `align`
// items (so vector loops see whole cache lines except in the last share).
inline void split_range(int64_t n, int t, int nt, int64_t align, int64_t* begin, int64_t* end) {
  const int64_t units = (n + align - 1) / align;
  const int64_t per = units / nt, rem = units % nt;
  const int64_t u0 = t * per + std::min<int64_t>(t, rem);
  const int64_t u1 = u0 + per + (t < rem ? 1 : 0);
  *begin = std::min(n, u0 * align);
  *end = std::min(n, u1 * align);
}

// Threads worth using for `bytes` of streaming work: one thread per ~256 KB, so small calls do
// not pay the OpenMP fork/join (a few microseconds) for nothing.
inline int threads_for(int64_t bytes) {
  const int64_t want = std::max<int64_t>(1, bytes / (256 << 10));
  return int(std::min<int64_t>(want, omp_get_max_threads()));
}

}  // namespace mtron::kernels::cpu
