// CUDA LayerNorm and RMSNorm, forward and backward (kernels/norm.h).
//
// Forward: one block per row; statistics in fp32 with a two-pass variance (the row is re-read
// from L1/L2). Backward: one block per chunk of kRowChunk rows; each row's two means come from
// block reductions, dinp is accumulated in place, and each block writes its chunk's dweight /
// dbias partial sums to a scratch table that add_column_sums reduces in a fixed order, so the
// parameter gradients are deterministic (no atomics).
#include "mtron/kernels/cuda/common.cuh"
#include "mtron/kernels/cuda/cuda_ops.h"

namespace mtron::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kRowChunk = 32;

__device__ __forceinline__ void store_out(float* p, float v) {
  *p = v;
}
__device__ __forceinline__ void store_out(uint16_t* p, float v) {
  *p = f32_to_bf16_bits(v);
}

// kLayer: LayerNorm (the mean subtracted, the bias added); else RMSNorm (mean and bias unused).
// The arguments of layernorm_forward, out fp32 or (uint16_t) bf16; one block per row.
template <bool kLayer, typename T>
__global__ void norm_forward_kernel(T* out,
                                    float* mean,
                                    float* rstd,
                                    const float* inp,
                                    const float* weight,
                                    const float* bias,
                                    int64_t N,
                                    int64_t C,
                                    float eps) {
  __shared__ float red[32];
  const int64_t r = blockIdx.x;
  if (r >= N) return;
  const float* x = inp + r * C;
  float mu = 0, v = 0;
  if constexpr (kLayer) {
    float s = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += x[c];
    mu = block_sum(s, red) / float(C);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const float d = x[c] - mu;
      v += d * d;
    }
  } else {
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) v = fmaf(x[c], x[c], v);
  }
  const float rs = 1.0f / sqrtf(block_sum(v, red) / float(C) + eps);
  if (threadIdx.x == 0) {
    if constexpr (kLayer) mean[r] = mu;
    rstd[r] = rs;
  }
  T* o = out + r * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    if constexpr (kLayer)
      store_out(o + c, fmaf((x[c] - mu) * rs, weight[c], bias[c]));
    else
      store_out(o + c, x[c] * rs * weight[c]);
  }
}

// The arguments of layernorm_backward, but dweight/dbias are [chunks, C] tables of the chunks'
// partial sums, this block's row of which it writes (RMSNorm: dbias and mean unused).
template <bool kLayer>
__global__ void norm_backward_kernel(MT_PARAMS(layernorm_backward)) {
  __shared__ float red[32];
  float* bw = dweight + int64_t(blockIdx.x) * C;
  float* bb = kLayer ? dbias + int64_t(blockIdx.x) * C : nullptr;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    bw[c] = 0;
    if constexpr (kLayer) bb[c] = 0;
  }
  const int64_t r0 = int64_t(blockIdx.x) * kRowChunk;
  const int64_t r1 = r0 + kRowChunk < N ? r0 + kRowChunk : N;
  for (int64_t r = r0; r < r1; ++r) {
    const float* x = inp + r * C;
    const float* dy = dout + r * C;
    const float mu = kLayer ? mean[r] : 0.0f, rs = rstd[r];
    float sd = 0, sdn = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const float g = dy[c];
      const float dn = __fmul_rn(g, weight[c]);  // rounded, as the second pass's
      if constexpr (kLayer) {
        const float n = (x[c] - mu) * rs;
        sd += dn;
        sdn = fmaf(dn, n, sdn);
        bb[c] += g;
        bw[c] = fmaf(g, n, bw[c]);
      } else {
        const float n = x[c] * rs;
        sdn = fmaf(dn, n, sdn);
        bw[c] = fmaf(g, n, bw[c]);
      }
    }
    const float mdn = kLayer ? block_sum(sd, red) / float(C) : 0.0f;
    const float mdnn = block_sum(sdn, red) / float(C);
    float* dx = dinp + r * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      if constexpr (kLayer) {
        const float n = (x[c] - mu) * rs;
        const float dn = __fmul_rn(dy[c], weight[c]);  // not fused into the subtraction
        dx[c] = fmaf(rs, dn - mdn - n * mdnn, dx[c]);
      } else {
        const float n = x[c] * rs;
        dx[c] = fmaf(rs, __fmul_rn(dy[c], weight[c]) - n * mdnn, dx[c]);
      }
    }
  }
}

// The ops, RMSNorm's with layernorm's arguments (its mean and dbias null).
template <bool kLayer, typename T>
void norm_forward(const Ctx& ctx,
                  T* out,
                  float* mean,
                  float* rstd,
                  const float* inp,
                  const float* weight,
                  const float* bias,
                  int64_t N,
                  int64_t C,
                  float eps) {
  if (N <= 0 || C <= 0) return;
  launch(kLayer ? "layernorm_forward" : "rmsnorm_forward", norm_forward_kernel<kLayer, T>,
         unsigned(N), kThreads, 0, stream_of(ctx), out, mean, rstd, inp, weight, bias, N, C, eps);
}

template <bool kLayer>
void norm_backward(const Ctx& ctx, MT_PARAMS(layernorm_backward)) {
  if (N <= 0 || C <= 0) return;
  const cudaStream_t s = stream_of(ctx);
  const int64_t chunks = (N + kRowChunk - 1) / kRowChunk;
  Scratch part(sizeof(float) * size_t((kLayer ? 2 : 1) * chunks * C), s);
  float* pw = part.as<float>();
  float* pb = kLayer ? pw + chunks * C : nullptr;
  launch(kLayer ? "layernorm_backward" : "rmsnorm_backward", norm_backward_kernel<kLayer>,
         unsigned(chunks), kThreads, 0, s, dinp, pw, pb, dout, inp, weight, mean, rstd, N, C);
  add_column_sums(s, dweight, pw, chunks, C);
  if (kLayer) add_column_sums(s, dbias, pb, chunks, C);
}

}  // namespace

void layernorm_forward(const Ctx& ctx, MT_PARAMS(layernorm_forward)) {
  norm_forward<true>(ctx, out, mean, rstd, inp, weight, bias, N, C, eps);
}

void layernorm_forward(const Ctx& ctx, MT_PARAMS(layernorm_forward_bf16)) {
  norm_forward<true>(ctx, reinterpret_cast<uint16_t*>(out), mean, rstd, inp, weight, bias, N, C,
                     eps);
}

void layernorm_backward(const Ctx& ctx, MT_PARAMS(layernorm_backward)) {
  norm_backward<true>(ctx, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

void rmsnorm_forward(const Ctx& ctx, MT_PARAMS(rmsnorm_forward)) {
  norm_forward<false>(ctx, out, nullptr, rstd, inp, weight, nullptr, N, C, eps);
}

void rmsnorm_forward(const Ctx& ctx, MT_PARAMS(rmsnorm_forward_bf16)) {
  norm_forward<false>(ctx, reinterpret_cast<uint16_t*>(out), nullptr, rstd, inp, weight, nullptr, N,
                      C, eps);
}

void rmsnorm_backward(const Ctx& ctx, MT_PARAMS(rmsnorm_backward)) {
  norm_backward<false>(ctx, dinp, dweight, nullptr, dout, inp, weight, nullptr, rstd, N, C);
}

}  // namespace mtron::kernels::cuda
