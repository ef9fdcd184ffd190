// CUDA LayerNorm and RMSNorm, forward and backward (kernels/norm.h).
//
// Forward: one block per row; statistics in fp32 with a two-pass variance (the row is re-read
// from L1/L2). Backward: one block per chunk of kRowChunk rows; each row's two means come from one
// block reduction of both, dinp is accumulated in place, and each block writes its chunk's
// dweight / dbias partial sums (kept in registers over the chunk's rows, up to 8192 columns) to a
// scratch table that add_column_sums reduces in a fixed order, so the parameter gradients are
// deterministic (no atomics). Both move W consecutive columns a thread at a time: W = 8 (16-byte
// loads and stores, load_n/store_n) where C is a multiple of 8 and every tensor 16-byte aligned,
// else W = 1.

#include "mtron/kernels/cuda/common.cuh"
#include "mtron/kernels/cuda/cuda_ops.h"
#include "mtron/kernels/cuda/map.cuh"

namespace mtron::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kRowChunk = 32;

// kLayer: LayerNorm (the mean subtracted, the bias added); else RMSNorm (mean and bias unused).
// The arguments of layernorm_forward, out fp32 or (uint16_t) bf16; one block per row, thread t
// taking columns W t.. W t + W - 1, then W (t + blockDim.x)...
template <bool kLayer, int W, typename T>
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
  const int64_t c0 = W * int64_t(threadIdx.x), step = W * int64_t(blockDim.x);
  float mu = 0, v = 0;
  if constexpr (kLayer) {
    float s = 0;
    for (int64_t c = c0; c < C; c += step) {
      float xs[W];
      load_n<W>(xs, x + c);
      MT_UNROLL
      for (int j = 0; j < W; ++j) s += xs[j];
    }
    mu = block_sum(s, red) / float(C);
    for (int64_t c = c0; c < C; c += step) {
      float xs[W];
      load_n<W>(xs, x + c);
      MT_UNROLL
      for (int j = 0; j < W; ++j) {
        const float d = xs[j] - mu;
        v += d * d;
      }
    }
  } else {
    for (int64_t c = c0; c < C; c += step) {
      float xs[W];
      load_n<W>(xs, x + c);
      MT_UNROLL
      for (int j = 0; j < W; ++j) v = fmaf(xs[j], xs[j], v);
    }
  }
  const float rs = 1.0f / sqrtf(block_sum(v, red) / float(C) + eps);
  if (threadIdx.x == 0) {
    if constexpr (kLayer) mean[r] = mu;
    rstd[r] = rs;
  }
  T* o = out + r * C;
  for (int64_t c = c0; c < C; c += step) {
    float xs[W], w[W];
    load_n<W>(xs, x + c);
    load_n<W>(w, weight + c);
    if constexpr (kLayer) {
      float b[W];
      load_n<W>(b, bias + c);
      MT_UNROLL
      for (int j = 0; j < W; ++j) xs[j] = fmaf((xs[j] - mu) * rs, w[j], b[j]);
    } else {
      MT_UNROLL
      for (int j = 0; j < W; ++j) xs[j] = xs[j] * rs * w[j];
    }
    store_n<W>(o + c, xs);
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
// partial sums, this block's row of which it writes (RMSNorm: dbias and mean unused). Thread t
// owns columns W (t + k blockDim.x) .. + W - 1. kPer > 0 (C <= W kPer blockDim.x): each thread
// keeps its columns' partials (and weights, W = 8) and the row's inputs in registers, so a row is
// read once and the partials are written once per chunk; kPer = 0 (wider rows): the partials
// accumulate in the table and the second pass reads the row again. The same arithmetic in the same
// order either way.
template <bool kLayer, int kPer, int W>
__global__ void __launch_bounds__(2 * kThreads)
    norm_backward_kernel(MT_PARAMS(layernorm_backward)) {
  __shared__ float red[64];
  float* bw = dweight + int64_t(blockIdx.x) * C;
  float* bb = kLayer ? dbias + int64_t(blockIdx.x) * C : nullptr;
  constexpr int kRegs = kPer > 0 ? kPer : 1;
  const int64_t c0 = W * int64_t(threadIdx.x), step = W * int64_t(blockDim.x);
  float pw[kRegs][W] = {}, pb[kRegs][W] = {};
  // The weights of group k, kept in registers where W = 8 (at most 16 of them); W = 1 reads them
  // per row (512 threads leave 128 registers a thread: 16 more would spill).
  constexpr bool kKeepW = W == 8 && kPer > 0;
  float ws[kKeepW ? kRegs : 1][W] = {};
  const auto weights_of = [&](int k, float(&w)[W]) {
    if constexpr (kKeepW) {
      MT_UNROLL
      for (int j = 0; j < W; ++j) w[j] = ws[k][j];
    } else {
      load_n<W>(w, weight + c0 + k * step);
    }
  };
  if constexpr (kKeepW) {
    MT_UNROLL
    for (int k = 0; k < kPer; ++k)
      if (c0 + k * step < C) load_n<W>(ws[k], weight + c0 + k * step);
  }
  if constexpr (kPer == 0) {
    const float zero[W] = {};
    for (int64_t c = c0; c < C; c += step) {
      store_n<W>(bw + c, zero);
      if constexpr (kLayer) store_n<W>(bb + c, zero);
    }
  }
  const int64_t r0 = int64_t(blockIdx.x) * kRowChunk;
  const int64_t r1 = r0 + kRowChunk < N ? r0 + kRowChunk : N;
  for (int64_t r = r0; r < r1; ++r) {
    const float* x = inp + r * C;
    const float* dy = dout + r * C;
    float* dx = dinp + r * C;
    const float mu = kLayer ? mean[r] : 0.0f, rs = rstd[r];
    float sums[2] = {};  // the row's sd and sdn
    float xs[kRegs][W] = {}, gs[kRegs][W] = {};
    if constexpr (kPer > 0) {
      MT_UNROLL
      for (int k = 0; k < kPer; ++k) {
        if (c0 + k * step >= C) continue;
        load_n<W>(xs[k], x + c0 + k * step);
        load_n<W>(gs[k], dy + c0 + k * step);
      }
      MT_UNROLL
      for (int k = 0; k < kPer; ++k) {
        if (c0 + k * step >= C) continue;
        float w[W];
        weights_of(k, w);
        MT_UNROLL
        for (int j = 0; j < W; ++j)
          backward_sums<kLayer>(gs[k][j], xs[k][j], w[j], mu, rs, sums[0], sums[1], pw[k][j],
                                pb[k][j]);
      }
    } else {
      for (int64_t c = c0; c < C; c += step) {
        float g[W], xv[W], w[W], pwc[W], pbc[W] = {};
        load_n<W>(g, dy + c);
        load_n<W>(xv, x + c);
        load_n<W>(w, weight + c);
        load_n<W>(pwc, bw + c);
        if constexpr (kLayer) load_n<W>(pbc, bb + c);
        MT_UNROLL
        for (int j = 0; j < W; ++j)
          backward_sums<kLayer>(g[j], xv[j], w[j], mu, rs, sums[0], sums[1], pwc[j], pbc[j]);
        store_n<W>(bw + c, pwc);
        if constexpr (kLayer) store_n<W>(bb + c, pbc);
      }
    }
    block_sums(sums, red);
    const float mdn = kLayer ? sums[0] / float(C) : 0.0f, mdnn = sums[1] / float(C);
    if constexpr (kPer > 0) {
      MT_UNROLL
      for (int k = 0; k < kPer; ++k) {
        const int64_t c = c0 + k * step;
        if (c >= C) continue;
        float d[W], w[W];
        load_n<W>(d, dx + c);
        weights_of(k, w);
        MT_UNROLL
        for (int j = 0; j < W; ++j)
          d[j] = backward_dx<kLayer>(gs[k][j], xs[k][j], w[j], mu, rs, mdn, mdnn, d[j]);
        store_n<W>(dx + c, d);
      }
    } else {
      for (int64_t c = c0; c < C; c += step) {
        float g[W], xv[W], w[W], d[W];
        load_n<W>(g, dy + c);
        load_n<W>(xv, x + c);
        load_n<W>(w, weight + c);
        load_n<W>(d, dx + c);
        MT_UNROLL
        for (int j = 0; j < W; ++j)
          d[j] = backward_dx<kLayer>(g[j], xv[j], w[j], mu, rs, mdn, mdnn, d[j]);
        store_n<W>(dx + c, d);
      }
    }
  }
  if constexpr (kPer > 0) {
    MT_UNROLL
    for (int k = 0; k < kPer; ++k) {
      const int64_t c = c0 + k * step;
      if (c >= C) continue;
      store_n<W>(bw + c, pw[k]);
      if constexpr (kLayer) store_n<W>(bb + c, pb[k]);
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
  const bool vec = rows_by8(C, {out, inp, weight, bias});
  const int threads = vec ? row_threads(C / 8, kThreads) : kThreads;
  launch(kLayer ? "layernorm_forward" : "rmsnorm_forward",
         vec ? norm_forward_kernel<kLayer, 8, T> : norm_forward_kernel<kLayer, 1, T>, unsigned(N),
         threads, 0, stream_of(ctx), out, mean, rstd, inp, weight, bias, N, C, eps);
}

// Launches norm_backward_kernel<kLayer, kPer, W> for the least kPer in {1, 2, 4, ...} up to kMax
// that covers `per` column groups a thread, else kPer = 0.
template <bool kLayer, int W, int kPer, int kMax, typename Run>
void backward_per(int64_t per, Run run) {
  if constexpr (kPer > kMax)
    run(norm_backward_kernel<kLayer, 0, W>);
  else if (per <= kPer)
    run(norm_backward_kernel<kLayer, kPer, W>);
  else
    backward_per<kLayer, W, 2 * kPer, kMax>(per, run);
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
  auto run = [&](int threads) {
    return [=](auto kernel) {
      launch(name, kernel, unsigned(chunks), threads, 0, s, dinp, pw, pb, dout, inp, weight, mean,
             rstd, N, C);
    };
  };
  if (rows_by8(C, {dinp, pw, pb, dout, inp, weight})) {
    // Up to 2 groups of 8 columns a thread in registers (8192 columns at 512 threads).
    const int threads = row_threads(C / 8, 2 * kThreads);
    backward_per<kLayer, 8, 1, 2>((C / 8 + threads - 1) / threads, run(threads));
  } else {
    // Up to 16 columns a thread (256 threads, 512 past 4096 columns) in registers.
    const int threads = C <= 16 * kThreads ? kThreads : 2 * kThreads;
    backward_per<kLayer, 1, 1, 16>((C + threads - 1) / threads, run(threads));
  }
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
