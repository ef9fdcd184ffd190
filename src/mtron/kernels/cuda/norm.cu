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

__global__ void layernorm_forward_kernel(float* out,
                                         float* mean,
                                         float* rstd,
                                         const float* inp,
                                         const float* weight,
                                         const float* bias,
                                         int64_t C,
                                         float eps) {
  __shared__ float red[32];
  const int64_t r = blockIdx.x;
  const float* x = inp + r * C;
  float s = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += x[c];
  const float mu = block_sum(s, red) / float(C);
  float v = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float d = x[c] - mu;
    v += d * d;
  }
  const float rs = 1.0f / sqrtf(block_sum(v, red) / float(C) + eps);
  if (threadIdx.x == 0) {
    mean[r] = mu;
    rstd[r] = rs;
  }
  float* o = out + r * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    o[c] = fmaf((x[c] - mu) * rs, weight[c], bias[c]);
}

// pw/pb: [chunks, C] partial sums of dweight/dbias.
__global__ void layernorm_backward_kernel(float* dinp,
                                          float* pw,
                                          float* pb,
                                          const float* dout,
                                          const float* inp,
                                          const float* weight,
                                          const float* mean,
                                          const float* rstd,
                                          int64_t N,
                                          int64_t C) {
  __shared__ float red[32];
  float* bw = pw + int64_t(blockIdx.x) * C;
  float* bb = pb + int64_t(blockIdx.x) * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) bw[c] = bb[c] = 0;
  const int64_t r0 = int64_t(blockIdx.x) * kRowChunk;
  const int64_t r1 = r0 + kRowChunk < N ? r0 + kRowChunk : N;
  for (int64_t r = r0; r < r1; ++r) {
    const float* x = inp + r * C;
    const float* dy = dout + r * C;
    const float mu = mean[r], rs = rstd[r];
    float sd = 0, sdn = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const float g = dy[c];
      const float n = (x[c] - mu) * rs;
      const float dn = g * weight[c];
      sd += dn;
      sdn = fmaf(dn, n, sdn);
      bb[c] += g;
      bw[c] = fmaf(g, n, bw[c]);
    }
    const float mdn = block_sum(sd, red) / float(C);
    const float mdnn = block_sum(sdn, red) / float(C);
    float* dx = dinp + r * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const float n = (x[c] - mu) * rs;
      const float dn = dy[c] * weight[c];
      dx[c] = fmaf(rs, dn - mdn - n * mdnn, dx[c]);
    }
  }
}

__global__ void rmsnorm_forward_kernel(
    float* out, float* rstd, const float* inp, const float* weight, int64_t C, float eps) {
  __shared__ float red[32];
  const int64_t r = blockIdx.x;
  const float* x = inp + r * C;
  float v = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) v = fmaf(x[c], x[c], v);
  const float rs = 1.0f / sqrtf(block_sum(v, red) / float(C) + eps);
  if (threadIdx.x == 0) rstd[r] = rs;
  float* o = out + r * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) o[c] = x[c] * rs * weight[c];
}

__global__ void rmsnorm_backward_kernel(float* dinp,
                                        float* pw,
                                        const float* dout,
                                        const float* inp,
                                        const float* weight,
                                        const float* rstd,
                                        int64_t N,
                                        int64_t C) {
  __shared__ float red[32];
  float* bw = pw + int64_t(blockIdx.x) * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) bw[c] = 0;
  const int64_t r0 = int64_t(blockIdx.x) * kRowChunk;
  const int64_t r1 = r0 + kRowChunk < N ? r0 + kRowChunk : N;
  for (int64_t r = r0; r < r1; ++r) {
    const float* x = inp + r * C;
    const float* dy = dout + r * C;
    const float rs = rstd[r];
    float sdn = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const float g = dy[c];
      const float n = x[c] * rs;
      sdn = fmaf(g * weight[c], n, sdn);
      bw[c] = fmaf(g, n, bw[c]);
    }
    const float mdnn = block_sum(sdn, red) / float(C);
    float* dx = dinp + r * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const float n = x[c] * rs;
      dx[c] = fmaf(rs, dy[c] * weight[c] - n * mdnn, dx[c]);
    }
  }
}

}  // namespace

void layernorm_forward(const Ctx& ctx, MT_PARAMS(layernorm_forward)) {
  if (N <= 0 || C <= 0) return;
  launch("layernorm_forward", layernorm_forward_kernel, unsigned(N), kThreads, 0, stream_of(ctx),
         out, mean, rstd, inp, weight, bias, C, eps);
}

void layernorm_backward(const Ctx& ctx, MT_PARAMS(layernorm_backward)) {
  if (N <= 0 || C <= 0) return;
  const cudaStream_t s = stream_of(ctx);
  const int64_t chunks = (N + kRowChunk - 1) / kRowChunk;
  Scratch part(sizeof(float) * size_t(2 * chunks * C), s);
  float* pw = part.as<float>();
  float* pb = pw + chunks * C;
  launch("layernorm_backward", layernorm_backward_kernel, unsigned(chunks), kThreads, 0, s, dinp,
         pw, pb, dout, inp, weight, mean, rstd, N, C);
  add_column_sums(s, dweight, pw, chunks, C);
  add_column_sums(s, dbias, pb, chunks, C);
}

void rmsnorm_forward(const Ctx& ctx, MT_PARAMS(rmsnorm_forward)) {
  if (N <= 0 || C <= 0) return;
  launch("rmsnorm_forward", rmsnorm_forward_kernel, unsigned(N), kThreads, 0, stream_of(ctx), out,
         rstd, inp, weight, C, eps);
}

void rmsnorm_backward(const Ctx& ctx, MT_PARAMS(rmsnorm_backward)) {
  if (N <= 0 || C <= 0) return;
  const cudaStream_t s = stream_of(ctx);
  const int64_t chunks = (N + kRowChunk - 1) / kRowChunk;
  Scratch part(sizeof(float) * size_t(chunks * C), s);
  launch("rmsnorm_backward", rmsnorm_backward_kernel, unsigned(chunks), kThreads, 0, s, dinp,
         part.as<float>(), dout, inp, weight, rstd, N, C);
  add_column_sums(s, dweight, part.as<float>(), chunks, C);
}

}  // namespace mtron::kernels::cuda
