// CPU flash-style attention (attention.h): tiled, online softmax, forward saves lse, backward
// recomputes the probabilities from lse.
//
// Every product is a small row-major "C (+)= A B" done by one AVX-512 register-blocked
// micro-kernel (6 rows x up to 64 columns of accumulators). Operands are first packed out of
// their sequence-major strides (which are multiples of 4 KB for usual shapes and would alias in
// L1) into contiguous [rows][D] copies or blocked transposes [block][D][64]: K and V once per
// call (forward) or per (b, group) task (backward), Q and dO once per head, never per tile.
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
  // The unroll pragmas make GCC unroll before scalar replacement, so c[][] lives in registers
  // (without them GCC 12 spills and reloads all 24 accumulators every k).
  __m512 c[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      c[r][v] = acc ? _mm512_maskz_loadu_ps(v == NV - 1 ? last : 0xffff, C + r * ldc + v * kVec)
                    : _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    __m512 b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      b[v] = _mm512_maskz_loadu_ps(v == NV - 1 ? last : 0xffff, B + k * ldb + v * kVec);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(A[r * lda + k]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) c[r][v] = _mm512_fmadd_ps(a, b[v], c[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
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

// Rows of a sequence-major tensor are a few KB apart (B H D floats), so consecutive rows sit in
// different pages, where hardware prefetchers stop: row walks prefetch kAhead rows ahead.
constexpr int64_t kAhead = 8;

void prefetch_row(const float* p, int64_t n) {
  for (int64_t i = 0; i < n; i += kVec)
    _mm_prefetch(reinterpret_cast<const char*>(p + i), _MM_HINT_T0);
}

// dst[r][d] = src[r * lds + d]: rows gathered from their sequence-major stride into [rows][D].
void pack_rows(float* dst, const float* src, int64_t lds, int64_t rows, int64_t D) {
  for (int64_t r = 0; r < rows; ++r) {
    if (r + kAhead < rows) prefetch_row(src + (r + kAhead) * lds, D);
    std::copy(src + r * lds, src + r * lds + D, dst + r * D);
  }
}

// dst[r * ldd + d] += src[r][d] (the inverse walk of pack_rows, accumulating).
void add_rows(float* dst, int64_t ldd, const float* src, int64_t rows, int64_t D) {
  for (int64_t r = 0; r < rows; ++r) {
    if (r + kAhead < rows) prefetch_row(dst + (r + kAhead) * ldd, D);
    float* o = dst + r * ldd;
    for (int64_t d = 0; d < D; d += kVec) {
      const __mmask16 m = tail_mask(D - d);
      _mm512_mask_storeu_ps(o + d, m,
                            _mm512_add_ps(_mm512_maskz_loadu_ps(m, o + d),
                                          _mm512_maskz_loadu_ps(m, src + r * D + d)));
    }
  }
}

// dst[c][r] = src[r][c] for a 16 x 16 tile, in registers (three rounds of shuffles).
void transpose16(float* dst, int64_t ldd, const float* src, int64_t lds) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * lds);
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  // r[4i + j]: columns {j, j+4, j+8, j+12} of rows 4i..4i+3, one 128-bit lane each
  for (int j = 0; j < 4; ++j) {
    t[j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
    t[4 + j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xdd);
    t[8 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
    t[12 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xdd);
  }
  for (int j = 0; j < 8; ++j) {
    const int64_t c = (j & 3) + (j >> 2) * 4;
    _mm512_storeu_ps(dst + c * ldd, _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88));
    _mm512_storeu_ps(dst + (c + 8) * ldd, _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd));
  }
}

// dst[c][r] = src[r * lds + c] for r < rows, c < cols (dst row stride ldd).
void transpose(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t cols) {
  int64_t r0 = 0;
  for (; r0 + 16 <= rows; r0 += 16) {
    for (int64_t r = r0 + 16; r < std::min(rows, r0 + 32); ++r) prefetch_row(src + r * lds, cols);
    int64_t c0 = 0;
    for (; c0 + 16 <= cols; c0 += 16)
      transpose16(dst + c0 * ldd + r0, ldd, src + r0 * lds + c0, lds);
    for (int64_t c = c0; c < cols; ++c)
      for (int64_t r = r0; r < r0 + 16; ++r) dst[c * ldd + r] = src[r * lds + c];
  }
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = r0; r < rows; ++r) dst[c * ldd + r] = src[r * lds + c];
}

// Blocked transpose: dst[blk][d][rr] = src[(blk * 64 + rr) * lds + d], zero past `rows`.
// Each block is a contiguous D x 64 tile, so the micro-kernel reads it with a 256-byte row
// stride (a plain [D][rows] transpose has a 4 KB stride that aliases in L1).
void pack_t_blocks(float* dst, const float* src, int64_t lds, int64_t rows, int64_t D) {
  const int64_t nblk = (rows + kBk - 1) / kBk;
  for (int64_t blk = 0; blk < nblk; ++blk) {
    float* t = dst + blk * D * kBk;
    const int64_t r0 = blk * kBk, nr = std::min(kBk, rows - r0);
    transpose(t, kBk, src + r0 * lds, lds, nr, D);
    for (int64_t d = 0; d < D; ++d)
      for (int64_t rr = nr; rr < kBk; ++rr) t[d * kBk + rr] = 0;
  }
}

// A grow-only per-thread buffer: kernels called every step reuse their memory instead of
// paying page faults on fresh allocations.
float* scratch(std::vector<float>& buf, int64_t n) {
  if (buf.size() < size_t(n)) buf.resize(size_t(n));
  return buf.data();
}

// Threads for `tasks` independent tasks of `flops` in all: no more threads than tasks, and one
// per ~4 MFLOP at least, so tiny calls do not pay for waking the team.
int attn_threads(int64_t tasks, double flops) {
  const int64_t by_work = std::max<int64_t>(1, int64_t(flops / 4e6));
  return int(std::max<int64_t>(1, std::min({tasks, by_work, int64_t(omp_get_max_threads())})));
}

static_assert(kBq == kBk, "the blocked transposes serve both query and key blocks");

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
  const int64_t nkb = (Sk + kBk - 1) / kBk;
  // Per (b, g): K^T in blocks [nkb][D][kBk] and V as [Sk][D].
  thread_local std::vector<float> buf;
  float* ktp = scratch(buf, B * G * (nkb * D * kBk + Sk * D));
  float* vp = ktp + B * G * nkb * D * kBk;
  const double flops = 4.0 * double(B * H * D) * double(Sq) * double(Sk);
#pragma omp parallel for schedule(static) num_threads(attn_threads(B* G, flops))
  for (int64_t bg = 0; bg < B * G; ++bg) {
    const int64_t off = (bg / G) * G * D + (bg % G) * D;
    pack_t_blocks(ktp + bg * nkb * D * kBk, k + off, ks, Sk, D);
    pack_rows(vp + bg * Sk * D, v + off, ks, Sk, D);
  }

  const int64_t nqb = (Sq + kBq - 1) / kBq;
  const __m512 vscale = _mm512_set1_ps(s.scale);
#pragma omp parallel num_threads(attn_threads(B* H* nqb, flops))
  {
    std::vector<float> Qbuf(size_t(kBq * D)), Sbuf(size_t(kBq * kBk)), Obuf(size_t(kBq * D)),
        mbuf(static_cast<size_t>(kBq)), lbuf(static_cast<size_t>(kBq));
    float* S = Sbuf.data();
    float* O = Obuf.data();
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < B * H * nqb; ++task) {
      const int64_t b = task / (H * nqb), h = task / nqb % H, qb = task % nqb, g = h / hpg;
      const int64_t i0 = qb * kBq, nq = std::min(kBq, Sq - i0);
      pack_rows(Qbuf.data(), q + (i0 * B + b) * H * D + h * D, qs, nq, D);
      const float* KT = ktp + (b * G + g) * nkb * D * kBk;
      const float* V = vp + (b * G + g) * Sk * D;
      for (int64_t r = 0; r < nq; ++r) mbuf[size_t(r)] = kNegInf, lbuf[size_t(r)] = 0;
      std::fill(Obuf.begin(), Obuf.end(), 0.0f);
      // keys past kend are masked for every query of the block
      const int64_t kend = mask.causal ? std::clamp<int64_t>(i0 + nq + mask.offset, 0, Sk) : Sk;
      for (int64_t j0 = 0; j0 < kend; j0 += kBk) {
        const int64_t nk = std::min(kBk, kend - j0);
        mm(nq, nk, D, Qbuf.data(), D, KT + (j0 / kBk) * D * kBk, kBk, S, kBk, false);
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
        mm(nq, D, nk, S, kBk, V + j0 * D, D, O, D, true);
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

namespace {

// Per-thread working memory of the backward: the packed K of one (b, g) and the packed Q, dO of
// one head, the dQ^T accumulator, Delta, lse and two score tiles.
struct BwdWork {
  float *ktp, *kc, *vc, *qtp, *dotp, *dqtp, *qc, *doc, *delta, *lsev, *PT, *dST;
};

BwdWork bwd_work(std::vector<float>& buf, int64_t Sq, int64_t Sk, int64_t D) {
  const int64_t nkt = (Sk + kBk - 1) / kBk * D * kBk, nqt = (Sq + kBq - 1) / kBq * D * kBq;
  BwdWork w;
  w.ktp = scratch(buf, nkt + 2 * Sk * D + 3 * nqt + 2 * Sq * D + 2 * Sq + 2 * kBk * kBq);
  w.kc = w.ktp + nkt;
  w.vc = w.kc + Sk * D;
  w.qtp = w.vc + Sk * D;
  w.dotp = w.qtp + nqt;
  w.dqtp = w.dotp + nqt;
  w.qc = w.dqtp + nqt;
  w.doc = w.qc + Sq * D;
  w.delta = w.doc + Sq * D;
  w.lsev = w.delta + Sq;
  w.PT = w.lsev + Sq;
  w.dST = w.PT + kBk * kBq;
  return w;
}

// Packs K and V of (b, g) into w.
void pack_kv(BwdWork& w, const float* k, const float* v, const AttnShape& s, int64_t b, int64_t g) {
  const int64_t koff = (b * s.G + g) * s.D, ks = s.B * s.G * s.D;
  pack_t_blocks(w.ktp, k + koff, ks, s.Sk, s.D);
  pack_rows(w.kc, k + koff, ks, s.Sk, s.D);
  pack_rows(w.vc, v + koff, ks, s.Sk, s.D);
}

// The backward of head h of batch b, whose K and V are packed in w: adds into dq (in place) and
// into dkc, dvc ([Sk][D], the head's group).
void backward_head(BwdWork& w,
                   float* dkc,
                   float* dvc,
                   float* dq,
                   const float* dout,
                   const float* q,
                   const float* out,
                   const float* lse,
                   const AttnShape& s,
                   AttnMask mask,
                   int64_t b,
                   int64_t h) {
  const int64_t Sq = s.Sq, Sk = s.Sk, H = s.H, D = s.D, qs = s.B * H * D;
  const int64_t nkb = (Sk + kBk - 1) / kBk, nqb = (Sq + kBq - 1) / kBq, nqt = nqb * D * kBq;
  const __m512 vscale = _mm512_set1_ps(s.scale);
  float *ktp = w.ktp, *kc = w.kc, *vc = w.vc, *qtp = w.qtp, *dotp = w.dotp, *dqtp = w.dqtp;
  float *qc = w.qc, *doc = w.doc, *delta = w.delta, *lsev = w.lsev, *PT = w.PT, *dST = w.dST;
  const int64_t qoff = b * H * D + h * D;
  pack_rows(qc, q + qoff, qs, Sq, D);
  pack_rows(doc, dout + qoff, qs, Sq, D);
  pack_t_blocks(qtp, q + qoff, qs, Sq, D);
  pack_t_blocks(dotp, dout + qoff, qs, Sq, D);
  std::fill(dqtp, dqtp + nqt, 0.0f);
  for (int64_t i = 0; i < Sq; ++i) {
    if (i + kAhead < Sq) prefetch_row(out + qoff + (i + kAhead) * qs, D);
    const float* o = out + qoff + i * qs;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t d = 0; d < D; d += kVec) {
      const __mmask16 m = tail_mask(D - d);
      acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, doc + i * D + d),
                            _mm512_maskz_loadu_ps(m, o + d), acc);
    }
    delta[i] = hsum(acc);
    const float l = lse[(b * H + h) * Sq + i];
    // a fully masked row has lse = -inf; +inf makes exp(s - lse) = 0 there
    lsev[i] = l == kNegInf ? std::numeric_limits<float>::infinity() : l;
  }
  for (int64_t jb = 0; jb < nkb; ++jb) {
    const int64_t j0 = jb * kBk, nk = std::min(kBk, Sk - j0);
    // the first query block with a query that sees key j0
    const int64_t ib0 = mask.causal ? std::max<int64_t>(0, j0 - mask.offset) / kBq : 0;
    for (int64_t ib = ib0; ib < nqb; ++ib) {
      const int64_t i0 = ib * kBq, nq = std::min(kBq, Sq - i0);
      mm(nk, nq, D, kc + j0 * D, D, qtp + ib * D * kBq, kBq, PT, kBq, false);
      mm(nk, nq, D, vc + j0 * D, D, dotp + ib * D * kBq, kBq, dST, kBq, false);
      for (int64_t jj = 0; jj < nk; ++jj) {
        // queries i >= j - offset see key j
        const int64_t first =
            mask.causal ? std::clamp<int64_t>(j0 + jj - mask.offset - i0, 0, nq) : 0;
        float* p = PT + jj * kBq;
        float* ds = dST + jj * kBq;
        for (int64_t c = 0; c < nq; c += kVec) {
          const __mmask16 m = tail_mask(nq - c);
          const __mmask16 vis = m & ~tail_mask(first - c);
          const __m512 pv = _mm512_maskz_mov_ps(
              vis, exp_ps(_mm512_fmsub_ps(_mm512_loadu_ps(p + c), vscale,
                                          _mm512_maskz_loadu_ps(m, lsev + i0 + c))));
          const __m512 dsv = _mm512_mul_ps(
              _mm512_mul_ps(pv, _mm512_sub_ps(_mm512_loadu_ps(ds + c),
                                              _mm512_maskz_loadu_ps(m, delta + i0 + c))),
              vscale);
          _mm512_mask_storeu_ps(p + c, m, pv);
          _mm512_mask_storeu_ps(ds + c, m, dsv);
        }
      }
      mm(nk, D, nq, PT, kBq, doc + i0 * D, D, dvc + j0 * D, D, true);
      mm(nk, D, nq, dST, kBq, qc + i0 * D, D, dkc + j0 * D, D, true);
      mm(D, nq, nk, ktp + jb * D * kBk, kBk, dST, kBq, dqtp + ib * D * kBq, kBq, true);
    }
  }
  // dQ^T blocks back to rows (qc is free again), then into dq
  for (int64_t ib = 0; ib < nqb; ++ib)
    transpose(qc + ib * kBq * D, D, dqtp + ib * D * kBq, kBq, D, std::min(kBq, Sq - ib * kBq));
  add_rows(dq + qoff, qs, qc, Sq, D);
}

}  // namespace

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
  const int64_t B = s.B, Sk = s.Sk, H = s.H, G = s.G, D = s.D, hpg = H / G;
  const int64_t ks = B * G * D, kv_size = B * G * Sk * D;
  const int nt = attn_threads(B * H, 10.0 * double(B * H * D) * double(s.Sq) * double(Sk));
  if (B * G >= nt) {
    // One task per (b, g): the task owns dK, dV of its group, so no thread shares a gradient.
#pragma omp parallel num_threads(nt)
    {
      thread_local std::vector<float> buf, acc;
      BwdWork w = bwd_work(buf, s.Sq, Sk, D);
      float* dkc = scratch(acc, 2 * Sk * D);
      float* dvc = dkc + Sk * D;
#pragma omp for schedule(dynamic)
      for (int64_t task = 0; task < B * G; ++task) {
        const int64_t b = task / G, g = task % G, koff = (b * G + g) * D;
        pack_kv(w, k, v, s, b, g);
        std::fill(dkc, dkc + 2 * Sk * D, 0.0f);
        for (int64_t h = g * hpg; h < (g + 1) * hpg; ++h)
          backward_head(w, dkc, dvc, dq, dout, q, out, lse, s, mask, b, h);
        add_rows(dk + koff, ks, dkc, Sk, D);
        add_rows(dv + koff, ks, dvc, Sk, D);
      }
    }
    return;
  }
  // Fewer (b, g) than threads (GQA/MQA at small batch): one task per (b, h), statically split,
  // each thread adding dK, dV into its own copy; the copies are summed in thread order, so the
  // result is deterministic for a given thread count.
  thread_local std::vector<float> priv_buf;
  float* priv = scratch(priv_buf, int64_t(nt) * 2 * kv_size);
#pragma omp parallel num_threads(nt)
  {
    thread_local std::vector<float> buf;
    BwdWork w = bwd_work(buf, s.Sq, Sk, D);
    float* pdk = priv + int64_t(omp_get_thread_num()) * 2 * kv_size;
    float* pdv = pdk + kv_size;
    std::fill(pdk, pdk + 2 * kv_size, 0.0f);
    int64_t packed = -1;  // the (b, g) whose K, V are in w
#pragma omp for schedule(static)
    for (int64_t task = 0; task < B * H; ++task) {
      const int64_t b = task / H, h = task % H, bg = b * G + h / hpg;
      if (bg != packed) pack_kv(w, k, v, s, b, h / hpg), packed = bg;
      backward_head(w, pdk + bg * Sk * D, pdv + bg * Sk * D, dq, dout, q, out, lse, s, mask, b, h);
    }
    // implicit barrier: every copy is complete
#pragma omp for schedule(static)
    for (int64_t row = 0; row < B * G * Sk; ++row) {
      const int64_t bg = row / Sk, j = row % Sk;
      float* dkr = dk + j * ks + bg * D;
      float* dvr = dv + j * ks + bg * D;
      for (int t = 0; t < nt; ++t) {
        const float* pk = priv + int64_t(t) * 2 * kv_size + (bg * Sk + j) * D;
        for (int64_t d = 0; d < D; ++d) dkr[d] += pk[d], dvr[d] += pk[kv_size + d];
      }
    }
  }
}

}  // namespace mtron::kernels::cpu
