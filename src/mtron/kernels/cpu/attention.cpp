// CPU flash-style attention (attention.h): tiled, online softmax, forward saves lse, backward
// recomputes the probabilities from lse.
//
// Every product is a small row-major "C (+)= A B" done by one AVX-512 register-blocked
// micro-kernel (6 rows x up to 64 columns of accumulators), reading q/k/v/dout in place through
// their sequence-major strides. Transposed operands are transposed once per call (forward: K^T
// of every (b, group)) or once per (b, head) task (backward: Q^T, dO^T, K^T), never per tile.
//
// Forward: one task per (b, h, block of kBq queries); for each block of kBk keys,
//   S = Q K^T, online softmax update of (row max m, row sum l, O), O += P V; out = O / l,
//   lse = m + log l. Causal blocks past the diagonal are skipped.
// Backward: one task per (b, kv group), which owns dk/dv of that group (no races); for each
// head of the group and each (key block j, query block i) that is not fully masked:
//   S^T = K_j Q_i^T, P^T = exp(scale S^T - lse), dP^T = V_j dO_i^T,
//   dS^T = P^T (dP^T - Delta) scale,  Delta_i = dO_i . O_i,
//   dV_j += P^T dO_i,  dK_j += dS^T Q_i,  dQ_i^T += K_j^T dS^T.
// Working in the transposed score layout makes every operand row-major without per-tile
// transposes and vectorises the softmax over queries.
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "mtron/kernels/cpu/cpu_ops.h"
#include "mtron/kernels/cpu/vec.h"

namespace mtron::kernels::cpu {
namespace {

constexpr int64_t kBq = 64, kBk = 64;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// C[R, NV*16] (= or +=) A[R, K] B[K, NV*16]; the last column vector is masked by `last`.
template <int R, int NV>
void mk(int64_t K,
        const float* A,
        int64_t lda,
        const float* B,
        int64_t ldb,
        float* C,
        int64_t ldc,
        __mmask16 last,
        bool acc) {
  __m512 c[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v)
      c[r][v] = acc ? _mm512_maskz_loadu_ps(v == NV - 1 ? last : 0xffff, C + r * ldc + v * kVec)
                    : _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    __m512 b[NV];
    for (int v = 0; v < NV; ++v)
      b[v] = _mm512_maskz_loadu_ps(v == NV - 1 ? last : 0xffff, B + k * ldb + v * kVec);
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(A[r * lda + k]);
      for (int v = 0; v < NV; ++v) c[r][v] = _mm512_fmadd_ps(a, b[v], c[r][v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v)
      _mm512_mask_storeu_ps(C + r * ldc + v * kVec, v == NV - 1 ? last : 0xffff, c[r][v]);
}

template <int NV>
void mk_rows(int64_t M,
             int64_t K,
             const float* A,
             int64_t lda,
             const float* B,
             int64_t ldb,
             float* C,
             int64_t ldc,
             __mmask16 last,
             bool acc) {
  int64_t m = 0;
  for (; m + 6 <= M; m += 6) mk<6, NV>(K, A + m * lda, lda, B, ldb, C + m * ldc, ldc, last, acc);
  const float* a = A + m * lda;
  float* c = C + m * ldc;
  switch (M - m) {
    case 5:
      return mk<5, NV>(K, a, lda, B, ldb, c, ldc, last, acc);
    case 4:
      return mk<4, NV>(K, a, lda, B, ldb, c, ldc, last, acc);
    case 3:
      return mk<3, NV>(K, a, lda, B, ldb, c, ldc, last, acc);
    case 2:
      return mk<2, NV>(K, a, lda, B, ldb, c, ldc, last, acc);
    case 1:
      return mk<1, NV>(K, a, lda, B, ldb, c, ldc, last, acc);
    default:
      return;
  }
}

// C[M, N] (= or +=) A[M, K] B[K, N], all row-major with row strides.
void mm(int64_t M,
        int64_t N,
        int64_t K,
        const float* A,
        int64_t lda,
        const float* B,
        int64_t ldb,
        float* C,
        int64_t ldc,
        bool acc) {
  for (int64_t n0 = 0; n0 < N; n0 += 4 * kVec) {
    const int64_t nn = std::min<int64_t>(4 * kVec, N - n0);
    const int64_t nv = (nn + kVec - 1) / kVec;
    const __mmask16 last = tail_mask(nn - (nv - 1) * kVec);
    const float* b = B + n0;
    float* c = C + n0;
    switch (nv) {
      case 1:
        mk_rows<1>(M, K, A, lda, b, ldb, c, ldc, last, acc);
        break;
      case 2:
        mk_rows<2>(M, K, A, lda, b, ldb, c, ldc, last, acc);
        break;
      case 3:
        mk_rows<3>(M, K, A, lda, b, ldb, c, ldc, last, acc);
        break;
      default:
        mk_rows<4>(M, K, A, lda, b, ldb, c, ldc, last, acc);
        break;
    }
  }
}

// dst[c][r] = src[r * lds + c] for r < rows, c < cols (dst row stride ldd).
void transpose(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t cols) {
  for (int64_t r0 = 0; r0 < rows; r0 += 16)
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t r = r0; r < std::min(rows, r0 + 16); ++r) dst[c * ldd + r] = src[r * lds + c];
}

}  // namespace

void attention_forward(float* out,
                       float* lse,
                       const float* q,
                       const float* k,
                       const float* v,
                       const AttnShape& s,
                       AttnMask mask) {
  const int64_t B = s.B, Sq = s.Sq, Sk = s.Sk, H = s.H, G = s.G, D = s.D, hpg = H / G;
  const int64_t qs = B * H * D, ks = B * G * D;  // row strides between sequence positions
  // K^T per (b, g): kt[b][g][D][Sk]
  std::vector<float> kt(size_t(B * G * D * Sk));
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t g = 0; g < G; ++g)
      transpose(kt.data() + (b * G + g) * D * Sk, Sk, k + b * G * D + g * D, ks, Sk, D);

  const int64_t nqb = (Sq + kBq - 1) / kBq;
  const __m512 vscale = _mm512_set1_ps(s.scale);
#pragma omp parallel
  {
    std::vector<float> Sbuf(size_t(kBq * kBk)), Obuf(size_t(kBq * D)),
        mbuf(static_cast<size_t>(kBq)), lbuf(static_cast<size_t>(kBq));
    float* S = Sbuf.data();
    float* O = Obuf.data();
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < B * H * nqb; ++task) {
      const int64_t b = task / (H * nqb), h = task / nqb % H, qb = task % nqb, g = h / hpg;
      const int64_t i0 = qb * kBq, nq = std::min(kBq, Sq - i0);
      const float* Q = q + (i0 * B + b) * H * D + h * D;
      const float* KT = kt.data() + (b * G + g) * D * Sk;
      const float* V = v + b * G * D + g * D;
      for (int64_t r = 0; r < nq; ++r) mbuf[size_t(r)] = kNegInf, lbuf[size_t(r)] = 0;
      std::fill(Obuf.begin(), Obuf.end(), 0.0f);
      // keys past kend are masked for every query of the block
      const int64_t kend = mask.causal ? std::clamp<int64_t>(i0 + nq + mask.offset, 0, Sk) : Sk;
      for (int64_t j0 = 0; j0 < kend; j0 += kBk) {
        const int64_t nk = std::min(kBk, kend - j0);
        mm(nq, nk, D, Q, qs, KT + j0, Sk, S, kBk, false);
        for (int64_t r = 0; r < nq; ++r) {
          float* srow = S + r * kBk;
          const int64_t lim =
              mask.causal ? std::clamp<int64_t>(i0 + r + mask.offset - j0 + 1, 0, nk) : nk;
          if (lim == 0) {
            for (int64_t c = 0; c < nk; ++c) srow[c] = 0;
            continue;
          }
          __m512 vmax = _mm512_set1_ps(kNegInf);
          for (int64_t c = 0; c < lim; c += kVec) {
            const __mmask16 m = tail_mask(lim - c);
            vmax =
                _mm512_mask_max_ps(vmax, m, vmax, _mm512_mul_ps(_mm512_loadu_ps(srow + c), vscale));
          }
          const float mold = mbuf[size_t(r)];
          const float mnew = std::max(mold, hmax(vmax));
          const float alpha = mold == kNegInf ? 0.0f : std::exp(mold - mnew);
          const __m512 vm = _mm512_set1_ps(mnew);
          __m512 sum = _mm512_setzero_ps();
          for (int64_t c = 0; c < nk; c += kVec) {
            const __mmask16 m = tail_mask(lim - c);  // zero past the visible columns
            const __m512 p = _mm512_maskz_mov_ps(
                m, exp_ps(_mm512_fmsub_ps(_mm512_loadu_ps(srow + c), vscale, vm)));
            sum = _mm512_add_ps(sum, p);
            _mm512_mask_storeu_ps(srow + c, tail_mask(nk - c), p);
          }
          lbuf[size_t(r)] = lbuf[size_t(r)] * alpha + hsum(sum);
          mbuf[size_t(r)] = mnew;
          if (alpha != 1.0f) {
            float* orow = O + r * D;
            for (int64_t d = 0; d < D; ++d) orow[d] *= alpha;
          }
        }
        mm(nq, D, nk, S, kBk, V + j0 * ks, ks, O, D, true);
      }
      for (int64_t r = 0; r < nq; ++r) {
        const float l = lbuf[size_t(r)];
        float* o = out + ((i0 + r) * B + b) * H * D + h * D;
        const float inv = l > 0 ? 1.0f / l : 0.0f;
        for (int64_t d = 0; d < D; ++d) o[d] = O[r * D + d] * inv;
        lse[(b * H + h) * Sq + i0 + r] = l > 0 ? mbuf[size_t(r)] + std::log(l) : kNegInf;
      }
    }
  }
}

void attention_backward(float* dq,
                        float* dk,
                        float* dv,
                        const float* dout,
                        const float* q,
                        const float* k,
                        const float* v,
                        const float* out,
                        const float* lse,
                        const AttnShape& s,
                        AttnMask mask) {
  const int64_t B = s.B, Sq = s.Sq, Sk = s.Sk, H = s.H, G = s.G, D = s.D, hpg = H / G;
  const int64_t qs = B * H * D, ks = B * G * D;
  const __m512 vscale = _mm512_set1_ps(s.scale);
#pragma omp parallel
  {
    std::vector<float> kt(size_t(D * Sk)), qt(size_t(D * Sq)), dot(size_t(D * Sq)),
        dqt(size_t(D * Sq)), delta(static_cast<size_t>(Sq)), lsev(static_cast<size_t>(Sq)),
        PT(size_t(kBk * kBq)), dST(size_t(kBk * kBq));
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < B * G; ++task) {
      const int64_t b = task / G, g = task % G;
      const float* K = k + b * G * D + g * D;
      const float* V = v + b * G * D + g * D;
      float* dK = dk + b * G * D + g * D;
      float* dV = dv + b * G * D + g * D;
      transpose(kt.data(), Sk, K, ks, Sk, D);
      for (int64_t h = g * hpg; h < (g + 1) * hpg; ++h) {
        const float* Q = q + b * H * D + h * D;
        const float* dO = dout + b * H * D + h * D;
        const float* O = out + b * H * D + h * D;
        transpose(qt.data(), Sq, Q, qs, Sq, D);
        transpose(dot.data(), Sq, dO, qs, Sq, D);
        std::fill(dqt.begin(), dqt.end(), 0.0f);
        for (int64_t i = 0; i < Sq; ++i) {
          float acc = 0;
          for (int64_t d = 0; d < D; ++d) acc += dO[i * qs + d] * O[i * qs + d];
          delta[size_t(i)] = acc;
          const float l = lse[(b * H + h) * Sq + i];
          // a fully masked row has lse = -inf; +inf makes exp(s - lse) = 0 there
          lsev[size_t(i)] = l == kNegInf ? std::numeric_limits<float>::infinity() : l;
        }
        for (int64_t j0 = 0; j0 < Sk; j0 += kBk) {
          const int64_t nk = std::min(kBk, Sk - j0);
          const int64_t istart = mask.causal ? std::max<int64_t>(0, j0 - mask.offset) : 0;
          for (int64_t i0 = istart; i0 < Sq; i0 += kBq) {
            const int64_t nq = std::min(kBq, Sq - i0);
            mm(nk, nq, D, K + j0 * ks, ks, qt.data() + i0, Sq, PT.data(), kBq, false);
            mm(nk, nq, D, V + j0 * ks, ks, dot.data() + i0, Sq, dST.data(), kBq, false);
            for (int64_t jj = 0; jj < nk; ++jj) {
              // queries i >= j - offset see key j
              const int64_t first =
                  mask.causal ? std::clamp<int64_t>(j0 + jj - mask.offset - i0, 0, nq) : 0;
              float* p = PT.data() + jj * kBq;
              float* ds = dST.data() + jj * kBq;
              for (int64_t c = 0; c < nq; c += kVec) {
                const __mmask16 m = tail_mask(nq - c);
                const __mmask16 vis = m & __mmask16(first <= c        ? 0xffff
                                                    : first - c >= 16 ? 0
                                                                      : (0xffff << (first - c)));
                const __m512 pv = _mm512_maskz_mov_ps(
                    vis, exp_ps(_mm512_fmsub_ps(_mm512_loadu_ps(p + c), vscale,
                                                _mm512_maskz_loadu_ps(m, lsev.data() + i0 + c))));
                const __m512 dsv = _mm512_mul_ps(
                    _mm512_mul_ps(pv,
                                  _mm512_sub_ps(_mm512_loadu_ps(ds + c),
                                                _mm512_maskz_loadu_ps(m, delta.data() + i0 + c))),
                    vscale);
                _mm512_mask_storeu_ps(p + c, m, pv);
                _mm512_mask_storeu_ps(ds + c, m, dsv);
              }
            }
            mm(nk, D, nq, PT.data(), kBq, dO + i0 * qs, qs, dV + j0 * ks, ks, true);
            mm(nk, D, nq, dST.data(), kBq, Q + i0 * qs, qs, dK + j0 * ks, ks, true);
            mm(D, nq, nk, kt.data() + j0, Sk, dST.data(), kBq, dqt.data() + i0, Sq, true);
          }
        }
        float* dQ = dq + b * H * D + h * D;
        for (int64_t i = 0; i < Sq; ++i)
          for (int64_t d = 0; d < D; ++d) dQ[i * qs + d] += dqt[size_t(d * Sq + i)];
      }
    }
  }
}

}  // namespace mtron::kernels::cpu
