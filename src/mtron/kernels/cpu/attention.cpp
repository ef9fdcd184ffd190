// CPU flash-style attention (attention.h): tiled, online softmax, forward saves lse, backward
// recomputes the probabilities from lse.
//
// Every product is a small row-major "C (+)= A B" done by one register-blocked micro-kernel
// (6 rows x up to kMaxNV vectors of accumulators, as many as the target's registers hold).
// Operands are first packed out of their sequence-major strides (which are multiples of 4 KB for
// usual shapes and would alias in L1) into contiguous copies: rows [rows][Dp] (Dp = D rounded up
// to whole vectors, zero-padded) or blocked transposes [block][D][64] (zero past the last row), K
// and V once per call (forward) or per (b, group) task (backward), Q and dO once per head, never
// per tile. With every packed row a whole number of vectors and every score tile 64 columns
// wide, the micro-kernel never needs a partial vector.
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
// transposes and vectorises the softmax over queries. Q, K, dQ, dK are packed at the query/key
// head dim D (Dp), V, O, dO, dV at the value head dim Dv (Dvp).
// Dropout (attention.h): the forward multiplies each row of P by its mask after the online
// softmax update (m and l stay undropped); the backward turns P^T into (P z)^T for dV and dP^T
// into (dP z)^T before dS^T.
// Merge (attention_merge): one task per (b, h), the rows of merge_weights.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "mtron/kernels/cpu/attention.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// clang-format off
#include <hwy/highway.h>
#include <hwy/cache_control.h>
#include "mtron/kernels/cpu/simd-inl.h"
// clang-format on

#include <atomic>

#include <cmath>
#include <limits>
#include <vector>

#include "mtron/kernels/cpu/cpu_ops.h"

HWY_BEFORE_NAMESPACE();
namespace mtron::kernels::cpu::HWY_NAMESPACE {
namespace {

constexpr int64_t kBq = 64, kBk = 64;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Accumulator vectors per row of the micro-kernel: 6 rows x kMaxNV accumulators, kMaxNV B
// vectors and one broadcast A must fit the target's vector registers (32 or 16).
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_NEON
constexpr int kMaxNV = 4;
#else
constexpr int kMaxNV = 2;
#endif

// D rounded up to whole vectors: the row stride of packed [rows][Dp] operands.
int64_t padded(DF d, int64_t D) {
  const int64_t L = int64_t(hn::Lanes(d));
  return (D + L - 1) / L * L;
}

// C[R, NV*L] (= or +=) A[R, K] B[K, NV*L].
template <int R, int NV>
HWY_INLINE void mk(DF d,
                   int64_t K,
                   const float* HWY_RESTRICT A,
                   int64_t lda,
                   const float* HWY_RESTRICT B,
                   int64_t ldb,
                   float* HWY_RESTRICT C,
                   int64_t ldc,
                   bool acc) {
  const size_t L = hn::Lanes(d);
  // The unroll pragmas make GCC unroll before scalar replacement, so c[][] lives in registers
  // (without them GCC 12 spills and reloads the accumulators every k).
  VF c[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) c[r][v] = acc ? hn::LoadU(d, C + r * ldc + v * L) : hn::Zero(d);
  for (int64_t k = 0; k < K; ++k) {
    VF b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) b[v] = hn::LoadU(d, B + k * ldb + v * L);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const VF a = hn::Set(d, A[r * lda + k]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) c[r][v] = hn::MulAdd(a, b[v], c[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) hn::StoreU(c[r][v], d, C + r * ldc + v * L);
}

template <int NV>
void mk_rows(DF d,
             int64_t M,
             int64_t K,
             const float* A,
             int64_t lda,
             const float* B,
             int64_t ldb,
             float* C,
             int64_t ldc,
             bool acc) {
  int64_t m = 0;
  for (; m + 6 <= M; m += 6) mk<6, NV>(d, K, A + m * lda, lda, B, ldb, C + m * ldc, ldc, acc);
  const float* a = A + m * lda;
  float* c = C + m * ldc;
  switch (M - m) {
    case 5:
      return mk<5, NV>(d, K, a, lda, B, ldb, c, ldc, acc);
    case 4:
      return mk<4, NV>(d, K, a, lda, B, ldb, c, ldc, acc);
    case 3:
      return mk<3, NV>(d, K, a, lda, B, ldb, c, ldc, acc);
    case 2:
      return mk<2, NV>(d, K, a, lda, B, ldb, c, ldc, acc);
    case 1:
      return mk<1, NV>(d, K, a, lda, B, ldb, c, ldc, acc);
    default:
      return;
  }
}

// C[M, N'] (= or +=) A[M, K] B[K, N'], all row-major with row strides, for N' = N rounded up
// to whole vectors: B's rows and C's rows must have room (and, for B, harmless values) there.
void mm(DF d,
        int64_t M,
        int64_t N,
        int64_t K,
        const float* A,
        int64_t lda,
        const float* B,
        int64_t ldb,
        float* C,
        int64_t ldc,
        bool acc) {
  const int64_t L = int64_t(hn::Lanes(d)), nvec = (N + L - 1) / L;
  for (int64_t v0 = 0; v0 < nvec; v0 += kMaxNV) {
    const float* b = B + v0 * L;
    float* c = C + v0 * L;
    switch (std::min<int64_t>(kMaxNV, nvec - v0)) {
      case 1:
        mk_rows<1>(d, M, K, A, lda, b, ldb, c, ldc, acc);
        break;
      case 2:
        mk_rows<2>(d, M, K, A, lda, b, ldb, c, ldc, acc);
        break;
      case 3:
        if constexpr (kMaxNV >= 3) mk_rows<3>(d, M, K, A, lda, b, ldb, c, ldc, acc);
        break;
      default:
        mk_rows<kMaxNV>(d, M, K, A, lda, b, ldb, c, ldc, acc);
        break;
    }
  }
}

// Rows of a sequence-major tensor are a few KB apart (B H D floats), so consecutive rows sit in
// different pages, where hardware prefetchers stop: row walks prefetch kAhead rows ahead.
constexpr int64_t kAhead = 8;

void prefetch_row(const float* p, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) hwy::Prefetch(p + i);
}

// dst[r][0, Dp) = src[r * lds + d] for d < D, zero past D: rows gathered from their
// sequence-major stride into [rows][Dp].
void pack_rows(DF d, float* dst, const float* src, int64_t lds, int64_t rows, int64_t D) {
  const int64_t Dp = padded(d, D);
  for (int64_t r = 0; r < rows; ++r) {
    if (r + kAhead < rows) prefetch_row(src + (r + kAhead) * lds, D);
    std::copy(src + r * lds, src + r * lds + D, dst + r * Dp);
    std::fill(dst + r * Dp + D, dst + (r + 1) * Dp, 0.0f);
  }
}

// dst[r * ldd + d] += src[r][d] for d < D (the inverse walk of pack_rows, accumulating).
void add_rows(DF d, float* dst, int64_t ldd, const float* src, int64_t rows, int64_t D) {
  const int64_t Dp = padded(d, D);
  for (int64_t r = 0; r < rows; ++r) {
    if (r + kAhead < rows) prefetch_row(dst + (r + kAhead) * ldd, D);
    add_into(d, dst + r * ldd, src + r * Dp, D);
  }
}

// dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols, in 8 x 8 tiles.
void transpose(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t cols) {
  constexpr int64_t kT = 8;
  for (int64_t r0 = 0; r0 < rows; r0 += kT) {
    for (int64_t r = r0 + kT; r < std::min(rows, r0 + 2 * kT); ++r)
      prefetch_row(src + r * lds, cols);
    const int64_t r1 = std::min(rows, r0 + kT);
    for (int64_t c0 = 0; c0 < cols; c0 += kT) {
      const int64_t c1 = std::min(cols, c0 + kT);
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t r = r0; r < r1; ++r) dst[c * ldd + r] = src[r * lds + c];
    }
  }
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
    for (int64_t dd = 0; dd < D; ++dd)
      for (int64_t rr = nr; rr < kBk; ++rr) t[dd * kBk + rr] = 0;
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
  return int(std::max<int64_t>(1, std::min({tasks, by_work, int64_t(max_threads())})));
}

static_assert(kBq == kBk, "the blocked transposes serve both query and key blocks");

// One row of the forward's score tile S (nk columns, `lim` of them visible): the online-softmax
// update of (m, l) and O's row, leaving P = exp(scale s - m) in the row (0 past `lim`).
void softmax_row(DF d,
                 float* srow,
                 int64_t nk,
                 int64_t lim,
                 float scale,
                 float& m,
                 float& l,
                 float* orow,
                 int64_t Dp) {
  if (lim == 0) {
    std::fill(srow, srow + nk, 0.0f);
    return;
  }
  const VF vscale = hn::Set(d, scale);
  VF vmax = hn::Set(d, kNegInf);
  for_lanes(d, 0, lim, [&](int64_t c, size_t k) {
    vmax = hn::Max(vmax, hn::Mul(load(d, srow + c, k, kNegInf), vscale));
  });
  const float mold = m;
  const float mnew = std::max(mold, hmax(d, vmax));
  const float alpha = mold == kNegInf ? 0.0f : std::exp(mold - mnew);
  const VF vm = hn::Set(d, mnew);
  VF sum = hn::Zero(d);
  for_lanes(d, 0, lim, [&](int64_t c, size_t k) {
    const VF p = exp(d, hn::MulSub(load(d, srow + c, k), vscale, vm));
    // the lanes past k of a partial vector are not scores: keep them out of the sum
    const VF pk = k == hn::Lanes(d) ? p : hn::IfThenElseZero(hn::FirstN(d, k), p);
    sum = hn::Add(sum, pk);
    store(d, pk, srow + c, k);
  });
  std::fill(srow + lim, srow + nk, 0.0f);
  l = l * alpha + hsum(d, sum);
  m = mnew;
  if (alpha != 1.0f)
    for (int64_t dd = 0; dd < Dp; ++dd) orow[dd] *= alpha;
}

}  // namespace

void attention_forward(float* out,
                       float* lse,
                       const float* q,
                       const float* k,
                       const float* v,
                       const AttnShape& s,
                       AttnMask mask) {
  const DF d;
  const int64_t B = s.B, Sq = s.Sq, Sk = s.Sk, H = s.H, G = s.G, D = s.D, Dv = s.Dv, hpg = H / G;
  const int64_t Dvp = padded(d, Dv), Dp = padded(d, D);
  // row strides between sequence positions
  const int64_t qs = s.q_step(), ks = s.kv_step(D), vs = s.kv_step(Dv), os = B * H * Dv;
  const int64_t nkb = (Sk + kBk - 1) / kBk;
  // Per (b, g): K^T in blocks [nkb][D][kBk] and V as [Sk][Dvp].
  thread_local std::vector<float> buf;
  float* ktp = scratch(buf, B * G * (nkb * D * kBk + Sk * Dvp));
  float* vp = ktp + B * G * nkb * D * kBk;
  const double flops = 2.0 * double(B * H * (D + Dv)) * double(Sq) * double(Sk);
  parallel_rows(B * G, attn_threads(B * G, flops), [&](int64_t bg) {
    pack_t_blocks(ktp + bg * nkb * D * kBk, k + s.kv_off(bg / G, bg % G, D), ks, Sk, D);
    pack_rows(d, vp + bg * Sk * Dvp, v + s.kv_off(bg / G, bg % G, Dv), vs, Sk, Dv);
  });

  const int64_t nqb = (Sq + kBq - 1) / kBq;
  std::atomic<int64_t> next_task{0};  // tasks are taken dynamically: causal blocks differ in work
  parallel_run(attn_threads(B * H * nqb, flops), [&](int, int) {
    std::vector<float> Qbuf(size_t(kBq * Dp)), Sbuf(size_t(kBq * kBk)), Obuf(size_t(kBq * Dvp)),
        mbuf(static_cast<size_t>(kBq)), lbuf(static_cast<size_t>(kBq)),
        zbuf(static_cast<size_t>(kBk));
    const AttnDropout& drop = mask.dropout;
    float* S = Sbuf.data();
    float* O = Obuf.data();
    for (int64_t task; (task = next_task++) < B * H * nqb;) {
      const int64_t b = task / (H * nqb), h = task / nqb % H, qb = task % nqb, g = h / hpg;
      const int64_t i0 = qb * kBq, nq = std::min(kBq, Sq - i0);
      pack_rows(d, Qbuf.data(), q + s.q_off(b, h) + i0 * qs, qs, nq, D);
      const float* KT = ktp + (b * G + g) * nkb * D * kBk;
      const float* V = vp + (b * G + g) * Sk * Dvp;
      for (int64_t r = 0; r < nq; ++r) mbuf[size_t(r)] = kNegInf, lbuf[size_t(r)] = 0;
      std::fill(Obuf.begin(), Obuf.end(), 0.0f);
      // keys past kend are masked for every query of the block
      const int64_t kend = mask.causal ? std::clamp<int64_t>(i0 + nq + mask.offset, 0, Sk) : Sk;
      for (int64_t j0 = 0; j0 < kend; j0 += kBk) {
        const int64_t nk = std::min(kBk, kend - j0);
        mm(d, nq, nk, D, Qbuf.data(), Dp, KT + (j0 / kBk) * D * kBk, kBk, S, kBk, false);
        for (int64_t r = 0; r < nq; ++r) {
          const int64_t lim =
              mask.causal ? std::clamp<int64_t>(i0 + r + mask.offset - j0 + 1, 0, nk) : nk;
          softmax_row(d, S + r * kBk, nk, lim, s.scale, mbuf[size_t(r)], lbuf[size_t(r)],
                      O + r * Dvp, Dvp);
          if (drop.p > 0 && lim > 0) {
            dropout_scales(zbuf.data(), drop.key, drop.row_index(b, h, i0 + r) + uint64_t(j0), 1,
                           lim, drop.p);
            for (int64_t c = 0; c < lim; ++c) S[r * kBk + c] *= zbuf[size_t(c)];
          }
        }
        mm(d, nq, Dvp, nk, S, kBk, V + j0 * Dvp, Dvp, O, Dvp, true);
      }
      for (int64_t r = 0; r < nq; ++r) {
        const float l = lbuf[size_t(r)];
        float* o = out + (i0 + r) * os + (b * H + h) * Dv;
        const float inv = l > 0 ? 1.0f / l : 0.0f;
        for (int64_t dd = 0; dd < Dv; ++dd) o[dd] = O[r * Dvp + dd] * inv;
        lse[(b * H + h) * Sq + i0 + r] = l > 0 ? mbuf[size_t(r)] + std::log(l) : kNegInf;
      }
    }
  });
}

namespace {

// Per-thread working memory of the backward: the packed K, V of one (b, g) and the packed Q, dO
// of one head, the dQ^T accumulator, Delta, lse, two score tiles and a row of dropout
// multipliers.
struct BwdWork {
  float *ktp, *kc, *vc, *qtp, *dotp, *dqtp, *qc, *doc, *delta, *lsev, *PT, *dST, *z;
};

BwdWork bwd_work(DF d, std::vector<float>& buf, const AttnShape& s) {
  const int64_t Sq = s.Sq, Sk = s.Sk, Dp = padded(d, s.D), Dvp = padded(d, s.Dv);
  const int64_t nkt = (Sk + kBk - 1) / kBk * s.D * kBk, nqt = (Sq + kBq - 1) / kBq * s.D * kBq;
  const int64_t nvt = (Sq + kBq - 1) / kBq * s.Dv * kBq;
  BwdWork w;
  w.ktp = scratch(
      buf, nkt + Sk * (Dp + Dvp) + 2 * nqt + nvt + Sq * (Dp + Dvp) + 2 * Sq + 2 * kBk * kBq + kBq);
  w.kc = w.ktp + nkt;
  w.vc = w.kc + Sk * Dp;
  w.qtp = w.vc + Sk * Dvp;
  w.dotp = w.qtp + nqt;
  w.dqtp = w.dotp + nvt;
  w.qc = w.dqtp + nqt;
  w.doc = w.qc + Sq * Dp;
  w.delta = w.doc + Sq * Dvp;
  w.lsev = w.delta + Sq;
  w.PT = w.lsev + Sq;
  w.dST = w.PT + kBk * kBq;
  w.z = w.dST + kBk * kBq;
  return w;
}

// Packs K and V of (b, g) into w.
void pack_kv(
    DF d, BwdWork& w, const float* k, const float* v, const AttnShape& s, int64_t b, int64_t g) {
  const int64_t ks = s.kv_step(s.D), ko = s.kv_off(b, g, s.D);
  pack_t_blocks(w.ktp, k + ko, ks, s.Sk, s.D);
  pack_rows(d, w.kc, k + ko, ks, s.Sk, s.D);
  pack_rows(d, w.vc, v + s.kv_off(b, g, s.Dv), s.kv_step(s.Dv), s.Sk, s.Dv);
}

// P^T and dS^T of one key row jj of the (key block, query block) tile, over nq queries of which
// those from `first` on see the key. With dropout multipliers z (else null) of the row, p
// becomes (P z)^T and the dP^T in ds is first multiplied by z.
void score_grads_row(DF d,
                     float* p,
                     float* ds,
                     const float* lsev,
                     const float* delta,
                     const float* z,
                     int64_t nq,
                     int64_t first,
                     float scale) {
  const VF vscale = hn::Set(d, scale), vfirst = hn::Set(d, float(first));
  for_lanes(d, 0, nq, [&](int64_t c, size_t k) {
    // query c + i sees the key iff c + i >= first (exact in float: both are < 2^24)
    const auto vis = hn::Ge(hn::Iota(d, float(c)), vfirst);
    const VF pv = hn::IfThenElseZero(
        vis, exp(d, hn::MulSub(load(d, p + c, k), vscale, load(d, lsev + c, k))));
    if (z) {
      const VF zv = load(d, z + c, k);
      const VF dp = hn::Mul(load(d, ds + c, k), zv);
      store(d, hn::Mul(pv, zv), p + c, k);
      store(d, hn::Mul(hn::Mul(pv, hn::Sub(dp, load(d, delta + c, k))), vscale), ds + c, k);
      return;
    }
    const VF dsv = hn::Mul(hn::Mul(pv, hn::Sub(load(d, ds + c, k), load(d, delta + c, k))), vscale);
    store(d, pv, p + c, k);
    store(d, dsv, ds + c, k);
  });
}

// The backward of head h of batch b, whose K and V are packed in w: adds into dq (in place) and
// into dkc ([Sk][Dp]), dvc ([Sk][Dvp]) of the head's group.
void backward_head(DF d,
                   BwdWork& w,
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
  const int64_t Sq = s.Sq, Sk = s.Sk, H = s.H, D = s.D, Dv = s.Dv, qs = s.q_step();
  const int64_t os = s.B * H * Dv, Dp = padded(d, D), Dvp = padded(d, Dv);
  const int64_t nkb = (Sk + kBk - 1) / kBk, nqb = (Sq + kBq - 1) / kBq, nqt = nqb * D * kBq;
  float *ktp = w.ktp, *kc = w.kc, *vc = w.vc, *qtp = w.qtp, *dotp = w.dotp, *dqtp = w.dqtp;
  float *qc = w.qc, *doc = w.doc, *delta = w.delta, *lsev = w.lsev, *PT = w.PT, *dST = w.dST;
  const int64_t qoff = s.q_off(b, h), ooff = (b * H + h) * Dv;
  pack_rows(d, qc, q + qoff, qs, Sq, D);
  pack_rows(d, doc, dout + ooff, os, Sq, Dv);
  pack_t_blocks(qtp, q + qoff, qs, Sq, D);
  pack_t_blocks(dotp, dout + ooff, os, Sq, Dv);
  std::fill(dqtp, dqtp + nqt, 0.0f);
  for (int64_t i = 0; i < Sq; ++i) {
    if (i + kAhead < Sq) prefetch_row(out + ooff + (i + kAhead) * os, Dv);
    const float* o = out + ooff + i * os;
    VF acc = hn::Zero(d);
    for_lanes(d, 0, Dv, [&](int64_t c, size_t k) {
      acc = hn::MulAdd(load(d, doc + i * Dvp + c, k), load(d, o + c, k), acc);
    });
    delta[i] = hsum(d, acc);
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
      mm(d, nk, nq, D, kc + j0 * Dp, Dp, qtp + ib * D * kBq, kBq, PT, kBq, false);
      mm(d, nk, nq, Dv, vc + j0 * Dvp, Dvp, dotp + ib * Dv * kBq, kBq, dST, kBq, false);
      for (int64_t jj = 0; jj < nk; ++jj) {
        // queries i >= j - offset see key j
        const int64_t first =
            mask.causal ? std::clamp<int64_t>(j0 + jj - mask.offset - i0, 0, nq) : 0;
        const AttnDropout& drop = mask.dropout;
        if (drop.p > 0) {
          dropout_scales(w.z, drop.key, drop.row_index(b, h, i0) + uint64_t(j0 + jj),
                         uint64_t(drop.S), nq, drop.p);
        }
        score_grads_row(d, PT + jj * kBq, dST + jj * kBq, lsev + i0, delta + i0,
                        drop.p > 0 ? w.z : nullptr, nq, first, s.scale);
      }
      mm(d, nk, Dvp, nq, PT, kBq, doc + i0 * Dvp, Dvp, dvc + j0 * Dvp, Dvp, true);
      mm(d, nk, Dp, nq, dST, kBq, qc + i0 * Dp, Dp, dkc + j0 * Dp, Dp, true);
      mm(d, D, nq, nk, ktp + jb * D * kBk, kBk, dST, kBq, dqtp + ib * D * kBq, kBq, true);
    }
  }
  // dQ^T blocks back to rows (qc is free again), then into dq
  for (int64_t ib = 0; ib < nqb; ++ib)
    transpose(qc + ib * kBq * Dp, Dp, dqtp + ib * D * kBq, kBq, D, std::min(kBq, Sq - ib * kBq));
  add_rows(d, dq + qoff, qs, qc, Sq, D);
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
  const DF d;
  const int64_t B = s.B, Sk = s.Sk, H = s.H, G = s.G, D = s.D, Dv = s.Dv, hpg = H / G;
  const int64_t Dp = padded(d, D), Dvp = padded(d, Dv);
  const int64_t ks = s.kv_step(D), vs = s.kv_step(Dv), k_size = B * G * Sk * Dp;
  const int64_t kv_size = k_size + B * G * Sk * Dvp;
  const int nt = attn_threads(B * H, 5.0 * double(B * H * (D + Dv)) * double(s.Sq) * double(Sk));
  if (B * G >= nt) {
    // One task per (b, g): the task owns dK, dV of its group, so no thread shares a gradient.
    std::atomic<int64_t> next_task{0};
    parallel_run(nt, [&](int, int) {
      thread_local std::vector<float> buf, acc;
      BwdWork w = bwd_work(d, buf, s);
      float* dkc = scratch(acc, Sk * (Dp + Dvp));
      float* dvc = dkc + Sk * Dp;
      for (int64_t task; (task = next_task++) < B * G;) {
        const int64_t b = task / G, g = task % G;
        pack_kv(d, w, k, v, s, b, g);
        std::fill(dkc, dkc + Sk * (Dp + Dvp), 0.0f);
        for (int64_t h = g * hpg; h < (g + 1) * hpg; ++h)
          backward_head(d, w, dkc, dvc, dq, dout, q, out, lse, s, mask, b, h);
        add_rows(d, dk + s.kv_off(b, g, D), ks, dkc, Sk, D);
        add_rows(d, dv + s.kv_off(b, g, Dv), vs, dvc, Sk, Dv);
      }
    });
    return;
  }
  // Fewer (b, g) than threads (GQA/MQA at small batch): one task per (b, h), statically split,
  // each thread adding dK, dV into its own copy; the copies are summed in thread order, so the
  // result is deterministic for a given thread count.
  thread_local std::vector<float> priv_buf;
  float* priv = scratch(priv_buf, int64_t(nt) * kv_size);
  parallel_run(nt, [&](int t, int) {
    thread_local std::vector<float> buf;
    BwdWork w = bwd_work(d, buf, s);
    float* pdk = priv + int64_t(t) * kv_size;
    float* pdv = pdk + k_size;
    std::fill(pdk, pdk + kv_size, 0.0f);
    int64_t packed = -1;  // the (b, g) whose K, V are in w
    int64_t task0, task1;
    split_range(B * H, t, nt, 1, &task0, &task1);
    for (int64_t task = task0; task < task1; ++task) {
      const int64_t b = task / H, h = task % H, bg = b * G + h / hpg;
      if (bg != packed) pack_kv(d, w, k, v, s, b, h / hpg), packed = bg;
      backward_head(d, w, pdk + bg * Sk * Dp, pdv + bg * Sk * Dvp, dq, dout, q, out, lse, s, mask,
                    b, h);
    }
  });
  // every copy is complete
  parallel_rows(B * G * Sk, nt, [&](int64_t row) {
    const int64_t bg = row / Sk, j = row % Sk;
    float* dkr = dk + j * ks + s.kv_off(bg / G, bg % G, D);
    float* dvr = dv + j * vs + s.kv_off(bg / G, bg % G, Dv);
    for (int t = 0; t < nt; ++t) {
      const float* pk = priv + int64_t(t) * kv_size + (bg * Sk + j) * Dp;
      const float* pv = priv + int64_t(t) * kv_size + k_size + (bg * Sk + j) * Dvp;
      for (int64_t dd = 0; dd < D; ++dd) dkr[dd] += pk[dd];
      for (int64_t dd = 0; dd < Dv; ++dd) dvr[dd] += pv[dd];
    }
  });
}

namespace {

// dst[0, n) = src[0, n) widened (exact), or rounded (narrow_into), on the threads the traffic
// is worth.
void widen_into(DF d, float* HWY_RESTRICT dst, const bf16* HWY_RESTRICT src, int64_t n) {
  parallel_lanes(d, n, 6 * n,
                 [&](int64_t c, size_t k) { store(d, load_f32(d, src + c, k), dst + c, k); });
}
void narrow_rows(DF d, bf16* dst, const float* src, int64_t n) {
  parallel_ranges(n, threads_for(6 * n), kLine,
                  [&](int64_t i0, int64_t i1) { narrow_into(d, dst + i0, src + i0, i1 - i0); });
}

// Room for fp32 q, k, v (or dq, dk, dv) as qkv_spans lays them out, in a buffer of the calling
// thread's that the next call reuses (no fresh pages per call); widen_qkv fills it.
struct WideQkv {
  QkvSpans sp;
  float* buf;
  float* q() const { return buf; }
  float* k() const { return buf + sp.k_at; }
  float* v() const { return buf + sp.v_at; }
};
WideQkv wide_qkv(const AttnShape& s, std::vector<float>& room) {
  const QkvSpans sp = qkv_spans(s);
  return {sp, scratch(room, sp.size)};
}
WideQkv widen_qkv(DF d, const bf16* q, const bf16* k, const bf16* v, const AttnShape& s) {
  thread_local std::vector<float> room;
  const WideQkv w = wide_qkv(s, room);
  widen_into(d, w.q(), q, w.sp.n_q);
  widen_into(d, w.k(), k, w.sp.n_k);
  widen_into(d, w.v(), v, w.sp.n_v);
  return w;
}

}  // namespace

// The bf16 ops: the fp32 kernels on widened copies (the CPU's attention is bound by its
// arithmetic, not by these passes), each output rounded once.
void attention_forward_bf16(MT_PARAMS(attention_forward_bf16)) {
  const DF d;
  const WideQkv w = widen_qkv(d, q, k, v, s);
  const int64_t no = s.Sq * s.B * s.H * s.Dv;
  thread_local std::vector<float> room;
  float* o = scratch(room, no);
  attention_forward(o, lse, w.q(), w.k(), w.v(), s, mask);
  narrow_rows(d, out, o, no);
}

void attention_backward_bf16(MT_PARAMS(attention_backward_bf16)) {
  const DF d;
  const WideQkv w = widen_qkv(d, q, k, v, s);
  thread_local std::vector<float> grad_room, out_room;
  const WideQkv g = wide_qkv(s, grad_room);
  std::fill(g.buf, g.buf + g.sp.size, 0.0f);
  const int64_t no = s.Sq * s.B * s.H * s.Dv;
  float* o = scratch(out_room, 2 * no);
  widen_into(d, o, dout, no);
  widen_into(d, o + no, out, no);
  attention_backward(g.q(), g.k(), g.v(), o, w.q(), w.k(), w.v(), o + no, lse, s, mask);
  narrow_rows(d, dq, g.q(), g.sp.n_q);
  narrow_rows(d, dk, g.k(), g.sp.n_k);
  narrow_rows(d, dv, g.v(), g.sp.n_v);
}

void attention_merge(
    float* out, float* lse, const float* out_blk, const float* lse_blk, const AttnShape& s) {
  const int64_t B = s.B, Sq = s.Sq, H = s.H, Dv = s.Dv;
  parallel_rows(B * H, threads_for(int64_t(sizeof(float)) * 2 * B * H * Sq * (Dv + 1)),
                [&](int64_t bh) {
                  const int64_t b = bh / H, h = bh % H;
                  for (int64_t i = 0; i < Sq; ++i) {
                    float w1, w2, l;
                    if (!merge_weights(lse[bh * Sq + i], lse_blk[bh * Sq + i], &w1, &w2, &l))
                      continue;
                    float* o = out + ((i * B + b) * H + h) * Dv;
                    const float* ob = out_blk + ((i * B + b) * H + h) * Dv;
                    for (int64_t dd = 0; dd < Dv; ++dd) o[dd] = w1 * o[dd] + w2 * ob[dd];
                    lse[bh * Sq + i] = l;
                  }
                });
}

}  // namespace mtron::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mtron::kernels::cpu {
MTRON_ATTENTION_OPS(MT_CPU_EXPORT)
}  // namespace mtron::kernels::cpu
#endif  // HWY_ONCE
