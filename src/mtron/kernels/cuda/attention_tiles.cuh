// defines: padded_d, quad_sum, quad_max, visible, stat_at, seen, prob, key_end,
//          BwdTensors, store_grad, allow_smem, with_max_d, attention_forward_tc,
//          attention_backward_tc
//
// What the CUDA attention kernels share (kernels/attention.h's layouts and mask): the fp32
// kernels of attention.cu and the tensor-core kernels of attention_tc.cu, which
// attention_forward / attention_backward (attention.cu) run for AttnShape::bf16_products.
#pragma once

#include <cstdint>
#include <type_traits>

#include "mtron/kernels/attention.h"
#include "mtron/kernels/cuda/common.cuh"

namespace mtron::kernels::cuda {

// A head dim padded to a multiple of 16 (the tiles' widths, zeros beyond D).
__host__ __device__ __forceinline__ int padded_d(int64_t D) {
  return int((D + 15) / 16 * 16);
}

// Sum (or max) over 4 adjacent lanes of a warp (a tile row's threads).
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ bool visible(const AttnMask& m, int64_t i, int64_t j) {
  return !m.causal || j <= i + m.offset;
}
// Index of query row i of head h, batch b in lse and delta [B, H, Sq].
__device__ __forceinline__ int64_t stat_at(const AttnShape& s, int64_t b, int64_t h, int64_t i) {
  return (b * s.H + h) * s.Sq + i;
}
// Whether query i and key j exist and i sees j.
__device__ __forceinline__ bool seen(const AttnShape& s, const AttnMask& m, int64_t i, int64_t j) {
  return i < s.Sq && j < s.Sk && visible(m, i, j);
}
// P[i, j] = exp(score * scale - lse_i) where query i exists and sees key j, else 0.
__device__ __forceinline__ float prob(
    const AttnShape& s, const AttnMask& m, int64_t i, int64_t j, float score, float l) {
  const bool vis = seen(s, m, i, j) && l != kNegInf;
  return vis ? expf(score * s.scale - l) : 0.0f;
}

// The backward's tensors (kernels/attention.h) and delta (dO . O per query row); T: float, or
// uint16_t (bf16 bits).
template <typename T>
struct BwdTensors {
  T* dq;
  T* dk;
  T* dv;
  const T* dout;
  const T* q;
  const T* k;
  const T* v;
  const float* lse;
  const float* delta;
  // f(p) for every pointer (the emulation checks that each is device memory).
  template <typename F>
  void for_each_pointer(F f) const {
    for (const void* p :
         {static_cast<const void*>(dq), static_cast<const void*>(dk), static_cast<const void*>(dv),
          static_cast<const void*>(dout), static_cast<const void*>(q), static_cast<const void*>(k),
          static_cast<const void*>(v), static_cast<const void*>(lse),
          static_cast<const void*>(delta)})
      f(p);
  }
};

// A gradient's contribution x to *p: fp32 gradients accumulate (+=), bf16 ones are written
// (kernels/attention.h).
__device__ __forceinline__ void store_grad(float* p, float x) {
  *p += x;
}
__device__ __forceinline__ void store_grad(uint16_t* p, float x) {
  *p = f32_to_bf16_bits(x);
}

// End (exclusive) of the keys visible to query rows [i0, i1).
__host__ __device__ __forceinline__ int64_t key_end(const AttnShape& s,
                                                    const AttnMask& m,
                                                    int64_t i1) {
  if (!m.causal) return s.Sk;
  const int64_t e = i1 - 1 + m.offset + 1;
  return e < 0 ? 0 : (e > s.Sk ? s.Sk : e);
}

// Lets `kernel` use `bytes` of dynamic shared memory (above the default 48 KB needs an opt-in).
template <typename... Params>
void allow_smem(void (*kernel)(Params...), size_t bytes) {
#ifdef MTRON_CUDA_SIM
  (void)kernel;
  (void)bytes;
#else
  if (bytes > 48 * 1024)
    MT_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
#endif
}

// f(std::integral_constant<int, kMaxD>) for the kernels' kMaxD of the larger head dim.
template <typename F>
void with_max_d(const AttnShape& s, F f) {
  const int64_t D = s.D > s.Dv ? s.D : s.Dv;
  if (D <= 32) return f(std::integral_constant<int, 32>());
  if (D <= 64) return f(std::integral_constant<int, 64>());
  if (D <= 128) return f(std::integral_constant<int, 128>());
  f(std::integral_constant<int, 256>());
}

// The tensor-core kernels (attention_tc.cu): bf16 operands, fp32 accumulation; the same
// layouts, mask and lse as the fp32 ones, tensors of element type T (float, or uint16_t: bf16
// bits) with store_grad's contract for dq, dk, dv. No dropout (the caller checks). False, with
// nothing launched, where the device gives a block less shared memory than they need (an A100
// at head dim 256): the caller runs the fp32 kernels.
template <typename T>
bool attention_forward_tc(cudaStream_t st,
                          T* out,
                          float* lse,
                          const T* q,
                          const T* k,
                          const T* v,
                          const AttnShape& s,
                          const AttnMask& mask);
template <typename T>
bool attention_backward_tc(cudaStream_t st,
                           const BwdTensors<T>& t,
                           const AttnShape& s,
                           const AttnMask& mask);

}  // namespace mtron::kernels::cuda
