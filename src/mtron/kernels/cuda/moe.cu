// CUDA mixture-of-experts router and token permutation (kernels/moe.h).
//
// The router's per-token work (top-k, weights, scores, log-sum-exp, the backward:
// kernels/moe_token.h, the CPU kernels' own arithmetic) is one thread per token over its E
// logits (E is small: 8 to 256); the sums over tokens are one thread per
// (count vector, expert), in token order; the permutation and the combine are one thread per
// element of a row, each adding its token's pairs in choice order. No atomics: every output is
// written by one thread, so results are deterministic, in the CPU kernels' order of operations.
#include "mtron/kernels/cuda/common.cuh"
#include "mtron/kernels/cuda/cuda_ops.h"
#include "mtron/kernels/moe_token.h"

namespace mtron::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void route_kernel(int32_t* idx, float* weight, const float* logits, MoeRouting r) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < r.T;
       t += int64_t(gridDim.x) * blockDim.x) {
    moe_token::route(logits + t * r.E, r, idx + t * r.k, weight + t * r.k);
  }
}

__global__ void aux_scores_kernel(float* scores, const float* logits, MoeRouting r) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < r.T;
       t += int64_t(gridDim.x) * blockDim.x) {
    moe_token::aux_scores(logits + t * r.E, r.E, r.sigmoid, scores + t * r.E);
  }
}

__global__ void aux_sums_kernel(double* psum,
                                double* counts,
                                const float* scores,
                                const int32_t* idx,
                                MoeRouting r,
                                int64_t nb,
                                int64_t row0) {
  const int64_t T = r.T, E = r.E, k = r.k;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < nb * E;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = i / E, e = i % E;
    double p = 0, c = 0;
    for (int64_t t = 0; t < T; ++t) {
      if ((row0 + t) % nb != b) continue;
      p += scores[t * E + e];
      for (int64_t j = 0; j < k; ++j) c += idx[t * k + j] == e ? 1 : 0;
    }
    psum[i] = p;
    counts[i] = c;
  }
}

__global__ void logsumexp_kernel(float* lse, const float* logits, MoeRouting r) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < r.T;
       t += int64_t(gridDim.x) * blockDim.x) {
    lse[t] = moe_token::logsumexp(logits + t * r.E, r.E);
  }
}

__global__ void permute_kernel(
    float* rows, const float* x, const int64_t* row, MoeRouting r, int64_t h) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < r.T * r.k * h;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t p = row[i / h];
    if (p >= 0) rows[p * h + i % h] = x[(i / h / r.k) * h + i % h];
  }
}

// One thread per element of a token's row: its pairs' rows, weighted (combine) or not.
__global__ void gather_pairs_kernel(
    float* y, const float* rows, const int64_t* row, const float* weight, MoeRouting r, int64_t h) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < r.T * h;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / h, c = i % h;
    float s = 0.0f;
    for (int64_t j = 0; j < r.k; ++j) {
      const int64_t p = row[t * r.k + j];
      if (p >= 0) s += (weight ? weight[t * r.k + j] * rows[p * h + c] : rows[p * h + c]);
    }
    y[i] = s;
  }
}

__global__ void combine_backward_kernel(float* drows,
                                        float* dweight,
                                        const float* dy,
                                        const float* rows,
                                        const int64_t* row,
                                        const float* weight,
                                        MoeRouting r,
                                        int64_t h) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < r.T * r.k;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t p = row[i];
    const float* g = dy + (i / r.k) * h;
    double dot = 0;
    for (int64_t c = 0; c < h && p >= 0; ++c) {
      drows[p * h + c] = weight[i] * g[c];
      dot += double(g[c]) * rows[p * h + c];
    }
    dweight[i] = float(dot);
  }
}

__global__ void router_backward_kernel(float* dlogits,
                                       const float* logits,
                                       const int32_t* idx,
                                       const float* weight,
                                       const float* dweight,
                                       MoeRouting r,
                                       MoeRouterLoss loss) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < r.T;
       t += int64_t(gridDim.x) * blockDim.x) {
    moe_token::router_backward(t, logits, idx, weight, dweight, r, loss, dlogits);
  }
}

}  // namespace

void moe_route(
    const Ctx& ctx, int32_t* idx, float* weight, const float* logits, const MoeRouting& r) {
  launch("moe_route", route_kernel, grid_for(r.T, kThreads), kThreads, 0, stream_of(ctx), idx,
         weight, logits, r);
}

void moe_aux_scores(const Ctx& ctx, float* scores, const float* logits, const MoeRouting& r) {
  launch("moe_aux_scores", aux_scores_kernel, grid_for(r.T, kThreads), kThreads, 0, stream_of(ctx),
         scores, logits, r);
}

void moe_aux_sums(const Ctx& ctx, MT_PARAMS(moe_aux_sums)) {
  launch("moe_aux_sums", aux_sums_kernel, grid_for(nb * r.E, kThreads), kThreads, 0, stream_of(ctx),
         psum, counts, scores, idx, r, nb, row0);
}

void moe_logsumexp(const Ctx& ctx, float* lse, const float* logits, const MoeRouting& r) {
  launch("moe_logsumexp", logsumexp_kernel, grid_for(r.T, kThreads), kThreads, 0, stream_of(ctx),
         lse, logits, r);
}

void moe_permute(const Ctx& ctx,
                 float* rows,
                 const float* x,
                 const int64_t* row,
                 const MoeRouting& r,
                 int64_t h) {
  launch("moe_permute", permute_kernel, grid_for(r.T * r.k * h, kThreads), kThreads, 0,
         stream_of(ctx), rows, x, row, r, h);
}

void moe_permute_backward(const Ctx& ctx,
                          float* dx,
                          const float* drows,
                          const int64_t* row,
                          const MoeRouting& r,
                          int64_t h) {
  launch("moe_permute_backward", gather_pairs_kernel, grid_for(r.T * h, kThreads), kThreads, 0,
         stream_of(ctx), dx, drows, row, static_cast<const float*>(nullptr), r, h);
}

void moe_combine(const Ctx& ctx, MT_PARAMS(moe_combine)) {
  launch("moe_combine", gather_pairs_kernel, grid_for(r.T * h, kThreads), kThreads, 0,
         stream_of(ctx), y, rows, row, weight, r, h);
}

void moe_combine_backward(const Ctx& ctx, MT_PARAMS(moe_combine_backward)) {
  launch("moe_combine_backward", combine_backward_kernel, grid_for(r.T * r.k, kThreads), kThreads,
         0, stream_of(ctx), drows, dweight, dy, rows, row, weight, r, h);
}

void moe_router_backward(const Ctx& ctx, MT_PARAMS(moe_router_backward)) {
  launch("moe_router_backward", router_backward_kernel, grid_for(r.T, kThreads), kThreads, 0,
         stream_of(ctx), dlogits, logits, idx, weight, dweight, r, loss);
}

}  // namespace mtron::kernels::cuda
