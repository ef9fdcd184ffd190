// CUDA AdamW step (kernels/adamw.h): the multi-tensor form over a table of runs in one launch,
// writing the bf16 compute copy in the same pass when asked; the one-range form is one run.
//
// The arithmetic is the CPU kernel's, operation for operation (torch.optim.AdamW's order, the
// bias corrections computed in double on the host and rounded to fp32 once):
//   g = grad grad_scale;  p *= 1 - lr wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
#include <cmath>
#include <vector>

#include "mtron/kernels/cuda/common.cuh"
#include "mtron/kernels/cuda/cuda_ops.h"

namespace mtron::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kTile = 4 * kThreads;  // a block's elements at a time: four per thread

struct AdamWConsts {
  float decay, b1, nb1, b2, nb2, step_size, bc2_sqrt, eps, grad_scale;
};

// One element's step: weight w, moments mm and vv, gradient grad (its product with the scale
// rounded on its own, never fused into an FMA).
__device__ __forceinline__ void adamw_value(
    float& w, float& mm, float& vv, float grad, const AdamWConsts& k) {
  const float g = __fmul_rn(grad, k.grad_scale);
  mm = fmaf(k.nb1, g, k.b1 * mm);
  vv = fmaf(k.nb2 * g, g, k.b2 * vv);
  const float denom = sqrtf(vv) / k.bc2_sqrt + k.eps;
  w = fmaf(-k.step_size, mm / denom, w * k.decay);
}

// A run of adamw_step_runs on the device: its first tile (kTile elements, none spanning two runs)
// among the runs' tiles, where it starts in the buffers and in the moments, its length and its
// constants.
struct DeviceRun {
  int64_t first_tile, begin, moment, n;
  AdamWConsts k;
};

// One block per tile: its run by binary search on first_tile (the same loads for every thread of
// the block), then four elements per thread, by 16-byte accesses (8-byte for the bf16 copy)
// where `vec` (the tensors 16-byte aligned) and the run starts at a multiple of 4 in the buffers
// and in the moments, else one at a time.
__global__ void adamw_runs_kernel(float* param,
                                  float* m,
                                  float* v,
                                  const float* grad,
                                  uint16_t* param_bf16,
                                  const DeviceRun* runs,
                                  int64_t n_runs,
                                  int64_t tiles,
                                  bool vec) {
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    int64_t lo = 0, hi = n_runs - 1;  // the last run whose first tile is <= tile
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (runs[mid].first_tile <= tile) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    const DeviceRun& r = runs[lo];
    const int64_t j0 = (tile - r.first_tile) * kTile;
    const int64_t end = j0 + kTile < r.n ? j0 + kTile : r.n;
    float* p = param + r.begin;
    float* mr = m + r.moment;
    float* vr = v + r.moment;
    const float* g = grad + r.begin;
    uint16_t* pb = param_bf16 ? param_bf16 + r.begin : nullptr;
    const int64_t j = j0 + 4 * int64_t(threadIdx.x);
    if (vec && r.begin % 4 == 0 && r.moment % 4 == 0 && j + 4 <= end) {
      float4 w = *reinterpret_cast<const float4*>(p + j);
      float4 mm = *reinterpret_cast<const float4*>(mr + j);
      float4 vv = *reinterpret_cast<const float4*>(vr + j);
      const float4 gg = *reinterpret_cast<const float4*>(g + j);
      adamw_value(w.x, mm.x, vv.x, gg.x, r.k);
      adamw_value(w.y, mm.y, vv.y, gg.y, r.k);
      adamw_value(w.z, mm.z, vv.z, gg.z, r.k);
      adamw_value(w.w, mm.w, vv.w, gg.w, r.k);
      *reinterpret_cast<float4*>(p + j) = w;
      *reinterpret_cast<float4*>(mr + j) = mm;
      *reinterpret_cast<float4*>(vr + j) = vv;
      if (pb)
        *reinterpret_cast<uint2*>(pb + j) =
            uint2{unsigned(f32_to_bf16_bits(w.x)) | unsigned(f32_to_bf16_bits(w.y)) << 16,
                  unsigned(f32_to_bf16_bits(w.z)) | unsigned(f32_to_bf16_bits(w.w)) << 16};
    } else {
      for (int64_t i = j; i < j + 4 && i < end; ++i) {
        float w = p[i], mm = mr[i], vv = vr[i];
        adamw_value(w, mm, vv, g[i], r.k);
        p[i] = w, mr[i] = mm, vr[i] = vv;
        if (pb) pb[i] = f32_to_bf16_bits(w);
      }
    }
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
          p.eps,
          p.grad_scale};
}

}  // namespace

// One launch: the runs' table goes to the device by an asynchronous copy (no host wait).
void adamw_step_runs(const Ctx& ctx, MT_PARAMS(adamw_step_runs)) {
  std::vector<DeviceRun> table;
  int64_t tiles = 0;
  for (int64_t r = 0; r < n_runs; ++r) {
    if (runs[r].n <= 0) continue;
    table.push_back({tiles, runs[r].begin, runs[r].moment, runs[r].n,
                     consts(p, runs[r].lr, runs[r].weight_decay)});
    tiles += (runs[r].n + kTile - 1) / kTile;
  }
  if (tiles == 0) return;
  const cudaStream_t s = stream_of(ctx);
  Scratch dev(sizeof(DeviceRun) * table.size(), s);
  cuda::copy_from_host_async(ctx, dev.as<DeviceRun>(), table.data(),
                             int64_t(sizeof(DeviceRun) * table.size()));
  const bool vec =
      aligned16({param, m, v, grad}) && reinterpret_cast<uintptr_t>(param_bf16) % 8 == 0;
  launch("adamw_step_runs", adamw_runs_kernel, grid_for(tiles * kThreads, kThreads), kThreads, 0, s,
         param, m, v, grad, bits(param_bf16), dev.as<DeviceRun>(), int64_t(table.size()), tiles,
         vec);
}

// The one-run form of adamw_step_runs.
void adamw_step(const Ctx& ctx, MT_PARAMS(adamw_step)) {
  const AdamWRun run{.begin = 0, .n = n, .moment = 0, .lr = p.lr, .weight_decay = p.weight_decay};
  cuda::adamw_step_runs(ctx, param, m, v, grad, param_bf16, &run, 1, p);
}

}  // namespace mtron::kernels::cuda
