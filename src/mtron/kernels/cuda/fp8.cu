// CUDA FP8 quantisation (kernels/fp8.h): a grid-stride pass that writes the quantised values
// (bf16 storage) and one |x| maximum per block, then one block that folds the block maxima into
// *amax. A maximum is exact in any order, so the result does not depend on the grid.
//
// gemm_fp8 (kernels/gemm.h): each operand packed to FP8 bytes with K contiguous (op(A) as
// a[M][Kp], op(B)^T as b[N][Kp], Kp = K rounded up to 16, zero-padded), then the packed product
// (gemm_layout.h gemm_fp8_packed: cuBLASLt's FP8 GEMM, or the emulation's loops). The packing pass
// reads a transposed operand with a stride (one byte written per thread): a tiled transpose through
// shared memory would coalesce it.
#include "mtron/kernels/cuda/common.cuh"
#include "mtron/kernels/cuda/cuda_ops.h"
#include "mtron/kernels/cuda/gemm_layout.h"

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
// +-max; NaN becomes the quiet NaN.
__device__ __forceinline__ float fp8_round(float y, int m, int emin, float max) {
  if (y != y) return __uint_as_float(0x7fc00000u);  // the quiet NaN, whatever y's bits
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

// dst[r][p] = the FP8 byte of src(r, p) (src[r * ld + p], or src[p * ld + r] when transposed) for
// p < K, 0 for K <= p < Kp.
__global__ void pack_kernel(uint8_t* dst,
                            const uint16_t* src,
                            int64_t ld,
                            bool transposed,
                            int64_t rows,
                            int64_t K,
                            int64_t Kp,
                            Fp8Format f) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * Kp;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / Kp, p = i % Kp;
    dst[i] = p < K ? fp8_encode(bf16_bits_to_f32(transposed ? src[p * ld + r] : src[r * ld + p]), f)
                   : uint8_t(0);
  }
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

void gemm_fp8(const Ctx& ctx, MT_PARAMS(gemm_fp8)) {
  if (M == 0 || N == 0) return;
  const cudaStream_t s = stream_of(ctx);
  if (K == 0) {  // op(A) op(B) is empty: C = beta C
    scale_matrix(s, C, M, N, ldc, beta);
    return;
  }
  const int64_t Kp = (K + 15) / 16 * 16;
  Scratch a(size_t(M * Kp), s), b(size_t(N * Kp), s);
  launch("fp8_pack", pack_kernel, grid_for(M * Kp, kThreads), kThreads, 0, s, a.as<uint8_t>(),
         reinterpret_cast<const uint16_t*>(A), lda, ta == Trans::kT, M, K, Kp, fa);
  launch("fp8_pack", pack_kernel, grid_for(N * Kp, kThreads), kThreads, 0, s, b.as<uint8_t>(),
         reinterpret_cast<const uint16_t*>(B), ldb, tb == Trans::kN, N, K, Kp, fb);
  if (gemm_fp8_packed(ctx, M, N, Kp, alpha, a.as<uint8_t>(), fa, b.as<uint8_t>(), fb, beta, C, ldc))
    return;
  // cuBLASLt takes no FP8 GEMM of this form (gemm.cpp warns once): A and B hold exact FP8 values
  // in bf16 (kernels/fp8.h), so the bf16 GEMM computes the same products.
  cuda::gemm(ctx, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace mtron::kernels::cuda
