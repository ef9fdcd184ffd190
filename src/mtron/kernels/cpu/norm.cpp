// CPU LayerNorm and RMSNorm, forward and backward.
//
// One row (C channels) per iteration, statistics in fp32 with a two-pass variance (the row is in
// L1 for the second pass). Backward computes dinp row by row and the weight/bias gradients as
// partial sums over fixed blocks of kRowBlock rows, added in block order afterwards: the result
// does not depend on the thread count.
#include <omp.h>

#include <cmath>
#include <vector>

#include "mtron/kernels/cpu/cpu_ops.h"
#include "mtron/kernels/cpu/vec.h"

namespace mtron::kernels::cpu {
namespace {

constexpr int64_t kRowBlock = 64;

float row_sum(const float* x, int64_t C) {
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 2 * kVec <= C; c += 2 * kVec) {
    s0 = _mm512_add_ps(s0, _mm512_loadu_ps(x + c));
    s1 = _mm512_add_ps(s1, _mm512_loadu_ps(x + c + kVec));
  }
  for (; c < C; c += kVec) s0 = _mm512_add_ps(s0, _mm512_maskz_loadu_ps(tail_mask(C - c), x + c));
  return hsum(_mm512_add_ps(s0, s1));
}

// sum (x - mu)^2
float row_sqdev(const float* x, float mu, int64_t C) {
  const __m512 vm = _mm512_set1_ps(mu);
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 2 * kVec <= C; c += 2 * kVec) {
    const __m512 a = _mm512_sub_ps(_mm512_loadu_ps(x + c), vm);
    const __m512 b = _mm512_sub_ps(_mm512_loadu_ps(x + c + kVec), vm);
    s0 = _mm512_fmadd_ps(a, a, s0);
    s1 = _mm512_fmadd_ps(b, b, s1);
  }
  for (; c < C; c += kVec) {
    const __mmask16 m = tail_mask(C - c);
    const __m512 a = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, x + c), vm);
    s0 = _mm512_fmadd_ps(a, a, s0);
  }
  return hsum(_mm512_add_ps(s0, s1));
}

// Adds the per-block partials part[nblocks][C] (block order) into grad[C]; threads split C.
void reduce_blocks(float* grad, const float* part, int64_t nblocks, int64_t C) {
#pragma omp parallel num_threads(threads_for(nblocks* C * 4))
  {
    int64_t c0, c1;
    split_range(C, omp_get_thread_num(), omp_get_num_threads(), kVec, &c0, &c1);
    for (int64_t c = c0; c < c1; c += kVec) {
      const __mmask16 m = tail_mask(c1 - c);
      __m512 s = _mm512_setzero_ps();
      for (int64_t b = 0; b < nblocks; ++b)
        s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(m, part + b * C + c));
      _mm512_mask_storeu_ps(grad + c, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, grad + c), s));
    }
  }
}

}  // namespace

void layernorm_forward(float* out,
                       float* mean,
                       float* rstd,
                       const float* inp,
                       const float* weight,
                       const float* bias,
                       int64_t N,
                       int64_t C,
                       float eps) {
#pragma omp parallel for schedule(static) num_threads(threads_for(N* C * 8))
  for (int64_t r = 0; r < N; ++r) {
    const float* x = inp + r * C;
    float* o = out + r * C;
    const float mu = row_sum(x, C) / float(C);
    const float rs = 1.0f / std::sqrt(row_sqdev(x, mu, C) / float(C) + eps);
    mean[r] = mu;
    rstd[r] = rs;
    const __m512 vm = _mm512_set1_ps(mu), vr = _mm512_set1_ps(rs);
    for (int64_t c = 0; c < C; c += kVec) {
      const __mmask16 m = tail_mask(C - c);
      const __m512 n = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + c), vm), vr);
      _mm512_mask_storeu_ps(o + c, m,
                            _mm512_fmadd_ps(n, _mm512_maskz_loadu_ps(m, weight + c),
                                            _mm512_maskz_loadu_ps(m, bias + c)));
    }
  }
}

void layernorm_backward(float* dinp,
                        float* dweight,
                        float* dbias,
                        const float* dout,
                        const float* inp,
                        const float* weight,
                        const float* mean,
                        const float* rstd,
                        int64_t N,
                        int64_t C) {
  const int64_t nblocks = (N + kRowBlock - 1) / kRowBlock;
  std::vector<float> part(size_t(2 * nblocks * C));  // [2][nblocks][C]: dweight, dbias
  float* pw = part.data();
  float* pb = part.data() + nblocks * C;
#pragma omp parallel for schedule(static) num_threads(threads_for(N* C * 16))
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    float* bw = pw + blk * C;
    float* bb = pb + blk * C;
    for (int64_t c = 0; c < C; ++c) bw[c] = bb[c] = 0;
    for (int64_t r = blk * kRowBlock; r < std::min(N, (blk + 1) * kRowBlock); ++r) {
      const float* x = inp + r * C;
      const float* dy = dout + r * C;
      float* dx = dinp + r * C;
      const __m512 vm = _mm512_set1_ps(mean[r]), vr = _mm512_set1_ps(rstd[r]);
      // pass 1: the two row means, and the weight/bias partials
      __m512 sd = _mm512_setzero_ps(), sdn = _mm512_setzero_ps();
      for (int64_t c = 0; c < C; c += kVec) {
        const __mmask16 m = tail_mask(C - c);
        const __m512 g = _mm512_maskz_loadu_ps(m, dy + c);
        const __m512 n = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + c), vm), vr);
        const __m512 dn = _mm512_mul_ps(g, _mm512_maskz_loadu_ps(m, weight + c));
        sd = _mm512_add_ps(sd, dn);
        sdn = _mm512_fmadd_ps(dn, n, sdn);
        _mm512_mask_storeu_ps(bb + c, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, bb + c), g));
        _mm512_mask_storeu_ps(bw + c, m, _mm512_fmadd_ps(g, n, _mm512_maskz_loadu_ps(m, bw + c)));
      }
      const __m512 mdn = _mm512_set1_ps(hsum(sd) / float(C));
      const __m512 mdnn = _mm512_set1_ps(hsum(sdn) / float(C));
      // pass 2: dx += rstd (dnorm - mean(dnorm) - norm mean(dnorm norm))
      for (int64_t c = 0; c < C; c += kVec) {
        const __mmask16 m = tail_mask(C - c);
        const __m512 n = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + c), vm), vr);
        const __m512 dn =
            _mm512_mul_ps(_mm512_maskz_loadu_ps(m, dy + c), _mm512_maskz_loadu_ps(m, weight + c));
        const __m512 t = _mm512_fnmadd_ps(n, mdnn, _mm512_sub_ps(dn, mdn));
        _mm512_mask_storeu_ps(dx + c, m, _mm512_fmadd_ps(vr, t, _mm512_maskz_loadu_ps(m, dx + c)));
      }
    }
  }
  reduce_blocks(dweight, pw, nblocks, C);
  reduce_blocks(dbias, pb, nblocks, C);
}

void rmsnorm_forward(float* out,
                     float* rstd,
                     const float* inp,
                     const float* weight,
                     int64_t N,
                     int64_t C,
                     float eps) {
#pragma omp parallel for schedule(static) num_threads(threads_for(N* C * 8))
  for (int64_t r = 0; r < N; ++r) {
    const float* x = inp + r * C;
    float* o = out + r * C;
    const float rs = 1.0f / std::sqrt(row_sqdev(x, 0.0f, C) / float(C) + eps);
    rstd[r] = rs;
    const __m512 vr = _mm512_set1_ps(rs);
    for (int64_t c = 0; c < C; c += kVec) {
      const __mmask16 m = tail_mask(C - c);
      _mm512_mask_storeu_ps(o + c, m,
                            _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + c), vr),
                                          _mm512_maskz_loadu_ps(m, weight + c)));
    }
  }
}

void rmsnorm_backward(float* dinp,
                      float* dweight,
                      const float* dout,
                      const float* inp,
                      const float* weight,
                      const float* rstd,
                      int64_t N,
                      int64_t C) {
  const int64_t nblocks = (N + kRowBlock - 1) / kRowBlock;
  std::vector<float> part(size_t(nblocks * C));
#pragma omp parallel for schedule(static) num_threads(threads_for(N* C * 16))
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    float* bw = part.data() + blk * C;
    for (int64_t c = 0; c < C; ++c) bw[c] = 0;
    for (int64_t r = blk * kRowBlock; r < std::min(N, (blk + 1) * kRowBlock); ++r) {
      const float* x = inp + r * C;
      const float* dy = dout + r * C;
      float* dx = dinp + r * C;
      const __m512 vr = _mm512_set1_ps(rstd[r]);
      __m512 sdn = _mm512_setzero_ps();
      for (int64_t c = 0; c < C; c += kVec) {
        const __mmask16 m = tail_mask(C - c);
        const __m512 g = _mm512_maskz_loadu_ps(m, dy + c);
        const __m512 n = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + c), vr);
        sdn = _mm512_fmadd_ps(_mm512_mul_ps(g, _mm512_maskz_loadu_ps(m, weight + c)), n, sdn);
        _mm512_mask_storeu_ps(bw + c, m, _mm512_fmadd_ps(g, n, _mm512_maskz_loadu_ps(m, bw + c)));
      }
      const __m512 mdnn = _mm512_set1_ps(hsum(sdn) / float(C));
      for (int64_t c = 0; c < C; c += kVec) {
        const __mmask16 m = tail_mask(C - c);
        const __m512 n = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + c), vr);
        const __m512 dn =
            _mm512_mul_ps(_mm512_maskz_loadu_ps(m, dy + c), _mm512_maskz_loadu_ps(m, weight + c));
        const __m512 t = _mm512_fnmadd_ps(n, mdnn, dn);
        _mm512_mask_storeu_ps(dx + c, m, _mm512_fmadd_ps(vr, t, _mm512_maskz_loadu_ps(m, dx + c)));
      }
    }
  }
  reduce_blocks(dweight, part.data(), nblocks, C);
}

}  // namespace mtron::kernels::cpu
