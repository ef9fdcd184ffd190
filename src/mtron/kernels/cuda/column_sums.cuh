// defines: kColRows, kColChunk, column_sum_kernel, column_sum8_kernel, ColumnsOf, column_sums_of
//
// dst[C] += the column sums of an [R, C] matrix whose element i = r C + c a functor gives,
// load(i) (or load8(i, v), eight at once): a tensor's values (ColumnsOf), or values an op
// computes, stores and sums in one pass.
// Deterministic: every column is summed over chunks of kColChunk rows in a fixed order, the
// chunk sums then added in order.
#pragma once

#include <cstdint>

#include "mtron/kernels/cuda/common.cuh"

namespace mtron::kernels::cuda {

constexpr int kColRows = 8;
constexpr int64_t kColChunk = 256;

// Column sums of rows [row0, row0 + R) over chunks of `chunk` rows. Block (32, 8): 32 columns;
// the 8 thread rows each sum every 8th row of the chunk in order, then thread row 0 adds the 8
// partial sums in order. Grid (ceil(C / 32), chunks). accumulate: out[c] += total (one chunk
// only); else out[chunk * C + c] = total.
template <typename Load>
__global__ void column_sum_kernel(
    float* out, Load load, int64_t row0, int64_t R, int64_t C, int64_t chunk, bool accumulate) {
  __shared__ float part[kColRows][33];
  const int64_t c = int64_t(blockIdx.x) * 32 + threadIdx.x;
  const int64_t r0 = int64_t(blockIdx.y) * chunk;
  const int64_t r1 = r0 + chunk < R ? r0 + chunk : R;
  float s = 0;
  if (c < C)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kColRows) s += load((row0 + r) * C + c);
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float t = 0;
    for (int j = 0; j < kColRows; ++j) t += part[j][threadIdx.x];
    if (accumulate)
      out[c] += t;
    else
      out[int64_t(blockIdx.y) * C + c] = t;
  }
}

// column_sum_kernel with eight columns per thread, for loads with load8(i, v) (values i .. i + 7)
// where C is a multiple of 8: block (32, 8) covers 256 columns, each thread its 8 columns' sums
// in the same order as column_sum_kernel's, so the same sums bit for bit, from 16-byte accesses.
template <typename Load>
__global__ void column_sum8_kernel(
    float* out, Load load, int64_t row0, int64_t R, int64_t C, int64_t chunk, bool accumulate) {
  __shared__ float part[kColRows][8 * 32 + 4];
  const int64_t c = (int64_t(blockIdx.x) * 32 + threadIdx.x) * 8;
  const int64_t r0 = int64_t(blockIdx.y) * chunk;
  const int64_t r1 = r0 + chunk < R ? r0 + chunk : R;
  float s[8] = {};
  if (c < C)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kColRows) {
      float v[8];
      load.load8((row0 + r) * C + c, v);
      MT_UNROLL
      for (int k = 0; k < 8; ++k) s[k] += v[k];
    }
  MT_UNROLL
  for (int k = 0; k < 8; ++k) part[threadIdx.y][threadIdx.x * 8 + k] = s[k];
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    MT_UNROLL
    for (int k = 0; k < 8; ++k) {
      float t = 0;
      for (int j = 0; j < kColRows; ++j) t += part[j][threadIdx.x * 8 + k];
      if (accumulate)
        out[c + k] += t;
      else
        out[int64_t(blockIdx.y) * C + c + k] = t;
    }
  }
}

// The values of src (float, or uint16_t holding bf16); with src16, each also written there as
// bf16 (src float).
template <typename T>
struct ColumnsOf {
  const T* src;
  uint16_t* src16 = nullptr;
  __device__ float operator()(int64_t i) const {
    const float v = load_f32(src + i);
    if (src16) src16[i] = f32_to_bf16_bits(v);
    return v;
  }
  __device__ void load8(int64_t i, float (&v)[8]) const {
    cuda::load8(v, src + i);
    if (src16) store8(src16 + i, v);
  }
  bool aligned() const { return aligned16({src, src16}); }
};

// Load: a functor with operator()(i), load8(i, v) and aligned() (whether load8 may read its
// tensors: 16-byte aligned); eight columns per thread where C is a multiple of 8 and it may.
template <typename Load>
void column_sums_of(cudaStream_t stream, float* dst, Load load, int64_t R, int64_t C) {
  if (R <= 0 || C <= 0) return;
  const bool by8 = C % 8 == 0 && load.aligned();
  const unsigned col_blocks = unsigned(by8 ? (C + 255) / 256 : (C + 31) / 32);
  const auto kernel = by8 ? column_sum8_kernel<Load> : column_sum_kernel<Load>;
  const dim3 block(32, kColRows);
  if (R <= kColChunk) {
    launch("column_sum", kernel, dim3(col_blocks, 1), block, 0, stream, dst, load, int64_t(0), R, C,
           R, true);
    return;
  }
  const int64_t chunks = (R + kColChunk - 1) / kColChunk;
  Scratch part(sizeof(float) * size_t(chunks * C), stream);
  // grid.y is limited to 65535 chunks (16.7M rows); larger R is split into slices of rows
  for (int64_t c0 = 0; c0 < chunks; c0 += 65535) {
    const int64_t nc = chunks - c0 < 65535 ? chunks - c0 : 65535;
    launch("column_sum", kernel, dim3(col_blocks, unsigned(nc)), block, 0, stream,
           part.as<float>() + c0 * C, load, c0 * kColChunk,
           R - c0 * kColChunk < nc * kColChunk ? R - c0 * kColChunk : nc * kColChunk, C, kColChunk,
           false);
  }
  column_sums_of(stream, dst, ColumnsOf<float>{part.as<float>()}, chunks, C);
}

}  // namespace mtron::kernels::cuda
