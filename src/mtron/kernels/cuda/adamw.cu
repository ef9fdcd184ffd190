// CUDA AdamW step over a contiguous fp32 range (kernels/adamw.h), writing the bf16 compute copy
// in the same pass when asked, and the multi-tensor form over a table of runs in one launch.
//
// The arithmetic is the CPU kernel's, operation for operation (torch.optim.AdamW's order, the
// bias corrections computed in double on the host and rounded to fp32 once):
//   p *= 1 - lr wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
#include <cmath>
#include <vector>

#include "mtron/kernels/cuda/common.cuh"
#include "mtron/kernels/cuda/cuda_ops.h"

namespace mtron::kernels::cuda {
namespace {

constexpr int kThreads = 256;

struct AdamWConsts {
  float decay, b1, nb1, b2, nb2, step_size, bc2_sqrt, eps;
};

// Element i of a range whose constants are k.
__device__ __forceinline__ void adamw_element(float* param,
                                              float* m,
                                              float* v,
                                              const float* grad,
                                              uint16_t* param_bf16,
                                              int64_t i,
                                              int64_t mi,
                                              const AdamWConsts& k) {
  const float g = grad[i];
  const float mm = fmaf(k.nb1, g, k.b1 * m[mi]);
  const float vv = fmaf(k.nb2 * g, g, k.b2 * v[mi]);
  const float denom = sqrtf(vv) / k.bc2_sqrt + k.eps;
  float w = param[i] * k.decay;
  w = fmaf(-k.step_size, mm / denom, w);
  m[mi] = mm;
  v[mi] = vv;
  param[i] = w;
  if (param_bf16) param_bf16[i] = f32_to_bf16_bits(w);
}

__global__ void adamw_kernel(float* param,
                             float* m,
                             float* v,
                             const float* grad,
                             uint16_t* param_bf16,
                             int64_t n,
                             AdamWConsts k) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    adamw_element(param, m, v, grad, param_bf16, i, i, k);
  }
}

// A run of adamw_step_runs on the device: its first element in the concatenation of the runs,
// where it starts in the buffers and in the moments, and its constants.
struct DeviceRun {
  int64_t first, begin, moment;
  AdamWConsts k;
};

// Element i of the runs' concatenation (total elements): its run by binary search on `first`.
__global__ void adamw_runs_kernel(float* param,
                                  float* m,
                                  float* v,
                                  const float* grad,
                                  uint16_t* param_bf16,
                                  const DeviceRun* runs,
                                  int64_t n_runs,
                                  int64_t total) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t lo = 0, hi = n_runs - 1;  // the last run whose first element is <= i
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (runs[mid].first <= i) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    const DeviceRun& r = runs[lo];
    const int64_t j = i - r.first;
    adamw_element(param, m, v, grad, param_bf16, r.begin + j, r.moment + j, r.k);
  }
}

// The constants of a step with p's betas, eps and step and the given lr and weight decay.
AdamWConsts consts(const AdamWParams& p, float lr, float weight_decay) {
  const double bc1 = 1.0 - std::pow(double(p.beta1), double(p.step));
  const double bc2 = 1.0 - std::pow(double(p.beta2), double(p.step));
  return {float(1.0 - double(lr) * double(weight_decay)),
          p.beta1,
          1.0f - p.beta1,
          p.beta2,
          1.0f - p.beta2,
          float(double(lr) / bc1),
          float(std::sqrt(bc2)),
          p.eps};
}

}  // namespace

void adamw_step(const Ctx& ctx, MT_PARAMS(adamw_step)) {
  launch("adamw_step", adamw_kernel, grid_for(n, kThreads), kThreads, 0, stream_of(ctx), param, m,
         v, grad, reinterpret_cast<uint16_t*>(param_bf16), n, consts(p, p.lr, p.weight_decay));
}

// One launch: the runs' table goes to the device by an asynchronous copy (no host wait).
void adamw_step_runs(const Ctx& ctx, MT_PARAMS(adamw_step_runs)) {
  std::vector<DeviceRun> table;
  int64_t total = 0;
  for (int64_t r = 0; r < n_runs; ++r) {
    if (runs[r].n <= 0) continue;
    table.push_back(
        {total, runs[r].begin, runs[r].moment, consts(p, runs[r].lr, runs[r].weight_decay)});
    total += runs[r].n;
  }
  if (total == 0) return;
  const cudaStream_t s = stream_of(ctx);
  Scratch dev(sizeof(DeviceRun) * table.size(), s);
  cuda::copy_from_host_async(ctx, dev.as<DeviceRun>(), table.data(),
                             int64_t(sizeof(DeviceRun) * table.size()));
  launch("adamw_step_runs", adamw_runs_kernel, grid_for(total, kThreads), kThreads, 0, s, param, m,
         v, grad, reinterpret_cast<uint16_t*>(param_bf16), dev.as<DeviceRun>(),
         int64_t(table.size()), total);
}

}  // namespace mtron::kernels::cuda
