// CPU embedding lookup and its backward.
//
// Backward determinism: threads split the *columns* of the table, and each thread walks all N
// tokens in order, so every dtable element receives its additions in token order whatever the
// thread count (and no two threads ever touch the same element: no atomics, no partial tables).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "mtron/kernels/cpu/embedding.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// clang-format off
#include <hwy/highway.h>
#include "mtron/kernels/cpu/simd-inl.h"
// clang-format on

#include <cstring>

#include "mtron/kernels/cpu/cpu_ops.h"
#include "mtron/kernels/cpu/parallel.h"

HWY_BEFORE_NAMESPACE();
namespace mtron::kernels::cpu::HWY_NAMESPACE {
void embedding_forward(MT_PARAMS(embedding_forward)) {
  const DF d;
  parallel_rows(N, threads_for(N * C * 8), [&](int64_t n) {
    const int64_t r = int64_t(ids[n]) - row_start;
    float* o = out + n * C;
    const bool in_range = r >= 0 && r < rows;
    if (!accumulate) {
      if (in_range)
        std::memcpy(o, table + r * C, size_t(C) * sizeof(float));
      else
        std::memset(o, 0, size_t(C) * sizeof(float));
    } else if (in_range) {
      add_into(d, o, table + r * C, C);
    }
  });
}

void embedding_backward(MT_PARAMS(embedding_backward)) {
  const DF d;
  parallel_ranges(C, threads_for(N * C * 8), kLine, [&](int64_t c0, int64_t c1) {
    for (int64_t n = 0; n < N; ++n) {
      const int64_t r = int64_t(ids[n]) - row_start;
      if (r < 0 || r >= rows) continue;
      add_into(d, dtable + r * C + c0, dout + n * C + c0, c1 - c0);
    }
  });
}

}  // namespace mtron::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mtron::kernels::cpu {
MTRON_EMBEDDING_OPS(MT_CPU_EXPORT)
}  // namespace mtron::kernels::cpu
#endif  // HWY_ONCE
