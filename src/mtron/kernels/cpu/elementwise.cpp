// CPU elementwise ops: add, scale, f32<->bf16 and f32<->f16 conversion, bias add/backward, sum of
// squares, the memset/fill/memcpy forms of fill_zero, fill and copy, and hidden dropout. All
// memory-bound: one pass, split over threads in whole cache lines (dropout: in rows).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "mtron/kernels/cpu/elementwise.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// clang-format off
#include <hwy/highway.h>
#include "mtron/kernels/cpu/simd-inl.h"
// clang-format on

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "mtron/kernels/cpu/cpu_ops.h"
#include "mtron/kernels/cpu/parallel.h"

HWY_BEFORE_NAMESPACE();
namespace mtron::kernels::cpu::HWY_NAMESPACE {

void add(float* out, const float* a, const float* b, int64_t n) {
  const DF d;
  parallel_lanes(d, n, n * 12, [&](int64_t i, size_t k) {
    store(d, hn::Add(load(d, a + i, k), load(d, b + i, k)), out + i, k);
  });
}

void scale_inplace(float* x, float s, int64_t n) {
  const DF d;
  const VF vs = hn::Set(d, s);
  parallel_lanes(d, n, n * 8,
                 [&](int64_t i, size_t k) { store(d, hn::Mul(load(d, x + i, k), vs), x + i, k); });
}

void convert_to_bf16(bf16* dst, const float* src, int64_t n) {
  const DF d;
  const DU16 dh;
  parallel_lanes(d, n, n * 6, [&](int64_t i, size_t k) {
    store(dh, to_bf16(d, load(d, src + i, k)), bits(dst + i), k);
  });
}

void convert_to_fp32(float* dst, const bf16* src, int64_t n) {
  const DF d;
  const DU16 dh;
  parallel_lanes(d, n, n * 6, [&](int64_t i, size_t k) {
    store(d, from_bf16(d, load(dh, bits(src + i), k)), dst + i, k);
  });
}

void convert_to_fp16(f16* dst, const float* src, int64_t n) {
  const DF d;
  const DU16 dh;
  parallel_lanes(d, n, n * 6, [&](int64_t i, size_t k) {
    store(dh, to_f16(d, load(d, src + i, k)), bits(dst + i), k);
  });
}

void convert_fp16_to_fp32(float* dst, const f16* src, int64_t n) {
  const DF d;
  const DU16 dh;
  parallel_lanes(d, n, n * 6, [&](int64_t i, size_t k) {
    store(d, from_f16(d, load(dh, bits(src + i), k)), dst + i, k);
  });
}

void bias_add(float* out, const float* bias, int64_t N, int64_t C) {
  const DF d;
  parallel_rows(N, threads_for(N * C * 8), [&](int64_t r) { add_into(d, out + r * C, bias, C); });
}

// sum_columns of dout (T: float, or bf16 widened exactly); with dout16, each row's range is also
// written to it rounded to bf16 (T float).
template <typename T>
void column_sums(float* dbias, const T* dout, int64_t N, int64_t C, bf16* dout16 = nullptr) {
  const DF d;
  sum_columns(dbias, N, C, N * C * int64_t(sizeof(T)),
              [&](int64_t r, int64_t c0, int64_t w, float* part) {
                add_into(d, part, dout + r * C + c0, w);
                if constexpr (std::is_same_v<T, float>)
                  if (dout16) narrow_into(d, dout16 + r * C + c0, dout + r * C + c0, w);
              });
}

void bias_backward(float* dbias, const float* dout, int64_t N, int64_t C) {
  column_sums(dbias, dout, N, C);
}

void bias_backward_bf16(float* dbias, const bf16* dout, int64_t N, int64_t C) {
  column_sums(dbias, dout, N, C);
}

void bias_backward_narrow(float* dbias, bf16* dout16, const float* dout, int64_t N, int64_t C) {
  column_sums(dbias, dout, N, C, dout16);
}

// Squares summed in fp32 within blocks of 1024 elements, the block sums added in double in block
// order: the same result for any thread count.
void sum_squares(double* result, const float* x, int64_t n) {
  constexpr int64_t kBlock = 1024;
  const DF d;
  std::vector<double> block_sum(size_t((n + kBlock - 1) / kBlock));
  parallel_ranges(n, threads_for(n * 4), kBlock, [&](int64_t i0, int64_t i1) {
    for (int64_t b = i0; b < i1; b += kBlock) {
      VF s0 = hn::Zero(d), s1 = hn::Zero(d);
      const int64_t e = std::min(i1, b + kBlock), L = int64_t(hn::Lanes(d));
      int64_t i = b;
      for (; i + 2 * L <= e; i += 2 * L) {
        const VF a = hn::LoadU(d, x + i), c = hn::LoadU(d, x + i + L);
        s0 = hn::MulAdd(a, a, s0);
        s1 = hn::MulAdd(c, c, s1);
      }
      for_lanes(d, i, e, [&](int64_t j, size_t k) {
        const VF a = load(d, x + j, k);
        s0 = hn::MulAdd(a, a, s0);
      });
      block_sum[size_t(b / kBlock)] = double(hsum(d, hn::Add(s0, s1)));
    }
  });
  double total = 0;
  for (const double s : block_sum) total += s;
  *result += total;
}

void fill_zero(void* x, int64_t bytes) {
  if (bytes > 0) std::memset(x, 0, size_t(bytes));  // x may be null when bytes == 0
}

void fill(float* x, float value, int64_t n) {
  std::fill(x, x + n, value);
}

void copy(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, size_t(bytes));
}

void copy_rows(void* dst,
               int64_t dst_pitch,
               const void* src,
               int64_t src_pitch,
               int64_t row_bytes,
               int64_t rows) {
  if (row_bytes <= 0) return;
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(static_cast<char*>(dst) + r * dst_pitch,
                static_cast<const char*>(src) + r * src_pitch, size_t(row_bytes));
  }
}

void dropout(float* x, const int32_t* pos, int64_t rows, const DropoutRows& d) {
  // a Philox block per 4 elements costs about what streaming 32 bytes per element does
  parallel_rows(rows, threads_for(rows * d.width * 32), [&](int64_t r) {
    thread_local std::vector<float> z;
    z.resize(size_t(d.width));
    const int64_t b = (d.row0 + r) % d.B;
    const uint64_t index0 = uint64_t(((d.sample0 + b) * d.S + pos[r]) * d.width);
    dropout_scales(z.data(), d.key, index0, 1, d.width, d.p);
    float* row = x + r * d.width;
    for (int64_t f = 0; f < d.width; ++f) row[f] *= z[size_t(f)];
  });
}

}  // namespace mtron::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mtron::kernels::cpu {
MTRON_ELEMENTWISE_OPS(MT_CPU_EXPORT)
}  // namespace mtron::kernels::cpu
#endif  // HWY_ONCE
