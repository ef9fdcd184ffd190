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

__global__ void route_kernel(
    int32_t* idx, float* weight, const float* logits, int64_t T, int64_t E, int64_t k, bool sg) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < T;
       t += int64_t(gridDim.x) * blockDim.x) {
    moe_token::route(logits + t * E, E, k, sg, idx + t * k, weight + t * k);
  }
}

__global__ void aux_scores_kernel(
    float* scores, const float* logits, int64_t T, int64_t E, bool sg) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < T;
       t += int64_t(gridDim.x) * blockDim.x) {
    moe_token::aux_scores(logits + t * E, E, sg, scores + t * E);
  }
}

__global__ void aux_sums_kernel(double* psum,
                                double* counts,
                                const float* scores,
                                const int32_t* idx,
                                int64_t T,
                                int64_t E,
                                int64_t k,
                                int64_t nb,
                                int64_t row0) {
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

__global__ void logsumexp_kernel(float* lse, const float* logits, int64_t T, int64_t E) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < T;
       t += int64_t(gridDim.x) * blockDim.x) {
    lse[t] = moe_token::logsumexp(logits + t * E, E);
  }
}

__global__ void permute_kernel(
    float* rows, const float* x, const int64_t* row, int64_t T, int64_t k, int64_t h) {
  const int64_t n = T * k * h;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t p = i / h, c = i % h, r = row[p];
    if (r >= 0) rows[r * h + c] = x[(p / k) * h + c];
  }
}

__global__ void permute_backward_kernel(
    float* dx, const float* drows, const int64_t* row, int64_t T, int64_t k, int64_t h) {
  const int64_t n = T * h;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / h, c = i % h;
    float d = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t r = row[t * k + j];
      if (r >= 0) d += drows[r * h + c];
    }
    dx[i] = d;
  }
}

__global__ void combine_kernel(float* y,
                               const float* rows,
                               const int64_t* row,
                               const float* weight,
                               int64_t T,
                               int64_t k,
                               int64_t h) {
  const int64_t n = T * h;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / h, c = i % h;
    float s = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t r = row[t * k + j];
      if (r >= 0) s += weight[t * k + j] * rows[r * h + c];
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
                                        int64_t T,
                                        int64_t k,
                                        int64_t h) {
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < T * k;
       p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = row[p];
    const float* g = dy + (p / k) * h;
    double dot = 0;
    if (r >= 0) {
      const float w = weight[p];
      for (int64_t c = 0; c < h; ++c) {
        drows[r * h + c] = w * g[c];
        dot += double(g[c]) * rows[r * h + c];
      }
    }
    dweight[p] = float(dot);
  }
}

__global__ void router_backward_kernel(float* dlogits,
                                       const float* logits,
                                       const int32_t* idx,
                                       const float* weight,
                                       const float* dweight,
                                       const float* scores,
                                       const float* counts,
                                       double aux_grad,
                                       double z_grad,
                                       int64_t T,
                                       int64_t E,
                                       int64_t k,
                                       int64_t nb,
                                       int64_t row0,
                                       bool sg) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < T;
       t += int64_t(gridDim.x) * blockDim.x) {
    moe_token::router_backward(logits + t * E, idx + t * k, weight + t * k, dweight + t * k,
                               scores ? scores + t * E : nullptr,
                               counts ? counts + (row0 + t) % nb * E : nullptr, aux_grad, z_grad, E,
                               k, sg, dlogits + t * E);
  }
}

}  // namespace

void moe_route(const Ctx& ctx,
               int32_t* idx,
               float* weight,
               const float* logits,
               int64_t T,
               int64_t E,
               int64_t k,
               bool sigmoid) {
  launch("moe_route", route_kernel, grid_for(T, kThreads), kThreads, 0, stream_of(ctx), idx, weight,
         logits, T, E, k, sigmoid);
}

void moe_aux_scores(
    const Ctx& ctx, float* scores, const float* logits, int64_t T, int64_t E, bool sigmoid) {
  launch("moe_aux_scores", aux_scores_kernel, grid_for(T, kThreads), kThreads, 0, stream_of(ctx),
         scores, logits, T, E, sigmoid);
}

void moe_aux_sums(const Ctx& ctx,
                  double* psum,
                  double* counts,
                  const float* scores,
                  const int32_t* idx,
                  int64_t T,
                  int64_t E,
                  int64_t k,
                  int64_t nb,
                  int64_t row0) {
  launch("moe_aux_sums", aux_sums_kernel, grid_for(nb * E, kThreads), kThreads, 0, stream_of(ctx),
         psum, counts, scores, idx, T, E, k, nb, row0);
}

void moe_logsumexp(const Ctx& ctx, float* lse, const float* logits, int64_t T, int64_t E) {
  launch("moe_logsumexp", logsumexp_kernel, grid_for(T, kThreads), kThreads, 0, stream_of(ctx), lse,
         logits, T, E);
}

void moe_permute(const Ctx& ctx,
                 float* rows,
                 const float* x,
                 const int64_t* row,
                 int64_t T,
                 int64_t k,
                 int64_t h) {
  launch("moe_permute", permute_kernel, grid_for(T * k * h, kThreads), kThreads, 0, stream_of(ctx),
         rows, x, row, T, k, h);
}

void moe_permute_backward(const Ctx& ctx,
                          float* dx,
                          const float* drows,
                          const int64_t* row,
                          int64_t T,
                          int64_t k,
                          int64_t h) {
  launch("moe_permute_backward", permute_backward_kernel, grid_for(T * h, kThreads), kThreads, 0,
         stream_of(ctx), dx, drows, row, T, k, h);
}

void moe_combine(const Ctx& ctx,
                 float* y,
                 const float* rows,
                 const int64_t* row,
                 const float* weight,
                 int64_t T,
                 int64_t k,
                 int64_t h) {
  launch("moe_combine", combine_kernel, grid_for(T * h, kThreads), kThreads, 0, stream_of(ctx), y,
         rows, row, weight, T, k, h);
}

void moe_combine_backward(const Ctx& ctx,
                          float* drows,
                          float* dweight,
                          const float* dy,
                          const float* rows,
                          const int64_t* row,
                          const float* weight,
                          int64_t T,
                          int64_t k,
                          int64_t h) {
  launch("moe_combine_backward", combine_backward_kernel, grid_for(T * k, kThreads), kThreads, 0,
         stream_of(ctx), drows, dweight, dy, rows, row, weight, T, k, h);
}

void moe_router_backward(const Ctx& ctx,
                         float* dlogits,
                         const float* logits,
                         const int32_t* idx,
                         const float* weight,
                         const float* dweight,
                         const float* scores,
                         const float* counts,
                         double aux_grad,
                         double z_grad,
                         int64_t T,
                         int64_t E,
                         int64_t k,
                         int64_t nb,
                         int64_t row0,
                         bool sigmoid) {
  launch("moe_router_backward", router_backward_kernel, grid_for(T, kThreads), kThreads, 0,
         stream_of(ctx), dlogits, logits, idx, weight, dweight, scores, counts, aux_grad, z_grad, T,
         E, k, nb, row0, sigmoid);
}

}  // namespace mtron::kernels::cuda
