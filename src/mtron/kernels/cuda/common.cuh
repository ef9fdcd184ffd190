// defines: MT_UNROLL, MT_DYNAMIC_SMEM, launch, grid_for, warp_sum, warp_max, block_sum,
//          block_sums, block_max, f32_to_bf16_bits, bf16_bits_to_f32, store_as, load_f32, load8,
//          store8, load_n, store_n, f32_to_f16_bits, f16_bits_to_f32, kNegInf, pack_bf16x2,
//          mma_bf16_16816, ldmatrix_x4, cp_async16, cp_async_wait_all, bits
//
// Device-side helpers for the kernels (.cu). Every launch goes through launch(), which checks
// the launch (runtime.h, check_launch); under MTRON_CUDA_SIM it runs the grid in the CPU
// emulation instead.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mtron/kernels/cuda/runtime.h"

#ifdef MTRON_CUDA_SIM
#define MT_UNROLL
#define MT_DYNAMIC_SMEM(name) unsigned char* name = ::mtron::sim::dynamic_smem()
#else
#define MT_UNROLL _Pragma("unroll")
#define MT_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

namespace mtron::kernels::cuda {

// Blocks for a grid-stride loop over n items: enough to fill the GPU, never more than needed.
inline unsigned grid_for(int64_t n, int threads) {
#ifdef MTRON_CUDA_SIM
  const int64_t cap = 2;  // the emulation runs blocks one by one: keep grids small
#else
  const int64_t cap = 132 * 16;  // H100/H200 have 132 SMs; 16 blocks each covers any occupancy
#endif
  const int64_t b = (n + threads - 1) / threads;
  return unsigned(b < 1 ? 1 : (b > cap ? cap : b));
}

template <typename... Params, typename... Args>
void launch(const char* name,
            void (*kernel)(Params...),
            dim3 grid,
            dim3 block,
            size_t smem_bytes,
            cudaStream_t stream,
            Args... args) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
  ++work().launches;
#ifdef MTRON_CUDA_SIM
  (void)stream;
  (sim::check_device_arg(name, args), ...);
  sim::launch(grid, block, smem_bytes, [&] { kernel(args...); });
#else
  // clang-format off
  kernel<<<grid, block, smem_bytes, stream>>>(args...);  // clang-format 14 splits the >>>
  // clang-format on
  check_launch(name, stream);
#endif
}

constexpr float kNegInf = -__builtin_huge_valf();

// Sum over the 32 lanes of a warp. The xor butterfly gives every lane the bitwise same result
// (at each step both partner lanes add the same two operands).
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  MT_UNROLL
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <typename T>
__device__ __forceinline__ T warp_max(T v) {
  MT_UNROLL
  for (int o = 16; o > 0; o >>= 1) {
    const T u = __shfl_xor_sync(0xffffffffu, v, o);
    v = u > v ? u : v;
  }
  return v;
}

// Block reductions over a one-dimensional block (blockDim.x a multiple of 32). Every thread
// returns the same value; the order of the operations is fixed, so the result is deterministic.
// `red` is a shared array of at least 32 elements; the leading barrier lets calls follow one
// another.

// Puts warp w's reduction (warp_op) of v[k] in red[32 k + w] for every warp and each k < N (red:
// at least 32 N elements); returns the number of warps. N values share one pair of barriers.
template <int N, typename T, typename WarpOp>
__device__ __forceinline__ int warp_partials(T (&v)[N], T* red, WarpOp warp_op) {
  const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32);
  MT_UNROLL
  for (int k = 0; k < N; ++k) v[k] = warp_op(v[k]);
  __syncthreads();
  if (lane == 0) {
    MT_UNROLL
    for (int k = 0; k < N; ++k) red[32 * k + warp] = v[k];
  }
  __syncthreads();
  return int(blockDim.x / 32);
}

// v[k] = the block's sum of v[k] for each k < N (red: at least 32 N elements); each sum the same
// value, in the same order of operations, whatever N.
template <int N, typename T>
__device__ __forceinline__ void block_sums(T (&v)[N], T* red) {
  const int nwarps = warp_partials(v, red, [](T x) { return warp_sum(x); });
  MT_UNROLL
  for (int k = 0; k < N; ++k) {
    v[k] = 0;
    for (int w = 0; w < nwarps; ++w) v[k] += red[32 * k + w];
  }
}

template <typename T>
__device__ __forceinline__ T block_sum(T v, T* red) {
  T s[1] = {v};
  block_sums(s, red);
  return s[0];
}

template <typename T>
__device__ __forceinline__ T block_max(T v, T* red) {
  T m[1] = {v};
  const int nwarps = warp_partials(m, red, [](T x) { return warp_max(x); });
  T r = red[0];
  for (int w = 1; w < nwarps; ++w) r = red[w] > r ? red[w] : r;
  return r;
}

// mtron::float_to_bf16 bit for bit: round to nearest even, NaN stays NaN (quieted).
__device__ __forceinline__ uint16_t f32_to_bf16_bits(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
__device__ __forceinline__ float bf16_bits_to_f32(uint16_t b) {
  return __uint_as_float(unsigned(b) << 16);
}

// A host-side bf16 tensor as the kernels take it: its uint16_t bits.
inline uint16_t* bits(bf16* p) {
  return reinterpret_cast<uint16_t*>(p);
}
inline const uint16_t* bits(const bf16* p) {
  return reinterpret_cast<const uint16_t*>(p);
}

// An fp32 value stored as float, or as bf16 bits (f32_to_bf16_bits); read back as fp32.
__device__ __forceinline__ void store_as(float* p, float v) {
  *p = v;
}
__device__ __forceinline__ void store_as(uint16_t* p, float v) {
  *p = f32_to_bf16_bits(v);
}
__device__ __forceinline__ float load_f32(const float* p) {
  return *p;
}
__device__ __forceinline__ float load_f32(const uint16_t* p) {
  return bf16_bits_to_f32(*p);
}

// Eight consecutive values at p (16-byte aligned) as fp32, and stored back (bf16 rounded as
// store_as): 16-byte loads and stores, one per 8 bf16 or per 4 floats, so that a thread keeps
// 16 bytes per tensor in flight where a scalar access kept 2 or 4.
__device__ __forceinline__ void load8(float (&v)[8], const float* p) {
  const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void load8(float (&v)[8], const uint16_t* p) {
  const uint4 w = *reinterpret_cast<const uint4*>(p);
  const unsigned u[4] = {w.x, w.y, w.z, w.w};
  MT_UNROLL
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(u[i] << 16);
    v[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ void store8(float* p, const float (&v)[8]) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  *reinterpret_cast<float4*>(p + 4) = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ __forceinline__ void store8(uint16_t* p, const float (&v)[8]) {
  unsigned u[4];
  MT_UNROLL
  for (int i = 0; i < 4; ++i)
    u[i] = unsigned(f32_to_bf16_bits(v[2 * i])) | unsigned(f32_to_bf16_bits(v[2 * i + 1])) << 16;
  *reinterpret_cast<uint4*>(p) = make_uint4(u[0], u[1], u[2], u[3]);
}

// W = 8 consecutive values (load8/store8, 16-byte aligned) or W = 1 (load_f32/store_as): kernels
// templated on W take the vector path where every tensor allows it and the scalar one elsewhere.
template <int W, typename T>
__device__ __forceinline__ void load_n(float (&v)[W], const T* p) {
  if constexpr (W == 8)
    load8(v, p);
  else
    v[0] = load_f32(p);
}
template <int W, typename T>
__device__ __forceinline__ void store_n(T* p, const float (&v)[W]) {
  if constexpr (W == 8)
    store8(p, v);
  else
    store_as(p, v[0]);
}

// mtron::float_to_f16 bit for bit (as __float2half_rn, but NaN becomes 0x7e00 with its sign).
__device__ __forceinline__ uint16_t f32_to_f16_bits(float f) {
  unsigned u = __float_as_uint(f);
  const unsigned sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  if (u >= 0x47800000u) return uint16_t(sign | (u > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (u < 0x38800000u)
    return uint16_t(sign | (__float_as_uint(__uint_as_float(u) + 0.5f) - 0x3f000000u));
  return uint16_t(sign | ((u + 0xc8000fffu + ((u >> 13) & 1u)) >> 13));
}
// mtron::f16_to_float: exact.
__device__ __forceinline__ float f16_bits_to_f32(uint16_t h) {
  const unsigned s = unsigned(h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 1023u;
  if (e == 31) return __uint_as_float(s | 0x7f800000u | m << 13);
  if (e != 0) return __uint_as_float(s | (e + 112u) << 23 | m << 13);
  return __uint_as_float(s | __float_as_uint(float(m) * 5.9604644775390625e-8f));  // m 2^-24
}

// Two floats as one register of two bf16 (round to nearest even), lo in the low half: the
// operand form of mma_bf16_16816.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
#ifdef MTRON_CUDA_SIM
  return uint32_t(f32_to_bf16_bits(lo)) | uint32_t(f32_to_bf16_bits(hi)) << 16;
#else
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#endif
}

// c += A B on the tensor cores for one warp (every lane calls it): A 16 x 16 and B 16 x 8 in
// bf16, c 16 x 8 in fp32, each lane holding the fragments of the PTX ISA's
// mma.m16n8k16.row.col layout (lane = 4 group + tig): a[r] = A[group + 8 (r & 1)][2 tig +
// 8 (r >> 1) + {0, 1}], b[r] = B[2 tig + 8 r + {0, 1}][group] (low half first), c[e] =
// C[group + 8 (e >> 1)][2 tig + (e & 1)]. sm_80 and later; the emulation computes it in fp32.
__device__ __forceinline__ void mma_bf16_16816(float (&c)[4],
                                               const uint32_t (&a)[4],
                                               const uint32_t (&b)[2]) {
#ifdef MTRON_CUDA_SIM
  sim::mma_bf16_16816(c, a, b);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// ldmatrix.x4: four 8 x 8 bf16 matrices from shared memory, lane l giving the address of row
// l % 8 of matrix l / 8 (16 contiguous bytes, 16-byte aligned); r[m] is matrix m's row
// lane / 4, columns 2 (lane % 4) + {0, 1} (low half first), or with kTrans its column lane / 4,
// rows 2 (lane % 4) + {0, 1}: the mma fragments of a row-major tile (and, transposed, of its
// transpose) in one instruction. Every lane of the warp calls it.
template <bool kTrans>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* row) {
#ifdef MTRON_CUDA_SIM
  sim::ldmatrix_x4(r, row, kTrans);
#else
  const unsigned a = unsigned(__cvta_generic_to_shared(row));
  if constexpr (kTrans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
#endif
}

// cp.async: 16 bytes from global to shared memory without passing through registers, of which
// the first src_bytes (0 or 16) are read and the rest zero-filled; both addresses 16-byte aligned.
// The copies a thread issued are complete (visible to it) after cp_async_wait_all; a
// __syncthreads after that makes them visible to the block. The emulation copies at once.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
#ifdef MTRON_CUDA_SIM
  sim::cp_async16(smem, gmem, src_bytes);
#else
  const unsigned a = unsigned(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(a), "l"(gmem), "r"(src_bytes));
#endif
}
__device__ __forceinline__ void cp_async_wait_all() {
#ifndef MTRON_CUDA_SIM
  asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

}  // namespace mtron::kernels::cuda
