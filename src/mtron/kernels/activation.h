// defines: gelu_forward/backward (tanh approximation; both also to a bf16 output, and from bf16
//          inputs), gelu_backward_bias (also from bf16 inputs), relu2_forward/backward (squared
//          ReLU, the same variants as GELU's), swiglu_forward/backward (also bf16 to bf16)
//
// Backward WRITES dinp (=).
#pragma once

#include <cstdint>

#include "mtron/kernels/op.h"

namespace mtron::kernels {

// gelu_forward: out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   (GPT-2's gelu_new);
//               to a bf16 out (the next GEMM's input), convert's rounding of the fp32 values
//               bit for bit, in one pass; gelu_backward likewise (dinp: the fc1 GEMMs' output
//               gradient)
// gelu_backward_bias: gelu_backward of dout[N, C] to bf16 and dbias[C] += the column sums of
//               those bf16 values (fc1's bias gradient in the same pass, as cuBLASLt's dGELU and
//               bias-gradient epilogue), bit for bit gelu_backward then bias_backward
// From bf16 inputs (the fc1 GEMM's bf16 pre-activation, fc2's bf16 dgrad) to bf16: each input
//               read widened to fp32 (exact), then as from fp32 inputs, bit for bit.
// relu2_forward: out = max(x, 0)^2 (Megatron's squared_relu, --squared-relu); relu2_backward:
//               dinp = 2 max(x, 0) dout. Each variant as GELU's: to a bf16 out convert's rounding
//               of the fp32 value; from bf16 inputs the fp32 op on the widened values.
// swiglu_forward: inp[N, 2F] = [gate | up] per row (Megatron's fused fc1 with --swiglu);
//                 out[N, F] = silu(gate) * up, silu(x) = x * sigmoid(x). From bf16 inputs (the
//                 fc1 GEMM's bf16 output; in the backward also fc2's bf16 dgrad) to bf16 (the
//                 next GEMMs' input): the fp32 op on the widened values, each output rounded once,
//                 bit for bit.
#define MTRON_ACTIVATION_OPS(OP)                                                            \
  OP(void, gelu_forward, gelu_forward, activation_forward_contract,                         \
     (float* out, const float* inp, int64_t n), (out, inp, n))                              \
  OP(void, gelu_forward, gelu_forward_bf16, activation_forward_contract,                    \
     (bf16 * out, const float* inp, int64_t n), (out, inp, n))                              \
  OP(void, gelu_forward, gelu_forward_bf16_in, activation_forward_contract,                 \
     (bf16 * out, const bf16* inp, int64_t n), (out, inp, n))                               \
  OP(void, gelu_backward, gelu_backward, activation_backward_contract,                      \
     (float* dinp, const float* inp, const float* dout, int64_t n), (dinp, inp, dout, n))   \
  OP(void, gelu_backward, gelu_backward_bf16, activation_backward_contract,                 \
     (bf16 * dinp, const float* inp, const float* dout, int64_t n), (dinp, inp, dout, n))   \
  OP(void, gelu_backward, gelu_backward_bf16_in, activation_backward_contract,              \
     (bf16 * dinp, const bf16* inp, const bf16* dout, int64_t n), (dinp, inp, dout, n))     \
  OP(void, gelu_backward_bias, gelu_backward_bias, gelu_backward_bias_contract,             \
     (float* dbias, bf16* dinp, const float* inp, const float* dout, int64_t N, int64_t C), \
     (dbias, dinp, inp, dout, N, C))                                                        \
  OP(void, gelu_backward_bias, gelu_backward_bias_bf16_in, gelu_backward_bias_contract,     \
     (float* dbias, bf16* dinp, const bf16* inp, const bf16* dout, int64_t N, int64_t C),   \
     (dbias, dinp, inp, dout, N, C))                                                        \
  OP(void, relu2_forward, relu2_forward, activation_forward_contract,                       \
     (float* out, const float* inp, int64_t n), (out, inp, n))                              \
  OP(void, relu2_forward, relu2_forward_bf16, activation_forward_contract,                  \
     (bf16 * out, const float* inp, int64_t n), (out, inp, n))                              \
  OP(void, relu2_forward, relu2_forward_bf16_in, activation_forward_contract,               \
     (bf16 * out, const bf16* inp, int64_t n), (out, inp, n))                               \
  OP(void, relu2_backward, relu2_backward, activation_backward_contract,                    \
     (float* dinp, const float* inp, const float* dout, int64_t n), (dinp, inp, dout, n))   \
  OP(void, relu2_backward, relu2_backward_bf16, activation_backward_contract,               \
     (bf16 * dinp, const float* inp, const float* dout, int64_t n), (dinp, inp, dout, n))   \
  OP(void, relu2_backward, relu2_backward_bf16_in, activation_backward_contract,            \
     (bf16 * dinp, const bf16* inp, const bf16* dout, int64_t n), (dinp, inp, dout, n))     \
  OP(void, swiglu_forward, swiglu_forward, swiglu_forward_contract,                         \
     (float* out, const float* inp, int64_t N, int64_t F), (out, inp, N, F))                \
  OP(void, swiglu_forward, swiglu_forward_bf16_in, swiglu_forward_contract,                 \
     (bf16 * out, const bf16* inp, int64_t N, int64_t F), (out, inp, N, F))                 \
  OP(void, swiglu_backward, swiglu_backward, swiglu_backward_contract,                      \
     (float* dinp, const float* inp, const float* dout, int64_t N, int64_t F),              \
     (dinp, inp, dout, N, F))                                                               \
  OP(void, swiglu_backward, swiglu_backward_bf16_in, swiglu_backward_contract,              \
     (bf16 * dinp, const bf16* inp, const bf16* dout, int64_t N, int64_t F),                \
     (dinp, inp, dout, N, F))
MTRON_ACTIVATION_OPS(MT_OP_DECLARE)

}  // namespace mtron::kernels
