// defines: gelu_forward/backward (tanh approximation), swiglu_forward/backward
//
// Backward WRITES dinp (=).
#pragma once

#include <cstdint>

#include "mtron/kernels/ctx.h"

namespace mtron::kernels {

// out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   (GPT-2's gelu_new)
void gelu_forward(const Ctx& ctx, float* out, const float* inp, int64_t n);
void gelu_backward(const Ctx& ctx, float* dinp, const float* inp, const float* dout, int64_t n);

// inp[N, 2F] = [gate | up] per row (Megatron's fused fc1 with --swiglu);
// out[N, F] = silu(gate) * up, silu(x) = x * sigmoid(x).
void swiglu_forward(const Ctx& ctx, float* out, const float* inp, int64_t N, int64_t F);
void swiglu_backward(
    const Ctx& ctx, float* dinp, const float* inp, const float* dout, int64_t N, int64_t F);

}  // namespace mtron::kernels
