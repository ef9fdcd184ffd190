// defines: sigmoid, gelu, gelu_grad: GELU (tanh approximation) in fp32 on the device, for the
//          activation kernels (activation.cu) and the emulation's model of cuBLASLt's GELU
//          epilogues (sim/gemm_sim.cpp)
//
// The same identity as the CPU kernel: 0.5 x (1 + tanh(u)) = x sigmoid(2u), which keeps its
// digits for large negative x; the derivative is s + 2 x s (1 - s) u'.
#pragma once

#include "mtron/kernels/cuda/common.cuh"

namespace mtron::kernels::cuda {

inline constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)
inline constexpr float kGeluC = 0.044715f;

__device__ __forceinline__ float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

__device__ __forceinline__ float gelu(float x) {
  const float u2 = (2 * kGeluK) * x * fmaf(kGeluC, x * x, 1.0f);
  return x * sigmoid(u2);
}

// dgelu(x) * dy
__device__ __forceinline__ float gelu_grad(float x, float dy) {
  const float x2 = x * x;
  const float s = sigmoid((2 * kGeluK) * x * fmaf(kGeluC, x2, 1.0f));
  const float du2 = (2 * kGeluK) * fmaf(3 * kGeluC, x2, 1.0f);
  return fmaf(x * (s * (1.0f - s)), du2, s) * dy;
}

}  // namespace mtron::kernels::cuda
