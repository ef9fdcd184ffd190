// CUDA FP8 quantisation (kernels/fp8.h): a grid-stride pass that writes the quantised values
// (bf16 storage) and one |x| maximum per block, then one block that folds the block maxima into
// *amax. A maximum is exact in any order, so the result does not depend on the grid.
#include "mtron/kernels/cuda/common.cuh"
#include "mtron/kernels/cuda/cuda_ops.h"

namespace mtron::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float load_value(const float* p, int64_t i) {
  return p[i];
}
__device__ __forceinline__ float load_value(const uint16_t* p, int64_t i) {
  return bf16_bits_to_f32(p[i]);
}

// y on the FP8 grid of m mantissa bits and smallest normal 2^emin (ties to even), saturated at
// +-max; NaN stays NaN.
__device__ __forceinline__ float fp8_round(float y, int m, int emin, float max) {
  if (y != y) return y;
  const float a = fabsf(y);
  float q;
  if (a >= max) {
    q = max;
  } else if (a < ldexpf(1.0f, emin)) {
    // adding 2^(emin - m + 23), whose ulp is the subnormal quantum, rounds to that quantum
    const float magic = ldexpf(1.0f, emin - m + 23);
    q = (a + magic) - magic;
  } else {
    const int drop = 23 - m;
    unsigned u = __float_as_uint(a);
    u += ((u >> drop) & 1u) + (1u << (drop - 1)) - 1u;
    q = __uint_as_float(u & ~((1u << drop) - 1u));
  }
  return copysignf(q, y);
}

template <typename S>
__global__ void quantize_kernel(
    uint16_t* dst, float* part, const S* src, float scale, int m, int emin, float max, int64_t n) {
  __shared__ float red[32];
  float amax = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float x = load_value(src, i);
    if (x == x) amax = fmaxf(amax, fabsf(x));
    if (dst) dst[i] = f32_to_bf16_bits(fp8_round(x * scale, m, emin, max));
  }
  amax = block_max(amax, red);
  if (threadIdx.x == 0) part[blockIdx.x] = amax;
}

__global__ void fold_max_kernel(float* amax, const float* part, int64_t n) {
  __shared__ float red[32];
  float m = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, part[i]);
  m = block_max(m, red);
  if (threadIdx.x == 0) *amax = fmaxf(*amax, m);
}

// dst null: the amax alone; amax null: the values alone.
template <typename S>
void run(
    const Ctx& ctx, uint16_t* dst, float* amax, const S* src, float scale, Fp8Format f, int64_t n) {
  if (n <= 0) return;
  const cudaStream_t s = stream_of(ctx);
  const unsigned blocks = grid_for(n, kThreads);
  Scratch part(sizeof(float) * blocks, s);
  const bool e4m3 = f == Fp8Format::kE4M3;
  launch("fp8_quantize", quantize_kernel<S>, blocks, kThreads, 0, s, dst, part.as<float>(), src,
         scale, e4m3 ? 3 : 2, e4m3 ? -6 : -14, fp8_max(f), n);
  if (amax) {
    launch("fp8_amax", fold_max_kernel, 1, kThreads, 0, s, amax, part.as<float>(), int64_t(blocks));
  }
}

}  // namespace

void fp8_quantize(const Ctx& ctx,
                  bf16* dst,
                  float* amax,
                  const float* src,
                  float scale,
                  Fp8Format format,
                  int64_t n) {
  run(ctx, reinterpret_cast<uint16_t*>(dst), amax, src, scale, format, n);
}

void fp8_quantize(const Ctx& ctx,
                  bf16* dst,
                  float* amax,
                  const bf16* src,
                  float scale,
                  Fp8Format format,
                  int64_t n) {
  run(ctx, reinterpret_cast<uint16_t*>(dst), amax, reinterpret_cast<const uint16_t*>(src), scale,
      format, n);
}

void abs_max(const Ctx& ctx, float* amax, const float* src, int64_t n) {
  run(ctx, static_cast<uint16_t*>(nullptr), amax, src, 1.0f, Fp8Format::kE4M3, n);
}

void abs_max(const Ctx& ctx, float* amax, const bf16* src, int64_t n) {
  run(ctx, static_cast<uint16_t*>(nullptr), amax, reinterpret_cast<const uint16_t*>(src), 1.0f,
      Fp8Format::kE4M3, n);
}

}  // namespace mtron::kernels::cuda
