// CPU GELU (tanh approximation) and SwiGLU.
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

// f(i, k, gelu(inp[i .. i + k))) over the lanes of an fp32 or bf16 inp[0, n).
template <typename I, typename F>
void for_gelu(const I* inp, int64_t n, int64_t bytes, F f) {
  const DF d;
  const VF k2 = hn::Set(d, 2 * kGeluK), c = hn::Set(d, kGeluC), one = hn::Set(d, 1.0f);
  parallel_lanes(d, n, bytes, [&](int64_t i, size_t k) {
    const VF x = load_f32(d, inp + i, k);
    const VF u2 = hn::Mul(hn::Mul(k2, x), hn::MulAdd(c, hn::Mul(x, x), one));
    f(i, k, hn::Mul(x, sigmoid(d, u2)));
  });
}

void gelu_forward(float* out, const float* inp, int64_t n) {
  const DF d;
  for_gelu(inp, n, n * 8, [&](int64_t i, size_t k, VF y) { store(d, y, out + i, k); });
}

template <typename I>
void gelu_to_bf16(bf16* out, const I* inp, int64_t n) {
  const DF d;
  const DU16 dh;
  for_gelu(inp, n, n * int64_t(2 + sizeof(I)),
           [&](int64_t i, size_t k, VF y) { store(dh, to_bf16(d, y), bits(out + i), k); });
}

void gelu_forward_bf16(bf16* out, const float* inp, int64_t n) {
  gelu_to_bf16(out, inp, n);
}

void gelu_forward_bf16_in(bf16* out, const bf16* inp, int64_t n) {
  gelu_to_bf16(out, inp, n);
}

// dgelu(x) * dy
HWY_INLINE VF gelu_grad(DF d, VF x, VF dy) {
  const VF k2 = hn::Set(d, 2 * kGeluK), c = hn::Set(d, kGeluC);
  const VF c3 = hn::Set(d, 3 * kGeluC), one = hn::Set(d, 1.0f);
  const VF x2 = hn::Mul(x, x);
  const VF s = sigmoid(d, hn::Mul(hn::Mul(k2, x), hn::MulAdd(c, x2, one)));
  const VF du2 = hn::Mul(k2, hn::MulAdd(c3, x2, one));  // 2u'
  // s + x s (1 - s) 2u'
  const VF g = hn::MulAdd(hn::Mul(x, hn::Mul(s, hn::Sub(one, s))), du2, s);
  return hn::Mul(g, dy);
}

// f(i, k, dgelu(inp) * dout) over the lanes of [0, n), inp and dout fp32 or bf16.
template <typename I, typename F>
void for_gelu_grad(const I* inp, const I* dout, int64_t n, int64_t bytes, F f) {
  const DF d;
  parallel_lanes(d, n, bytes, [&](int64_t i, size_t k) {
    f(i, k, gelu_grad(d, load_f32(d, inp + i, k), load_f32(d, dout + i, k)));
  });
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  const DF d;
  for_gelu_grad(inp, dout, n, n * 12, [&](int64_t i, size_t k, VF g) { store(d, g, dinp + i, k); });
}

template <typename I>
void gelu_grad_to_bf16(bf16* dinp, const I* inp, const I* dout, int64_t n) {
  const DF d;
  const DU16 dh;
  for_gelu_grad(inp, dout, n, n * int64_t(2 + 2 * sizeof(I)),
                [&](int64_t i, size_t k, VF g) { store(dh, to_bf16(d, g), bits(dinp + i), k); });
}

void gelu_backward_bf16(bf16* dinp, const float* inp, const float* dout, int64_t n) {
  gelu_grad_to_bf16(dinp, inp, dout, n);
}

void gelu_backward_bf16_in(bf16* dinp, const bf16* inp, const bf16* dout, int64_t n) {
  gelu_grad_to_bf16(dinp, inp, dout, n);
}

template <typename I>
void gelu_grad_bias(float* dbias, bf16* dinp, const I* inp, const I* dout, int64_t N, int64_t C) {
  const DF d;
  const DU16 dh;
  sum_columns(dbias, N, C, N * C * int64_t(2 + 2 * sizeof(I)),
              [&](int64_t r, int64_t c0, int64_t w, float* part) {
                const int64_t o = r * C + c0;
                for_lanes(d, 0, w, [&](int64_t c, size_t k) {
                  const VF g =
                      gelu_grad(d, load_f32(d, inp + o + c, k), load_f32(d, dout + o + c, k));
                  store(dh, to_bf16(d, g), bits(dinp + o + c), k);
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

// v into p[0, k): fp32, or rounded to bf16 (convert's rounding).
HWY_INLINE void store_f32(DF d, VF v, float* p, size_t k) {
  store(d, v, p, k);
}
HWY_INLINE void store_f32(DF d, VF v, bf16* p, size_t k) {
  store(DU16(), to_bf16(d, v), bits(p), k);
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
