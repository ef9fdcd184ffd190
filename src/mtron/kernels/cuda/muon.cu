// CUDA Muon elementwise steps (kernels/muon.h): grid-stride loops with 64-bit indices. Every
// product and sum is rounded on its own (__fmul_rn, __fadd_rn: nvcc would otherwise fuse them
// into FMAs), so the results are the CPU kernels' bit for bit; the inverse norm is computed in
// double by every thread from the sum of squares in device memory (no host synchronisation).
#include "mtron/kernels/cuda/common.cuh"
#include "mtron/kernels/cuda/cuda_ops.h"

namespace mtron::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void muon_momentum_kernel(float* momentum,
                                     float* update,
                                     const float* grad,
                                     float grad_scale,
                                     float mu,
                                     bool nesterov,
                                     int64_t n) {
  const float keep = 1.0f - mu;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float t = __fmul_rn(__fmul_rn(grad[i], grad_scale), keep);
    const float m = __fadd_rn(__fmul_rn(momentum[i], mu), t);
    momentum[i] = m;
    update[i] = nesterov ? __fadd_rn(__fmul_rn(m, mu), t) : m;
  }
}

__global__ void scale_by_inverse_norm_kernel(float* x, const double* sumsq, double eps, int64_t n) {
  const double norm = sqrt(*sumsq);
  const float s = float(1.0 / (norm > eps ? norm : eps));
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] = __fmul_rn(x[i], s);
}

}  // namespace

void muon_momentum(const Ctx& ctx, MT_PARAMS(muon_momentum)) {
  if (n <= 0) return;
  launch("muon_momentum", muon_momentum_kernel, grid_for(n, kThreads), kThreads, 0, stream_of(ctx),
         momentum, update, grad, grad_scale, mu, nesterov, n);
}

void scale_by_inverse_norm(const Ctx& ctx, float* x, const double* sumsq, double eps, int64_t n) {
  if (n <= 0) return;
  launch("scale_by_inverse_norm", scale_by_inverse_norm_kernel, grid_for(n, kThreads), kThreads, 0,
         stream_of(ctx), x, sumsq, eps, n);
}

}  // namespace mtron::kernels::cuda
