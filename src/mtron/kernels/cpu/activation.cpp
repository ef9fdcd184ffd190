// CPU GELU (tanh approximation), squared ReLU and SwiGLU.
//
// GELU uses the identity 0.5 x (1 + tanh(u)) = x sigmoid(2u), which has no cancellation for
// large negative x (the tanh form loses all digits there); its derivative is
//   s + 2 x s (1 - s) u',  s = sigmoid(2u), u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "mtron/kernels/cpu/activation.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// clang-format off
#include <hwy/highway.h>
#include "mtron/kernels/cpu/simd-inl.h"
// clang-format on

#include "mtron/kernels/cpu/cpu_ops.h"
#include "mtron/kernels/cpu/parallel.h"

HWY_BEFORE_NAMESPACE();
namespace mtron::kernels::cpu::HWY_NAMESPACE {
namespace {

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluC = 0.044715f;

}  // namespace

// v into p[0, k): fp32, or rounded to bf16 (convert's rounding).
HWY_INLINE void store_f32(DF d, VF v, float* p, size_t k) {
  store(d, v, p, k);
}
HWY_INLINE void store_f32(DF d, VF v, bf16* p, size_t k) {
  store(DU16(), to_bf16(d, v), bits(p), k);
}

struct Gelu {
  static HWY_INLINE VF value(DF d, VF x) {
    const VF u2 = hn::Mul(hn::Mul(hn::Set(d, 2 * kGeluK), x),
                          hn::MulAdd(hn::Set(d, kGeluC), hn::Mul(x, x), hn::Set(d, 1.0f)));
    return hn::Mul(x, sigmoid(d, u2));
  }
  // dgelu(x) * dy
  static HWY_INLINE VF grad(DF d, VF x, VF dy) {
    const VF k2 = hn::Set(d, 2 * kGeluK), c = hn::Set(d, kGeluC);
    const VF c3 = hn::Set(d, 3 * kGeluC), one = hn::Set(d, 1.0f);
    const VF x2 = hn::Mul(x, x);
    const VF s = sigmoid(d, hn::Mul(hn::Mul(k2, x), hn::MulAdd(c, x2, one)));
    const VF du2 = hn::Mul(k2, hn::MulAdd(c3, x2, one));  // 2u'
    // s + x s (1 - s) 2u'
    const VF g = hn::MulAdd(hn::Mul(x, hn::Mul(s, hn::Sub(one, s))), du2, s);
    return hn::Mul(g, dy);
  }
};

// Squared ReLU; a NaN input stays NaN (x < 0 is false), as torch's relu.
struct Relu2 {
  static HWY_INLINE VF relu(DF d, VF x) {
    const VF zero = hn::Zero(d);
    return hn::IfThenElse(hn::Lt(x, zero), zero, x);
  }
  static HWY_INLINE VF value(DF d, VF x) {
    const VF r = relu(d, x);
    return hn::Mul(r, r);
  }
  static HWY_INLINE VF grad(DF d, VF x, VF dy) {
    const VF r = relu(d, x);
    return hn::Mul(hn::Add(r, r), dy);
  }
};

// out = A(inp) over [0, n): inp fp32 or bf16 (widened), out fp32 or bf16 (rounded once).
template <class A, typename T, typename I>
void activation_map(T* out, const I* inp, int64_t n) {
  const DF d;
  parallel_lanes(d, n, n * int64_t(sizeof(T) + sizeof(I)), [&](int64_t i, size_t k) {
    store_f32(d, A::value(d, load_f32(d, inp + i, k)), out + i, k);
  });
}

// dinp = A'(inp) dout over [0, n), types as activation_map's.
template <class A, typename T, typename I>
void activation_grad_map(T* dinp, const I* inp, const I* dout, int64_t n) {
  const DF d;
  parallel_lanes(d, n, n * int64_t(sizeof(T) + 2 * sizeof(I)), [&](int64_t i, size_t k) {
    store_f32(d, A::grad(d, load_f32(d, inp + i, k), load_f32(d, dout + i, k)), dinp + i, k);
  });
}

void gelu_forward(float* out, const float* inp, int64_t n) {
  activation_map<Gelu>(out, inp, n);
}

void gelu_forward_bf16(bf16* out, const float* inp, int64_t n) {
  activation_map<Gelu>(out, inp, n);
}

void gelu_forward_bf16_in(bf16* out, const bf16* inp, int64_t n) {
  activation_map<Gelu>(out, inp, n);
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  activation_grad_map<Gelu>(dinp, inp, dout, n);
}

void gelu_backward_bf16(bf16* dinp, const float* inp, const float* dout, int64_t n) {
  activation_grad_map<Gelu>(dinp, inp, dout, n);
}

void gelu_backward_bf16_in(bf16* dinp, const bf16* inp, const bf16* dout, int64_t n) {
  activation_grad_map<Gelu>(dinp, inp, dout, n);
}

void relu2_forward(float* out, const float* inp, int64_t n) {
  activation_map<Relu2>(out, inp, n);
}

void relu2_forward_bf16(bf16* out, const float* inp, int64_t n) {
  activation_map<Relu2>(out, inp, n);
}

void relu2_forward_bf16_in(bf16* out, const bf16* inp, int64_t n) {
  activation_map<Relu2>(out, inp, n);
}

void relu2_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  activation_grad_map<Relu2>(dinp, inp, dout, n);
}

void relu2_backward_bf16(bf16* dinp, const float* inp, const float* dout, int64_t n) {
  activation_grad_map<Relu2>(dinp, inp, dout, n);
}

void relu2_backward_bf16_in(bf16* dinp, const bf16* inp, const bf16* dout, int64_t n) {
  activation_grad_map<Relu2>(dinp, inp, dout, n);
}

template <typename I>
void gelu_grad_bias(float* dbias, bf16* dinp, const I* inp, const I* dout, int64_t N, int64_t C) {
  const DF d;
  sum_columns(dbias, N, C, N * C * int64_t(2 + 2 * sizeof(I)),
              [&](int64_t r, int64_t c0, int64_t w, float* part) {
                const int64_t o = r * C + c0;
                for_lanes(d, 0, w, [&](int64_t c, size_t k) {
                  store_f32(
                      d, Gelu::grad(d, load_f32(d, inp + o + c, k), load_f32(d, dout + o + c, k)),
                      dinp + o + c, k);
                });
                add_into(d, part, dinp + o, w);
              });
}

void gelu_backward_bias(
    float* dbias, bf16* dinp, const float* inp, const float* dout, int64_t N, int64_t C) {
  gelu_grad_bias(dbias, dinp, inp, dout, N, C);
}

void gelu_backward_bias_bf16_in(
    float* dbias, bf16* dinp, const bf16* inp, const bf16* dout, int64_t N, int64_t C) {
  gelu_grad_bias(dbias, dinp, inp, dout, N, C);
}

// T: float, or bf16 (the inputs widened, the outputs rounded once).
template <typename T>
void swiglu_rows(T* out, const T* inp, int64_t N, int64_t F) {
  const DF d;
  parallel_rows(N, threads_for(N * F * 3 * int64_t(sizeof(T))), [&](int64_t r) {
    const T* gate = inp + r * 2 * F;
    const T* up = gate + F;
    T* o = out + r * F;
    for_lanes(d, 0, F, [&](int64_t c, size_t k) {
      const VF g = load_f32(d, gate + c, k);
      store_f32(d, hn::Mul(hn::Mul(g, sigmoid(d, g)), load_f32(d, up + c, k)), o + c, k);
    });
  });
}

void swiglu_forward(float* out, const float* inp, int64_t N, int64_t F) {
  swiglu_rows(out, inp, N, F);
}

void swiglu_forward_bf16_in(bf16* out, const bf16* inp, int64_t N, int64_t F) {
  swiglu_rows(out, inp, N, F);
}

// d gate = dout up s (1 + g (1 - s)),  d up = dout g s   (s = sigmoid(g))
template <typename T>
void swiglu_grad_rows(T* dinp, const T* inp, const T* dout, int64_t N, int64_t F) {
  const DF d;
  const VF one = hn::Set(d, 1.0f);
  parallel_rows(N, threads_for(N * F * 5 * int64_t(sizeof(T))), [&](int64_t r) {
    const T* gate = inp + r * 2 * F;
    const T* up = gate + F;
    const T* dy = dout + r * F;
    T* dgate = dinp + r * 2 * F;
    T* dup = dgate + F;
    for_lanes(d, 0, F, [&](int64_t c, size_t k) {
      const VF g = load_f32(d, gate + c, k);
      const VF u = load_f32(d, up + c, k);
      const VF dd = load_f32(d, dy + c, k);
      const VF s = sigmoid(d, g);
      const VF t = hn::MulAdd(g, hn::Sub(one, s), one);
      store_f32(d, hn::Mul(hn::Mul(dd, u), hn::Mul(s, t)), dgate + c, k);
      store_f32(d, hn::Mul(dd, hn::Mul(g, s)), dup + c, k);
    });
  });
}

void swiglu_backward(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F) {
  swiglu_grad_rows(dinp, inp, dout, N, F);
}

void swiglu_backward_bf16_in(bf16* dinp, const bf16* inp, const bf16* dout, int64_t N, int64_t F) {
  swiglu_grad_rows(dinp, inp, dout, N, F);
}

}  // namespace mtron::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mtron::kernels::cpu {
MTRON_ACTIVATION_OPS(MT_CPU_EXPORT)
}  // namespace mtron::kernels::cpu
#endif  // HWY_ONCE
