// CUDA LayerNorm and RMSNorm, forward and backward (kernels/norm.h).
//
// Forward: one block per row; statistics in fp32 with a two-pass variance (the row is re-read
// from L1/L2). Backward: one block per chunk of kRowChunk rows; each row's two means come from
// block reductions, dinp is accumulated in place, and each block writes its chunk's dweight /
// dbias partial sums (kept in registers over the chunk's rows, up to 8192 columns) to a scratch
// table that add_column_sums reduces in a fixed order, so the parameter gradients are
// deterministic (no atomics).
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

// One element of a row in the backward's first pass: the row sums sd (of dn = dy w, LayerNorm)
// and sdn (of dn n, n the normalised input), and the element's weight and bias gradient
// partials pw, pb.
template <bool kLayer>
__device__ __forceinline__ void backward_sums(
    float g, float x, float w, float mu, float rs, float& sd, float& sdn, float& pw, float& pb) {
  const float dn = __fmul_rn(g, w);  // rounded, as the second pass's
  const float n = kLayer ? (x - mu) * rs : x * rs;
  if constexpr (kLayer) {
    sd += dn;
    pb += g;
  }
  sdn = fmaf(dn, n, sdn);
  pw = fmaf(g, n, pw);
}
// The second pass: dx + rs (dn - mean(dn) - n mean(dn n)) (RMSNorm: without mean(dn)).
template <bool kLayer>
__device__ __forceinline__ float backward_dx(
    float g, float x, float w, float mu, float rs, float mdn, float mdnn, float dx) {
  const float n = kLayer ? (x - mu) * rs : x * rs;
  const float dn = __fmul_rn(g, w);  // not fused into the subtraction
  return kLayer ? fmaf(rs, dn - mdn - n * mdnn, dx) : fmaf(rs, dn - n * mdnn, dx);
}

// The arguments of layernorm_backward, but dweight/dbias are [chunks, C] tables of the chunks'
// partial sums, this block's row of which it writes (RMSNorm: dbias and mean unused). kPer > 0:
// each thread owns columns threadIdx.x + k blockDim.x (k < kPer, C <= kPer blockDim.x) and keeps
// their partials and the row's inputs in registers, so a row is read once and the partials are
// written once per chunk; kPer = 0 (wider rows): the partials accumulate in the table and the
// second pass reads the row again. The same arithmetic in the same order either way.
template <bool kLayer, int kPer>
__global__ void __launch_bounds__(2 * kThreads)
    norm_backward_kernel(MT_PARAMS(layernorm_backward)) {
  __shared__ float red[32];
  float* bw = dweight + int64_t(blockIdx.x) * C;
  float* bb = kLayer ? dbias + int64_t(blockIdx.x) * C : nullptr;
  constexpr int kRegs = kPer > 0 ? kPer : 1;
  float pw[kRegs] = {}, pb[kRegs] = {};
  if constexpr (kPer == 0) {
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      bw[c] = 0;
      if constexpr (kLayer) bb[c] = 0;
    }
  }
  const int64_t r0 = int64_t(blockIdx.x) * kRowChunk;
  const int64_t r1 = r0 + kRowChunk < N ? r0 + kRowChunk : N;
  for (int64_t r = r0; r < r1; ++r) {
    const float* x = inp + r * C;
    const float* dy = dout + r * C;
    float* dx = dinp + r * C;
    const float mu = kLayer ? mean[r] : 0.0f, rs = rstd[r];
    float sd = 0, sdn = 0;
    float xs[kRegs], gs[kRegs];
    if constexpr (kPer > 0) {
      MT_UNROLL
      for (int k = 0; k < kPer; ++k) {
        const int64_t c = threadIdx.x + int64_t(k) * blockDim.x;
        xs[k] = c < C ? x[c] : 0.0f;
        gs[k] = c < C ? dy[c] : 0.0f;
      }
      MT_UNROLL
      for (int k = 0; k < kPer; ++k) {
        const int64_t c = threadIdx.x + int64_t(k) * blockDim.x;
        if (c < C) backward_sums<kLayer>(gs[k], xs[k], weight[c], mu, rs, sd, sdn, pw[k], pb[k]);
      }
    } else {
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        float w = bw[c], b = kLayer ? bb[c] : 0.0f;
        backward_sums<kLayer>(dy[c], x[c], weight[c], mu, rs, sd, sdn, w, b);
        bw[c] = w;
        if constexpr (kLayer) bb[c] = b;
      }
    }
    const float mdn = kLayer ? block_sum(sd, red) / float(C) : 0.0f;
    const float mdnn = block_sum(sdn, red) / float(C);
    if constexpr (kPer > 0) {
      MT_UNROLL
      for (int k = 0; k < kPer; ++k) {
        const int64_t c = threadIdx.x + int64_t(k) * blockDim.x;
        if (c < C) dx[c] = backward_dx<kLayer>(gs[k], xs[k], weight[c], mu, rs, mdn, mdnn, dx[c]);
      }
    } else {
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
        dx[c] = backward_dx<kLayer>(dy[c], x[c], weight[c], mu, rs, mdn, mdnn, dx[c]);
    }
  }
  if constexpr (kPer > 0) {
    MT_UNROLL
    for (int k = 0; k < kPer; ++k) {
      const int64_t c = threadIdx.x + int64_t(k) * blockDim.x;
      if (c < C) {
        bw[c] = pw[k];
        if constexpr (kLayer) bb[c] = pb[k];
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
  const char* name = kLayer ? "layernorm_backward" : "rmsnorm_backward";
  // Rows of up to 16 columns a thread (256 threads, 512 past 4096 columns) in registers.
  const int threads = C <= 16 * kThreads ? kThreads : 2 * kThreads;
  const int64_t per = (C + threads - 1) / threads;
  auto run = [&](auto kernel) {
    launch(name, kernel, unsigned(chunks), threads, 0, s, dinp, pw, pb, dout, inp, weight, mean,
           rstd, N, C);
  };
  if (per <= 1)
    run(norm_backward_kernel<kLayer, 1>);
  else if (per <= 2)
    run(norm_backward_kernel<kLayer, 2>);
  else if (per <= 4)
    run(norm_backward_kernel<kLayer, 4>);
  else if (per <= 8)
    run(norm_backward_kernel<kLayer, 8>);
  else if (per <= 16)
    run(norm_backward_kernel<kLayer, 16>);
  else
    run(norm_backward_kernel<kLayer, 0>);
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
