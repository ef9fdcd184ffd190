#include "mtron/model/linear.h"

#include <type_traits>

#include "mtron/kernels/activation.h"
#include "mtron/kernels/device.h"
#include "mtron/kernels/elementwise.h"
#include "mtron/kernels/fp8.h"

namespace mtron::model {

using kernels::Trans;

namespace {

// A GEMM input quantised to FP8 (exact values in bf16 storage), its format and the scale it was
// quantised with.
struct Fp8Operand {
  Tensor q;
  kernels::Fp8Format format = kernels::Fp8Format::kE4M3;
  float scale = 1.0f;
};

// fn(p) with the operand's data as the pointer type of its dtype (fp32 or bf16).
template <typename F>
void with_data(Act a, F&& fn) {
  if (a.dtype == DType::kBF16) return fn(static_cast<const bf16*>(a.data));
  fn(static_cast<const float*>(a.data));
}

// src[n] quantised for role r of FP8 linear layer `id`: with the delayed scale, recording the
// amax, or (tensorwise) with the scale from src's own amax.
Fp8Operand fp8_operand(const RunCtx& rc, int id, Fp8Role r, Act src, int64_t n) {
  const Fp8State& f = *rc.fp8;
  const kernels::Fp8Format format = f.format(r);
  Fp8Operand o;
  o.format = format;
  if (f.config().recipe == Fp8Recipe::kTensorwise) {
    Tensor a = Tensor::empty({1}, DType::kF32, rc.k.device);
    kernels::fill_zero(rc.k, a.raw(), int64_t(sizeof(float)));
    with_data(src, [&](auto p) { kernels::abs_max(rc.k, a.f32(), p, n); });
    float amax = 0;
    kernels::copy_to_host(rc.k, &amax, a.raw(), int64_t(sizeof(float)));
    o.scale = current_scaling(amax, kernels::fp8_max(format));
  } else {
    o.scale = f.scale(id, r);
  }
  o.q = Tensor::empty({n}, DType::kBF16, rc.k.device);
  with_data(src, [&](auto p) {
    kernels::fp8_quantize(rc.k, o.q.bf(), f.amax(id, r), p, o.scale, format, n);
  });
  return o;
}

// C = op(a) op(b) / (a.scale b.scale) + beta C: the FP8 GEMM of two quantised operands, alpha the
// product of their inverse scales (fp32).
void fp8_gemm(const RunCtx& rc,
              Trans ta,
              Trans tb,
              int64_t M,
              int64_t N,
              int64_t K,
              const Fp8Operand& a,
              int64_t lda,
              const Fp8Operand& b,
              int64_t ldb,
              float beta,
              float* C,
              int64_t ldc) {
  kernels::gemm_fp8(rc.k, ta, tb, M, N, K, (1.0f / a.scale) * (1.0f / b.scale), a.q.bf(), a.format,
                    lda, b.q.bf(), b.format, ldb, beta, C, ldc);
}

// rc.fp8's index of the linear layer of weight w, -1 if it is not an FP8 one.
int fp8_id(const RunCtx& rc, Act w) {
  return rc.fp8 ? rc.fp8->find(w.data) : -1;
}

}  // namespace

bool fp8_linear(const RunCtx& rc, Act w) {
  return fp8_id(rc, w) >= 0;
}

GemmInputRoom gemm_input_room(const RunCtx& rc, Arena& arena, int64_t n) {
  return {rc.precision == Precision::kFP32 ? nullptr : arena.alloc<uint16_t>(n)};
}

Act as_gemm_input(const RunCtx& rc, const GemmInputRoom& room, const float* x, int64_t n) {
  if (rc.precision == Precision::kFP32) return Act::of(x);
  return kernels::narrow_operand(rc.k, compute_dtype(rc.precision), room.data, x, n);
}

Act as_gemm_input(const RunCtx& rc, Arena& arena, const float* x, int64_t n) {
  return as_gemm_input(rc, gemm_input_room(rc, arena, n), x, n);
}

float* gemm_input_buffer(const RunCtx& rc, Arena& keep, Arena& scratch, int64_t n) {
  return (rc.precision == Precision::kFP32 ? keep : scratch).alloc<float>(n);
}

namespace {

// The elementwise activation (GELU or squared ReLU) of n values, and its gradient.
template <typename T, typename I>
void activation_forward(const RunCtx& rc, MlpActivation act, T* out, const I* inp, int64_t n) {
  if (act == MlpActivation::kSquaredRelu) {
    kernels::relu2_forward(rc.k, out, inp, n);
  } else {
    kernels::gelu_forward(rc.k, out, inp, n);
  }
}

template <typename T, typename I>
void activation_backward(
    const RunCtx& rc, MlpActivation act, T* dinp, const I* inp, const I* dout, int64_t n) {
  if (act == MlpActivation::kSquaredRelu) {
    kernels::relu2_backward(rc.k, dinp, inp, dout, n);
  } else {
    kernels::gelu_backward(rc.k, dinp, inp, dout, n);
  }
}

}  // namespace

Act mlp_activation(const RunCtx& rc,
                   Arena& keep,
                   Arena& scratch,
                   Act fc1_in,
                   int64_t N,
                   int64_t F,
                   MlpActivation act) {
  const bool swiglu = act == MlpActivation::kSwiglu;
  if (swiglu && fc1_in.dtype == DType::kBF16) {
    bf16* out = keep.alloc<bf16>(N * F);
    kernels::swiglu_forward(rc.k, out, static_cast<const bf16*>(fc1_in.data), N, F);
    return Act::of(out);
  }
  if (!swiglu && bf16_gemm_inputs(rc)) {
    bf16* out = keep.alloc<bf16>(N * F);
    with_data(fc1_in, [&](auto fc1) { activation_forward(rc, act, out, fc1, N * F); });
    return Act::of(out);
  }
  MT_ASSERT(fc1_in.dtype == DType::kF32, "mlp_activation: a ", dtype_name(fc1_in.dtype),
            " fc1 output outside bf16 mode");
  const float* fc1 = static_cast<const float*>(fc1_in.data);
  float* out = gemm_input_buffer(rc, keep, scratch, N * F);
  if (swiglu) {
    kernels::swiglu_forward(rc.k, out, fc1, N, F);
  } else {
    activation_forward(rc, act, out, fc1, N * F);
  }
  return as_gemm_input(rc, keep, out, N * F);
}

Act mlp_activation_grad(const RunCtx& rc,
                        Arena& scratch,
                        Act fc1_in,
                        Act dact_in,
                        int64_t N,
                        int64_t F,
                        MlpActivation act,
                        float** dbias) {
  MT_ASSERT(fc1_in.dtype == dact_in.dtype, "mlp_activation_grad: fc1 output ",
            dtype_name(fc1_in.dtype), " and its gradient ", dtype_name(dact_in.dtype));
  const bool swiglu = act == MlpActivation::kSwiglu;
  if (swiglu && fc1_in.dtype == DType::kBF16) {  // fc1's bias gradient: linear_backward's
    bf16* d = scratch.alloc<bf16>(N * 2 * F);
    kernels::swiglu_backward(rc.k, d, static_cast<const bf16*>(fc1_in.data),
                             static_cast<const bf16*>(dact_in.data), N, F);
    return Act::of(d);
  }
  if (!swiglu && bf16_gemm_inputs(rc)) {
    bf16* d = scratch.alloc<bf16>(N * F);
    with_data(fc1_in, [&](auto fc1) {
      const auto* dact = static_cast<decltype(fc1)>(dact_in.data);
      if (act == MlpActivation::kGelu && dbias && *dbias) {
        kernels::gelu_backward_bias(rc.k, *dbias, d, fc1, dact, N, F);
        *dbias = nullptr;
      } else {
        activation_backward(rc, act, d, fc1, dact, N * F);
      }
    });
    return Act::of(d);
  }
  MT_ASSERT(fc1_in.dtype == DType::kF32, "mlp_activation_grad: a ", dtype_name(fc1_in.dtype),
            " fc1 output outside bf16 mode");
  const float* fc1 = static_cast<const float*>(fc1_in.data);
  const float* dact = static_cast<const float*>(dact_in.data);
  float* d = scratch.alloc<float>(N * (swiglu ? 2 * F : F));
  if (swiglu) {
    kernels::swiglu_backward(rc.k, d, fc1, dact, N, F);
  } else {
    activation_backward(rc, act, d, fc1, dact, N * F);
  }
  return Act::of(d);
}

void linear_forward(const RunCtx& rc,
                    float* y,
                    Act x,
                    Act w,
                    const float* bias,
                    int64_t N,
                    int64_t in,
                    int64_t out,
                    const float* residual) {
  if (const int id = fp8_id(rc, w); id >= 0) {
    const Fp8Operand qx = fp8_operand(rc, id, Fp8Role::kInput, x, N * in);
    const Fp8Operand qw = fp8_operand(rc, id, Fp8Role::kWeight, w, out * in);
    fp8_gemm(rc, Trans::kN, Trans::kT, N, out, in, qx, in, qw, in, 0.0f, y, out);
    if (bias) kernels::bias_add(rc.k, y, bias, N, out);
    if (residual) kernels::add(rc.k, y, y, residual, N * out);
  } else if (bias || residual) {
    kernels::gemm_bias(rc.k, Trans::kN, Trans::kT, N, out, in, x, in, w, in, y, bias, residual);
  } else {
    kernels::gemm(rc.k, Trans::kN, Trans::kT, N, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
  }
}

void linear_forward(
    const RunCtx& rc, bf16* y, Act x, Act w, const bf16* bias, int64_t N, int64_t in, int64_t out) {
  MT_ASSERT(bf16_gemm_outputs(rc, w), "linear_forward to bf16 outside bf16 mode or in FP8");
  kernels::gemm_bias(rc.k, Trans::kN, Trans::kT, N, out, in, x, in, w, in, y, bias);
}

void linear_forward_gelu(const RunCtx& rc,
                         bf16* act,
                         bf16* pre,
                         Act x,
                         Act w,
                         const bf16* bias,
                         int64_t N,
                         int64_t in,
                         int64_t out) {
  MT_ASSERT(bf16_gemm_outputs(rc, w), "linear_forward_gelu outside bf16 mode or in FP8");
  kernels::gemm_gelu(rc.k, Trans::kN, Trans::kT, N, out, in, x, in, w, in, act, pre, bias);
}

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
                     const bf16* gelu_pre) {
  const int id = fp8_id(rc, w);
  constexpr bool dx16 = std::is_same_v<DX, bf16>;
  MT_ASSERT(!dx16 || bf16_gemm_outputs(rc, w), "a bf16 dgrad outside bf16 mode or in FP8");
  MT_ASSERT(!gelu_pre || (dx16 && dx), "linear_backward: GELU's input without a bf16 dgrad");
  Act g = dy;  // the output gradient as the bf16/fp16/fp32 GEMMs read it
  if (db && dy.dtype == DType::kF32 && id < 0 && bf16_gemm_inputs(rc)) {  // one pass for both
    bf16* g16 = scratch.alloc<bf16>(N * out);
    kernels::bias_backward_narrow(rc.k, db, g16, static_cast<const float*>(dy.data), N, out);
    g = Act::of(g16);
  } else {
    if (db) with_data(dy, [&](auto p) { kernels::bias_backward(rc.k, db, p, N, out); });
    if (id < 0 && dy.dtype == DType::kF32)
      g = as_gemm_input(rc, scratch, static_cast<const float*>(dy.data), N * out);
  }
  if (id >= 0) {
    const Fp8Operand qg = fp8_operand(rc, id, Fp8Role::kGrad, dy, N * out);
    if constexpr (!dx16) {
      if (dx) {
        const Fp8Operand qw = fp8_operand(rc, id, Fp8Role::kWeight, w, out * in);
        fp8_gemm(rc, Trans::kN, Trans::kN, N, in, out, qg, out, qw, in, 0.0f, dx, in);
      }
    }
    const Fp8Operand qx = fp8_operand(rc, id, Fp8Role::kInput, x, N * in);
    fp8_gemm(rc, Trans::kT, Trans::kN, out, in, N, qg, out, qx, in, 1.0f, dw, in);
    return;
  }
  if constexpr (dx16) {
    if (gelu_pre) {
      kernels::gemm_dgelu(rc.k, Trans::kN, Trans::kN, N, in, out, g, out, w, in, dx, gelu_pre);
    } else if (dx) {
      kernels::gemm_bias(rc.k, Trans::kN, Trans::kN, N, in, out, g, out, w, in, dx, nullptr);
    }
  } else {
    if (dx)
      kernels::gemm(rc.k, Trans::kN, Trans::kN, N, in, out, 1.0f, g, out, w, in, 0.0f, dx, in);
  }
  kernels::gemm(rc.k, Trans::kT, Trans::kN, out, in, N, 1.0f, g, out, x, in, 1.0f, dw, in);
}
template void linear_backward(const RunCtx&,
                              Arena&,
                              float*,
                              float*,
                              float*,
                              Act,
                              Act,
                              Act,
                              int64_t,
                              int64_t,
                              int64_t,
                              const bf16*);
template void linear_backward(const RunCtx&,
                              Arena&,
                              bf16*,
                              float*,
                              float*,
                              Act,
                              Act,
                              Act,
                              int64_t,
                              int64_t,
                              int64_t,
                              const bf16*);

}  // namespace mtron::model
