// CUDA AdamW step over a contiguous fp32 range (kernels/adamw.h), writing the bf16 compute copy
// in the same pass when asked.
//
// The arithmetic is the CPU kernel's, operation for operation (torch.optim.AdamW's order, the
// bias corrections computed in double on the host and rounded to fp32 once):
//   p *= 1 - lr wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
#include <cmath>

#include "mtron/kernels/cuda/common.cuh"
#include "mtron/kernels/cuda/cuda_ops.h"

namespace mtron::kernels::cuda {
namespace {

constexpr int kThreads = 256;

struct AdamWConsts {
  float decay, b1, nb1, b2, nb2, step_size, bc2_sqrt, eps;
};

__global__ void adamw_kernel(float* param,
                             float* m,
                             float* v,
                             const float* grad,
                             uint16_t* param_bf16,
                             int64_t n,
                             AdamWConsts k) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float g = grad[i];
    const float mm = fmaf(k.nb1, g, k.b1 * m[i]);
    const float vv = fmaf(k.nb2 * g, g, k.b2 * v[i]);
    const float denom = sqrtf(vv) / k.bc2_sqrt + k.eps;
    float w = param[i] * k.decay;
    w = fmaf(-k.step_size, mm / denom, w);
    m[i] = mm;
    v[i] = vv;
    param[i] = w;
    if (param_bf16) param_bf16[i] = f32_to_bf16_bits(w);
  }
}

}  // namespace

void adamw_step(const Ctx& ctx, MT_PARAMS(adamw_step)) {
  const double bc1 = 1.0 - std::pow(double(p.beta1), double(p.step));
  const double bc2 = 1.0 - std::pow(double(p.beta2), double(p.step));
  const AdamWConsts k{float(1.0 - double(p.lr) * double(p.weight_decay)),
                      p.beta1,
                      1.0f - p.beta1,
                      p.beta2,
                      1.0f - p.beta2,
                      float(double(p.lr) / bc1),
                      float(std::sqrt(bc2)),
                      p.eps};
  launch("adamw_step", adamw_kernel, grid_for(n, kThreads), kThreads, 0, stream_of(ctx), param, m,
         v, grad, reinterpret_cast<uint16_t*>(param_bf16), n, k);
}

}  // namespace mtron::kernels::cuda
