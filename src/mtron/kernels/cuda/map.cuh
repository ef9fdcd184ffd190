// defines: map_kernel, map2_kernel, map1, map2, rows_by8, row_threads
//
// Elementwise maps over float tensors or bf16 ones (uint16_t bits): out[i] = f(a[i]) or
// f(a[i], b[i]) for i < n, in fp32, stored as store_as does. Memory-bound, so each thread moves
// eight elements per tensor at a time with 16-byte accesses (load8/store8) where every tensor is
// 16-byte aligned, keeping 16 bytes per tensor in flight where a scalar access kept 2 or 4 (a
// grid-stride loop of one bf16 element per thread leaves the loads' latency exposed); the last
// n % 8 elements, or all of them where a tensor is not aligned, one at a time. The results are
// the same either way: f sees the same values.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "mtron/kernels/cuda/common.cuh"

namespace mtron::kernels::cuda {

constexpr int kMapThreads = 256;

// Elements [0, n8) eight at a time, the rest one at a time.
template <typename F, typename O, typename I>
__global__ void map_kernel(F f, O* out, const I* a, int64_t n, int64_t n8) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = 8 * t; i < n8; i += 8 * stride) {
    float v[8];
    load8(v, a + i);
    MT_UNROLL
    for (int k = 0; k < 8; ++k) v[k] = f(v[k]);
    store8(out + i, v);
  }
  for (int64_t i = n8 + t; i < n; i += stride) store_as(out + i, f(load_f32(a + i)));
}

template <typename F, typename O, typename I>
__global__ void map2_kernel(F f, O* out, const I* a, const I* b, int64_t n, int64_t n8) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = 8 * t; i < n8; i += 8 * stride) {
    float v[8], w[8];
    load8(v, a + i);
    load8(w, b + i);
    MT_UNROLL
    for (int k = 0; k < 8; ++k) v[k] = f(v[k], w[k]);
    store8(out + i, v);
  }
  for (int64_t i = n8 + t; i < n; i += stride)
    store_as(out + i, f(load_f32(a + i), load_f32(b + i)));
}

// The elements the map kernels take eight at a time (every full group of 8 where all tensors
// are 16-byte aligned, else none), and the blocks that leaves work for.
inline int64_t vector_part(int64_t n, std::initializer_list<const void*> ptrs) {
  return aligned16(ptrs) ? n / 8 * 8 : 0;
}
inline unsigned map_grid(int64_t n, int64_t n8) {
  return grid_for(n8 / 8 + (n - n8), kMapThreads);
}

// Whether kernels over rows of `cols` elements take 8 columns a thread (load_n/store_n<8>): cols
// a multiple of 8 and every tensor 16-byte aligned (then so is every row); else 1.
inline bool rows_by8(int64_t cols, std::initializer_list<const void*> ptrs) {
  return cols % 8 == 0 && aligned16(ptrs);
}
// The threads of a block over `groups` column groups of a row: a multiple of 32, at most cap.
inline int row_threads(int64_t groups, int cap) {
  return int(groups < cap ? (groups + 31) / 32 * 32 : cap);
}

// out = f(a), out = f(a, b): one launch named `name` on `stream`.
template <typename F, typename O, typename I>
void map1(const char* name, cudaStream_t stream, F f, O* out, const I* a, int64_t n) {
  const int64_t n8 = vector_part(n, {out, a});
  launch(name, map_kernel<F, O, I>, map_grid(n, n8), kMapThreads, 0, stream, f, out, a, n, n8);
}
template <typename F, typename O, typename I>
void map2(const char* name, cudaStream_t stream, F f, O* out, const I* a, const I* b, int64_t n) {
  const int64_t n8 = vector_part(n, {out, a, b});
  launch(name, map2_kernel<F, O, I>, map_grid(n, n8), kMapThreads, 0, stream, f, out, a, b, n, n8);
}

}  // namespace mtron::kernels::cuda
