// CPU GELU (tanh approximation) and SwiGLU.
//
// GELU uses the identity 0.5 x (1 + tanh(u)) = x sigmoid(2u), which has no cancellation for
// large negative x (the tanh form loses all digits there); its derivative is
//   s + 2 x s (1 - s) u',  s = sigmoid(2u), u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
#include <omp.h>

#include "mtron/kernels/cpu/cpu_ops.h"
#include "mtron/kernels/cpu/vec.h"

namespace mtron::kernels::cpu {
namespace {

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluC = 0.044715f;

}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n) {
  const __m512 k2 = _mm512_set1_ps(2 * kGeluK), c = _mm512_set1_ps(kGeluC);
#pragma omp parallel num_threads(threads_for(n * 8))
  {
    int64_t i0, i1;
    split_range(n, omp_get_thread_num(), omp_get_num_threads(), kVec, &i0, &i1);
    for (int64_t i = i0; i < i1; i += kVec) {
      const __mmask16 m = tail_mask(i1 - i);
      const __m512 x = _mm512_maskz_loadu_ps(m, inp + i);
      const __m512 x2 = _mm512_mul_ps(x, x);
      const __m512 u2 =
          _mm512_mul_ps(_mm512_mul_ps(k2, x), _mm512_fmadd_ps(c, x2, _mm512_set1_ps(1)));
      _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(x, sigmoid_ps(u2)));
    }
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  const __m512 k2 = _mm512_set1_ps(2 * kGeluK), c = _mm512_set1_ps(kGeluC);
  const __m512 c3 = _mm512_set1_ps(3 * kGeluC), one = _mm512_set1_ps(1);
#pragma omp parallel num_threads(threads_for(n * 12))
  {
    int64_t i0, i1;
    split_range(n, omp_get_thread_num(), omp_get_num_threads(), kVec, &i0, &i1);
    for (int64_t i = i0; i < i1; i += kVec) {
      const __mmask16 m = tail_mask(i1 - i);
      const __m512 x = _mm512_maskz_loadu_ps(m, inp + i);
      const __m512 x2 = _mm512_mul_ps(x, x);
      const __m512 s = sigmoid_ps(_mm512_mul_ps(_mm512_mul_ps(k2, x), _mm512_fmadd_ps(c, x2, one)));
      const __m512 du2 = _mm512_mul_ps(k2, _mm512_fmadd_ps(c3, x2, one));  // 2u'
      // s + x s (1 - s) 2u'
      const __m512 g =
          _mm512_fmadd_ps(_mm512_mul_ps(x, _mm512_mul_ps(s, _mm512_sub_ps(one, s))), du2, s);
      _mm512_mask_storeu_ps(dinp + i, m, _mm512_mul_ps(g, _mm512_maskz_loadu_ps(m, dout + i)));
    }
  }
}

void swiglu_forward(float* out, const float* inp, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static) num_threads(threads_for(N* F * 12))
  for (int64_t r = 0; r < N; ++r) {
    const float* gate = inp + r * 2 * F;
    const float* up = gate + F;
    float* o = out + r * F;
    for (int64_t c = 0; c < F; c += kVec) {
      const __mmask16 m = tail_mask(F - c);
      const __m512 g = _mm512_maskz_loadu_ps(m, gate + c);
      const __m512 u = _mm512_maskz_loadu_ps(m, up + c);
      _mm512_mask_storeu_ps(o + c, m, _mm512_mul_ps(_mm512_mul_ps(g, sigmoid_ps(g)), u));
    }
  }
}

// d gate = dout up s (1 + g (1 - s)),  d up = dout g s   (s = sigmoid(g))
void swiglu_backward(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F) {
  const __m512 one = _mm512_set1_ps(1);
#pragma omp parallel for schedule(static) num_threads(threads_for(N* F * 20))
  for (int64_t r = 0; r < N; ++r) {
    const float* gate = inp + r * 2 * F;
    const float* up = gate + F;
    const float* dy = dout + r * F;
    float* dgate = dinp + r * 2 * F;
    float* dup = dgate + F;
    for (int64_t c = 0; c < F; c += kVec) {
      const __mmask16 m = tail_mask(F - c);
      const __m512 g = _mm512_maskz_loadu_ps(m, gate + c);
      const __m512 u = _mm512_maskz_loadu_ps(m, up + c);
      const __m512 d = _mm512_maskz_loadu_ps(m, dy + c);
      const __m512 s = sigmoid_ps(g);
      const __m512 gs = _mm512_mul_ps(g, s);
      const __m512 t = _mm512_fmadd_ps(g, _mm512_sub_ps(one, s), one);
      _mm512_mask_storeu_ps(dgate + c, m, _mm512_mul_ps(_mm512_mul_ps(d, u), _mm512_mul_ps(s, t)));
      _mm512_mask_storeu_ps(dup + c, m, _mm512_mul_ps(d, gs));
    }
  }
}

}  // namespace mtron::kernels::cpu
