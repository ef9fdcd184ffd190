// defines: RunCtx, Act, GemmInputRoom, gemm_input_room, as_gemm_input, gemm_input_buffer,
//          fp8_linear, bf16_gemm_inputs, bf16_gemm_outputs, mlp_activation, mlp_activation_grad,
//          linear_forward, linear_forward_gelu, linear_backward
//
// A linear layer's three GEMMs in the run's precision. In bf16 (fp16) mode the GEMMs read bf16
// (fp16) activations, output gradients and weights and write fp32 (fp32 accumulation); the fp32
// master weights and fp32 gradients stay with the optimizer (Megatron's mixed precision). In
// fp16 mode a value beyond fp16's range becomes infinity when it is rounded, as on a GPU: the
// loss scaler (optim/grad_scaler.h) then skips the step. Column- and row-parallel
// layers are these same GEMMs on local shards; the TP mappings around them are the caller's
// (parallel/mappings.h).
//
// Activations a GEMM reads are dtype-tagged (Act): the layers make them with as_gemm_input and
// place the fp32 tensor they come from with gemm_input_buffer, and never look at the precision
// themselves; this file is the one place that does.
//
// FP8 (rc.fp8 set, --bf16 with --fp8-format; model/fp8.h): a linear layer whose weight is one of
// rc.fp8's quantises the inputs of its three GEMMs just before each GEMM (from the bf16 copies
// of the input and weight, as Transformer Engine quantises Megatron's bf16 tensors, and from
// the output gradient as linear_backward gets it) into bf16 storage holding exact FP8 values, runs
// the bf16 GEMM on them and applies the inverse scales through the GEMM's alpha. The stashed input
// stays bf16; re-quantising it for wgrad with the same scale gives the forward's values again.
// Other GEMMs (the LM head, the router) stay bf16.
#pragma once

#include <cstdint>

#include "mtron/core/arena.h"
#include "mtron/core/model_config.h"
#include "mtron/core/precision.h"
#include "mtron/kernels/ctx.h"
#include "mtron/kernels/gemm_operand.h"
#include "mtron/model/fp8.h"
#include "mtron/parallel/context_parallel.h"
#include "mtron/parallel/expert_dispatch.h"
#include "mtron/parallel/mappings.h"

namespace mtron::model {

struct RunCtx {
  kernels::Ctx k;
  Precision precision = Precision::kFP32;  // kFP32, kBF16 or kFP16
  bool fp32_attention = false;   // attention's products in fp32 in kBF16 too (bf16_attention)
  bool flash_attention = false;  // CUDA: mtron's flash kernels where cuDNN's would run
  // CUDA: cuDNN's attention backward may accumulate dq atomically (kernels::AttnShape)
  bool nondeterministic_attention = false;
  Fp8State* fp8 = nullptr;  // FP8 linear layers (with kBF16), or none
  parallel::TensorParallel tp;
  parallel::ContextParallel cp;
  parallel::ExpertParallel ep;
};

// Whether attention's matrix products may take bf16 operands (kernels::AttnShape::bf16_products:
// the tensor-core kernels on CUDA): in bf16 mode, FP8 included, unless fp32_attention.
inline bool bf16_attention(const RunCtx& rc) {
  return rc.precision == Precision::kBF16 && !rc.fp32_attention;
}

// The attention kernels' shape of these dims under rc's precision and attention backend.
inline kernels::AttnShape attention_shape(const RunCtx& rc,
                                          int64_t B,
                                          int64_t Sq,
                                          int64_t Sk,
                                          int64_t H,
                                          int64_t G,
                                          int64_t D,
                                          int64_t Dv,
                                          float scale,
                                          bool fused_qkv = false) {
  kernels::AttnShape s{B, Sq, Sk, H, G, D, Dv, scale, bf16_attention(rc), fused_qkv};
  s.own_kernels = rc.flash_attention;
  s.nondeterministic = rc.nondeterministic_attention;
  return s;
}

// An activation as a GEMM reads it: the fp32 tensor, or its bf16 (fp16) copy in bf16 (fp16) mode.
using Act = kernels::GemmOperand;

// Room to turn up to n floats at a time into a GEMM input, reused call after call (a loop over
// chunks): n 16-bit values in bf16 and fp16 mode, nothing in fp32 mode.
struct GemmInputRoom {
  void* data = nullptr;
};
GemmInputRoom gemm_input_room(const RunCtx& rc, Arena& arena, int64_t n);

// fp32 mode: x itself. bf16 (fp16) mode: a bf16 (fp16) copy of x[n], in `room` or allocated in
// `arena`.
Act as_gemm_input(const RunCtx& rc, const GemmInputRoom& room, const float* x, int64_t n);
Act as_gemm_input(const RunCtx& rc, Arena& arena, const float* x, int64_t n);

// Room for an fp32 tensor of n floats that as_gemm_input will make a stashed GEMM input of: in
// fp32 mode the GEMM reads the tensor itself, so it comes from `keep`; in bf16 and fp16 mode
// only its 16-bit copy is kept and the tensor is a temporary from `scratch`.
float* gemm_input_buffer(const RunCtx& rc, Arena& keep, Arena& scratch, int64_t n);

// Whether the linear layer of weight w runs its GEMMs in FP8 (one of rc.fp8's).
bool fp8_linear(const RunCtx& rc, Act w);

// Whether GEMM inputs are bf16 (bf16 mode, FP8 included): an op whose output only feeds a GEMM
// may then write the bf16 input itself (a norm's forward, GELU) instead of an fp32 tensor and
// as_gemm_input's conversion.
inline bool bf16_gemm_inputs(const RunCtx& rc) {
  return rc.precision == Precision::kBF16;
}

// Whether linear layer w's GEMMs may write bf16 outputs (gemm_bias to bf16, kernels/gemm.h): in
// bf16 mode, unless w is an FP8 layer (whose GEMMs write fp32). A layer whose output only feeds
// bf16 consumers (fc1's pre-activation for GELU, fc2's dgrad for GELU's backward) then takes it
// in bf16: half the bytes written and read.
inline bool bf16_gemm_outputs(const RunCtx& rc, Act w) {
  return bf16_gemm_inputs(rc) && !fp8_linear(rc, w);
}

// The MLP's activation of fc1's output (GELU or squared ReLU of [N, F], or SwiGLU of [N, 2F]) as
// fc2's stashed GEMM input [N, F]: GELU and squared ReLU in bf16 mode write it in one pass (from
// an fp32 or a bf16 fc1), as SwiGLU does from a bf16 fc1; else the fp32 activation goes through
// as_gemm_input.
Act mlp_activation(const RunCtx& rc,
                   Arena& keep,
                   Arena& scratch,
                   Act fc1,
                   int64_t N,
                   int64_t F,
                   MlpActivation act);

// fc1's output gradient from the activation's gradient dact [N, F], as fc1's backward reads it:
// GELU and squared ReLU in bf16 mode, and SwiGLU from a bf16 fc1, write the bf16 GEMM input in
// one pass, else the fp32 gradient ([N, F], or [N, 2F] for SwiGLU). fc1 and dact are both fp32,
// or (bf16 mode, the GEMMs writing bf16) both bf16. With *dbias (fc1's bias gradient; dbias and
// *dbias may be null), GELU in bf16 mode adds that gradient's column sums to it in the same pass
// and sets *dbias to null (nothing left for linear_backward).
Act mlp_activation_grad(const RunCtx& rc,
                        Arena& scratch,
                        Act fc1,
                        Act dact,
                        int64_t N,
                        int64_t F,
                        MlpActivation act,
                        float** dbias = nullptr);

// y[N,out] = x[N,in] W[out,in]^T + bias + residual (bias and residual may be null; residual
// [N,out], not y itself: the residual stream the output joins, added in the GEMM's epilogue)
void linear_forward(const RunCtx& rc,
                    float* y,
                    Act x,
                    Act w,
                    const float* bias,
                    int64_t N,
                    int64_t in,
                    int64_t out,
                    const float* residual = nullptr);
// y[N,out] = x W^T + bias rounded to bf16 once (bf16_gemm_outputs; bias: the bias's bf16 copy, or
// null)
void linear_forward(
    const RunCtx& rc, bf16* y, Act x, Act w, const bf16* bias, int64_t N, int64_t in, int64_t out);
// An MLP's fc1 and GELU in one GEMM (kernels::gemm_gelu; bf16_gemm_outputs): pre[N,out] = x W^T +
// bias and act = gelu of it (of the fp32 value), both rounded to bf16 once; linear_backward of the
// next layer (fc2) with gelu_pre = pre writes fc1's output gradient.
void linear_forward_gelu(const RunCtx& rc,
                         bf16* act,
                         bf16* pre,
                         Act x,
                         Act w,
                         const bf16* bias,
                         int64_t N,
                         int64_t in,
                         int64_t out);

// dx[N,in] = dy W (written, fp32 or, where bf16_gemm_outputs, bf16; skipped when dx is null),
// dw[out,in] += dy^T x,
// db[out] += column sums of dy (skipped when db is null). dy: fp32 (made a GEMM input here; in
// bf16 mode with db in the same pass as the column sums), or the GEMM input an op wrote itself
// (bf16 mode: the column sums are then those of the bf16 values, as a bias-gradient GEMM
// epilogue sums them). Temporaries come from `scratch`. With gelu_pre (a bf16 dx; the layer's input
// x being gelu of gelu_pre, linear_forward_gelu's), dx = (dy W) gelu'(gelu_pre) in the same GEMM
// (kernels::gemm_dgelu): the gradient of GELU's input.
template <typename DX>
void linear_backward(const RunCtx& rc,
                     Arena& scratch,
                     DX* dx,
                     float* dw,
                     float* db,
                     Act dy,
                     Act x,
                     Act w,
                     int64_t N,
                     int64_t in,
                     int64_t out,
                     const bf16* gelu_pre = nullptr);
template <typename DX>
inline void linear_backward(const RunCtx& rc,
                            Arena& scratch,
                            DX* dx,
                            float* dw,
                            float* db,
                            const float* dy,
                            Act x,
                            Act w,
                            int64_t N,
                            int64_t in,
                            int64_t out,
                            const bf16* gelu_pre = nullptr) {
  linear_backward(rc, scratch, dx, dw, db, Act::of(dy), x, w, N, in, out, gelu_pre);
}

}  // namespace mtron::model
