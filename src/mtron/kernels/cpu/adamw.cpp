// CPU AdamW step over a contiguous fp32 range, optionally writing the bf16 compute copy.
//
// The arithmetic follows torch.optim.AdamW's single-tensor path in fp32, scalars in double:
//   p *= 1 - lr wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
// which is adamw.h's formula with the operations in the order PyTorch rounds them.
#include <omp.h>

#include <cmath>

#include "mtron/kernels/cpu/cpu_ops.h"
#include "mtron/kernels/cpu/vec.h"

namespace mtron::kernels::cpu {

void adamw_step(float* param,
                float* m,
                float* v,
                const float* grad,
                bf16* param_bf16,
                int64_t n,
                const AdamWParams& p) {
  const double bc1 = 1.0 - std::pow(double(p.beta1), double(p.step));
  const double bc2 = 1.0 - std::pow(double(p.beta2), double(p.step));
  const __m512 decay = _mm512_set1_ps(float(1.0 - double(p.lr) * double(p.weight_decay)));
  const __m512 b1 = _mm512_set1_ps(p.beta1), nb1 = _mm512_set1_ps(1.0f - p.beta1);
  const __m512 b2 = _mm512_set1_ps(p.beta2), nb2 = _mm512_set1_ps(1.0f - p.beta2);
  const __m512 step_size = _mm512_set1_ps(float(double(p.lr) / bc1));
  const __m512 bc2_sqrt = _mm512_set1_ps(float(std::sqrt(bc2)));
  const __m512 eps = _mm512_set1_ps(p.eps);
#pragma omp parallel num_threads(threads_for(n * 18))
  {
    int64_t i0, i1;
    split_range(n, omp_get_thread_num(), omp_get_num_threads(), kVec, &i0, &i1);
    for (int64_t i = i0; i < i1; i += kVec) {
      const __mmask16 k = tail_mask(i1 - i);
      const __m512 g = _mm512_maskz_loadu_ps(k, grad + i);
      const __m512 mm = _mm512_fmadd_ps(nb1, g, _mm512_mul_ps(b1, _mm512_maskz_loadu_ps(k, m + i)));
      const __m512 vv = _mm512_fmadd_ps(_mm512_mul_ps(nb2, g), g,
                                        _mm512_mul_ps(b2, _mm512_maskz_loadu_ps(k, v + i)));
      const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vv), bc2_sqrt), eps);
      __m512 w = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, param + i), decay);
      w = _mm512_fnmadd_ps(step_size, _mm512_div_ps(mm, denom), w);
      _mm512_mask_storeu_ps(m + i, k, mm);
      _mm512_mask_storeu_ps(v + i, k, vv);
      _mm512_mask_storeu_ps(param + i, k, w);
      if (param_bf16) _mm256_mask_storeu_epi16(param_bf16 + i, k, f32_to_bf16_ps(w));
    }
  }
}

}  // namespace mtron::kernels::cpu
