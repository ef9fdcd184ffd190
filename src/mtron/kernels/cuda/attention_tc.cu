// CUDA flash attention on the tensor cores, forward and backward, for AttnShape::bf16_products
// (kernels/attention.h): the matrix products (Q K^T, P V, dO V^T, dS K, P^T dO, dS^T Q) take
// bf16 operands and accumulate in fp32 (mma.sync.m16n8k16, common.cuh); the softmax, its
// statistics (m, l, lse, delta) stay fp32; the tensors are fp32 or bf16 (the bf16 ops), the
// outputs rounded once. Layouts, mask, lse and the backward's contract (fp32 +=, bf16 written)
// are attention.cu's; no dropout (attention.cu keeps those calls).
//
// A block has 4 warps; each warp owns row groups of 16 rows of the block's tile (query rows in
// the forward and dQ kernels, key rows in the dK/dV kernel) and keeps their scores,
// probabilities and output accumulators in registers in the mma accumulator layout: the scores
// of a 16 x 64 tile are 8 accumulator tiles of 16 x 8, and two of them, rounded to bf16, are the
// A operand of the next product (FlashAttention-2's register-resident P). The backward's tiles
// are 64 queries by 64 keys (a group per warp); the forward's are FwdTiles' (two groups per
// warp, 128 queries, where the registers allow: each fragment of K and V then feeds two mma). A
// row's 4 lanes (lane = 4 group + tig) reduce its max and sum with two shuffles. Each tile is read
// from global memory once, 8 elements per load (128-bit for bf16, two 128-bit loads for fp32) where
// the head dim is a multiple of 8, and stored in shared memory as bf16 rows ([row][dim], stride
// padded by 8 so that the 8 rows an ldmatrix phase reads fall on distinct banks). The mma fragments
// come from those rows by ldmatrix (common.cuh): plain for an operand whose reduction dim is the
// head dim (Q, K in Q K^T), transposed for one whose reduction dim is the row (V in P V, K in dS K,
// Q and dO in the dK/dV products), so no tile is stored twice or transposed by scalar stores. Head
// dims are padded to 16 with zeros in shared memory; rows past the sequence are zeros and masked.
//
// Forward: per block, one (batch, head, query tile), the last query tiles (which see the most
// keys under a causal mask) first; online softmax over the key tiles the mask leaves visible,
// the mask applied only to the tiles it cuts; a warp whose rows see none of a tile skips its
// products. The softmax works in base 2 (scores times scale log2(e), EX2 on the special
// function units; lse stored in base e), as do the backward's probabilities.
// Backward, deterministic (no atomics), after attention.cu's delta kernel:
//   dQ:    per block, one (batch, head, query tile), the last first: S = Q K^T, dP = dO V^T,
//          dS = P (dP - delta), dQ += dS K over the visible key tiles;
//   dK/dV: per block, one (batch, group, key tile): S^T = K Q^T, dP^T = V dO^T over the group's
//          heads and the query tiles that see the keys, dV += P^T dO, dK += dS^T Q.
// The softmax scale is applied to dQ and dK at the end.
#include <cstdint>

#include "mtron/kernels/cuda/attention_tiles.cuh"
#include "mtron/kernels/cuda/common.cuh"

namespace mtron::kernels::cuda {
namespace {

constexpr int kB = 64;  // keys per tile (and queries per tile in the backward)
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;  // a warp per 16 rows (a row group) of the tile
constexpr int kN = kB / 8;             // accumulator tiles across a row of scores
constexpr float kLog2e = 1.44269504088896340736f;
constexpr float kLn2 = 0.693147180559945309417f;

// The forward's tiles for head dims up to kMaxD: kR row groups of 16 query rows per warp (kM
// queries per block) and kBn keys per tile. Two groups up to head dim 128, so each K and V
// fragment read from shared memory feeds two mma; one at 256, where the output accumulators of
// 32 rows would not fit in a thread's 255 registers. 32 keys per tile at head dim 128 (with 64,
// the scores of two groups would push the kernel past 255 registers: ptxas spills), else 64.
template <int kMaxD>
struct FwdTiles {
  static constexpr int kR = kMaxD <= 128 ? 2 : 1, kM = 64 * kR, kBn = kMaxD == 128 ? 32 : 64;
};

// Row stride (bf16) of a [kB][D] tile: D padded, + 8 (rows 4 banks apart; 16-byte rows).
__host__ __device__ __forceinline__ int row_ld(int64_t D) {
  return padded_d(D) + 8;
}

// Elements c.. (8, those below n) of a row at p as four registers of two bf16 each, zeros past
// n; vec: all eight with 128-bit loads.
__device__ __forceinline__ void load8(uint32_t (&w)[4], const float* p, int n, bool vec) {
  float x[8];
  if (vec) {
    const float4 lo = *reinterpret_cast<const float4*>(p);
    const float4 hi = *reinterpret_cast<const float4*>(p + 4);
    x[0] = lo.x, x[1] = lo.y, x[2] = lo.z, x[3] = lo.w, x[4] = hi.x, x[5] = hi.y, x[6] = hi.z,
    x[7] = hi.w;
  } else {
    for (int u = 0; u < 8; ++u) x[u] = u < n ? p[u] : 0.0f;
  }
  MT_UNROLL
  for (int u = 0; u < 4; ++u)
    w[u] = uint32_t(f32_to_bf16_bits(x[2 * u])) | uint32_t(f32_to_bf16_bits(x[2 * u + 1])) << 16;
}
__device__ __forceinline__ void load8(uint32_t (&w)[4], const uint16_t* p, int n, bool vec) {
  if (vec) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
    return;
  }
  for (int u = 0; u < 4; ++u)
    w[u] = uint32_t(2 * u < n ? p[2 * u] : 0) | uint32_t(2 * u + 1 < n ? p[2 * u + 1] : 0) << 16;
}

// Where row r of a tensor lies: off + r step elements from its pointer (kernels/attention.h's
// q_off and q_step, kv_off and kv_step, o_at and o_step).
struct Rows {
  int64_t off, step;
  __device__ int64_t at(int64_t r) const { return off + r * step; }
};
// The rows of head h of sequence b in q and dq; of group g in k, dk (width D) or v, dv (width
// Dv); of head h in out and dout.
__device__ __forceinline__ Rows q_rows(const AttnShape& s, int64_t b, int64_t h) {
  return {s.q_off(b, h), s.q_step()};
}
__device__ __forceinline__ Rows kv_rows(const AttnShape& s, int64_t b, int64_t g, int64_t width) {
  return {s.kv_off(b, g, width), s.kv_step(width)};
}
__device__ __forceinline__ Rows o_rows(const AttnShape& s, int64_t b, int64_t h) {
  return {s.o_at(0, b, h), s.o_step()};
}

// Rows first.. (kRows of them) of a tensor of head dim D <= kMaxD and element type T (float, or
// uint16_t: bf16 bits), row r at src + rows.off + r rows.step, as bf16 into `tile`
// ([kRows][row_ld(D)]). Columns past D and rows at or past n_rows are zeros. A thread copies one
// 16-byte column chunk of every kStride-th row (kMaxD / 8 chunks per row, a power of 2): its
// column and first offset are computed once, each further row is one add (no division by the
// row length per chunk). bf16 rows of 16-byte chunks are copied by cp.async: they land while the
// block computes, complete once the thread has passed cp_async_wait_all (the kernels then
// __syncthreads before reading them). Otherwise (fp32, or an odd head dim) each thread issues
// kBatch loads before it stores any, so a tile costs one memory latency per kBatch of its loads,
// not one per load.
template <int kRows, int kMaxD, typename T>
__device__ __forceinline__ void load_tile(
    uint16_t* tile, const T* src, Rows rows, int64_t first, int64_t n_rows, int D) {
  constexpr int kChunks = kMaxD / 8, kStride = kThreads / kChunks, kPer = kRows / kStride;
  static_assert(kThreads % kChunks == 0 && kRows % kStride == 0, "whole rows per pass");
  constexpr int kBatch = 4;
  const int Dp = padded_d(D), ld = Dp + 8;
  const int c = int(threadIdx.x) % kChunks * 8, t0 = int(threadIdx.x) / kChunks;
  if (c >= Dp) return;  // a chunk past the padded head dim (D < kMaxD)
  const bool col_in = c < D;
  const int64_t valid = n_rows - first;  // rows t < valid lie in the tensor
  // the offset of the thread's chunk in its first row, and from one of its rows to the next
  int64_t at = rows.at(first + t0) + c;
  const int64_t next = kStride * rows.step;
  // every row starts a multiple of D elements from src (kernels/attention.h's layouts)
  const bool vec = D % 8 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0;
  if constexpr (std::is_same_v<T, uint16_t>) {
    if (vec) {
      MT_UNROLL
      for (int u = 0; u < kPer; ++u, at += next) {
        const int t = t0 + u * kStride;
        const bool in = col_in && t < valid;
        cp_async16(tile + t * ld + c, in ? src + at : src, in ? 16 : 0);
      }
      return;
    }
  }
  for (int u0 = 0; u0 < kPer; u0 += kBatch) {
    uint32_t w[kBatch][4];
    MT_UNROLL
    for (int u = 0; u < kBatch; ++u, at += next) {
      const int t = t0 + (u0 + u) * kStride;
      w[u][0] = w[u][1] = w[u][2] = w[u][3] = 0;
      if (u0 + u < kPer && col_in && t < valid) load8(w[u], src + at, D - c, vec);
    }
    MT_UNROLL
    for (int u = 0; u < kBatch; ++u) {
      const int t = t0 + (u0 + u) * kStride;
      if (u0 + u < kPer)
        *reinterpret_cast<uint4*>(tile + t * ld + c) =
            make_uint4(w[u][0], w[u][1], w[u][2], w[u][3]);
    }
  }
}

// The A fragment of rows r0.. and columns k0.. of a row-major bf16 tile of stride ld.
__device__ __forceinline__ void frag_a(
    uint32_t (&a)[4], const uint16_t* T, int ld, int r0, int k0) {
  const int lane = int(threadIdx.x % 32);
  ldmatrix_x4<false>(a, T + (r0 + (lane & 15)) * ld + k0 + 8 * (lane >> 4));
}
// The B fragments of accumulator tiles n0 / 8 and n0 / 8 + 1 (b[0..1] and b[2..3]) for
// B[k][n] = T[n0 + n][k0 + k]: the tile T holds B's columns as its rows.
__device__ __forceinline__ void frag_b2(
    uint32_t (&b)[4], const uint16_t* T, int ld, int n0, int k0) {
  const int lane = int(threadIdx.x % 32);
  ldmatrix_x4<false>(b, T + (n0 + (lane & 7) + 8 * (lane >> 4)) * ld + k0 + 8 * ((lane >> 3) & 1));
}
// The same for B[k][n] = T[k0 + k][n0 + n]: the tile T holds B's rows (transposed loads).
__device__ __forceinline__ void frag_b2_trans(
    uint32_t (&b)[4], const uint16_t* T, int ld, int k0, int n0) {
  const int lane = int(threadIdx.x % 32);
  ldmatrix_x4<true>(b, T + (k0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * ld + n0 + 8 * (lane >> 4));
}
// c0 += a B and c1 += a B' for the fragment pair b of frag_b2 (B: b[0..1], B': b[2..3]).
__device__ __forceinline__ void mma_pair(float (&c0)[4],
                                         float (&c1)[4],
                                         const uint32_t (&a)[4],
                                         const uint32_t (&b)[4]) {
  const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
  mma_bf16_16816(c0, a, b0);
  mma_bf16_16816(c1, a, b1);
}

// acc[g] = A[r0 + 16 g..][0..K] B^T for the warp's kR row groups, B^T = Bt[0..8 kNt][0..K] (both
// row-major bf16 tiles): 16 rows per group against 8 kNt rows of the other tile (scores, dP).
// Each B fragment is read once for the kR groups. K <= kMaxK: the loop over K is unrolled, so
// that ptxas can issue a step's ldmatrix ahead of the previous step's mma.
template <int kMaxK, int kR, int kNt>
__device__ __forceinline__ void row_products(float (&acc)[kR][kNt][4],
                                             const uint16_t* A,
                                             int lda,
                                             int r0,
                                             const uint16_t* Bt,
                                             int ldb,
                                             int K) {
  MT_UNROLL
  for (int g = 0; g < kR; ++g) MT_UNROLL
  for (int n = 0; n < kNt; ++n) acc[g][n][0] = acc[g][n][1] = acc[g][n][2] = acc[g][n][3] = 0;
  MT_UNROLL
  for (int k0 = 0; k0 < kMaxK; k0 += 16) {
    if (k0 >= K) break;
    uint32_t a[kR][4];
    MT_UNROLL
    for (int g = 0; g < kR; ++g) frag_a(a[g], A, lda, r0 + 16 * g, k0);
    MT_UNROLL
    for (int n = 0; n < kNt; n += 2) {
      uint32_t b[4];
      frag_b2(b, Bt, ldb, 8 * n, k0);
      MT_UNROLL
      for (int g = 0; g < kR; ++g) mma_pair(acc[g][n], acc[g][n + 1], a[g], b);
    }
  }
}

// acc[g][n] += W_g B for the first n_tiles accumulator tiles (an even number) of each of the
// warp's kR row groups, W_g the group's 16 x 8 kNt tile of weights (P or dS, in accumulator
// tiles, rounded to bf16 here) and B[k][n] = T[k][n], T a row-major tile [8 kNt][ld] (V, K, Q or
// dO). Each B fragment is read once for the kR groups.
template <int kR, int kMaxN, int kNt>
__device__ __forceinline__ void weight_products(float (&acc)[kR][kMaxN][4],
                                                const float (&w)[kR][kNt][4],
                                                const uint16_t* T,
                                                int ld,
                                                int n_tiles) {
  MT_UNROLL
  for (int kc = 0; kc < kNt / 2; ++kc) {
    uint32_t a[kR][4];
    MT_UNROLL
    for (int g = 0; g < kR; ++g) {
      const float(&lo)[4] = w[g][2 * kc];
      const float(&hi)[4] = w[g][2 * kc + 1];
      a[g][0] = pack_bf16x2(lo[0], lo[1]), a[g][1] = pack_bf16x2(lo[2], lo[3]);
      a[g][2] = pack_bf16x2(hi[0], hi[1]), a[g][3] = pack_bf16x2(hi[2], hi[3]);
    }
    MT_UNROLL
    for (int n = 0; n < kMaxN; n += 2) {
      if (n < n_tiles) {
        uint32_t b[4];
        frag_b2_trans(b, T, ld, 16 * kc, 8 * n);
        MT_UNROLL
        for (int g = 0; g < kR; ++g) mma_pair(acc[g][n], acc[g][n + 1], a[g], b);
      }
    }
  }
}

// The row (0: group, 1: group + 8) and column of accumulator element e of tile n.
__device__ __forceinline__ int acc_row(int e) {
  return int(threadIdx.x % 32) / 4 + 8 * (e >> 1);
}
__device__ __forceinline__ int acc_col(int n, int e) {
  return 8 * n + 2 * int(threadIdx.x % 4) + (e & 1);
}

// f(row, column, value) for each element of a warp's 16-row accumulator tiles (row 0..15 of the
// warp's rows) whose column is below width.
template <int kMaxN, typename F>
__device__ __forceinline__ void for_acc(const float (&acc)[kMaxN][4], int width, F f) {
  MT_UNROLL
  for (int n = 0; n < kMaxN; ++n) MT_UNROLL
  for (int e = 0; e < 4; ++e) {
    if (acc_col(n, e) < width) f(acc_row(e), acc_col(n, e), acc[n][e]);
  }
}

template <int kMaxD, typename T>
__global__ void __launch_bounds__(kThreads) attention_forward_tc_kernel(
    T* out, float* lse, const T* q, const T* k, const T* v, AttnShape s, AttnMask mask) {
  constexpr int kR = FwdTiles<kMaxD>::kR, kM = FwdTiles<kMaxD>::kM, kBn = FwdTiles<kMaxD>::kBn;
  MT_DYNAMIC_SMEM(smem_raw);
  const int ldq = row_ld(s.D), ldv = row_ld(s.Dv);
  uint16_t* Qs = reinterpret_cast<uint16_t*>(smem_raw);  // [kM][ldq]
  uint16_t* Ks = Qs + kM * ldq;                          // [kBn][ldq]
  uint16_t* Vs = Ks + kBn * ldq;                         // [kBn][ldv]
  const int warp = int(threadIdx.x / 32);
  const int64_t b = blockIdx.y / s.H, h = blockIdx.y % s.H, g = h / (s.H / s.G);
  const int64_t i0 = int64_t(gridDim.x - 1 - blockIdx.x) * kM, r0 = i0 + 16 * kR * warp;
  const Rows k_at = kv_rows(s, b, g, s.D), v_at = kv_rows(s, b, g, s.Dv), o_at = o_rows(s, b, h);

  load_tile<kM, kMaxD>(Qs, q, q_rows(s, b, h), i0, s.Sq, int(s.D));
  const int64_t kv_end = key_end(s, mask, i0 + kM < s.Sq ? i0 + kM : s.Sq);
  const int64_t warp_end = key_end(s, mask, r0 + 16 * kR < s.Sq ? r0 + 16 * kR : s.Sq);
  if (kv_end > 0) load_tile<kBn, kMaxD>(Ks, k, k_at, 0, s.Sk, int(s.D));

  // The softmax in base 2: x = score scale log2(e), p = 2^(x - m) (one multiply, one EX2).
  const float scale2 = s.scale * kLog2e;
  // Each tile's V lands while its scores are computed, the next tile's K while its P V is.
  float m[kR][2], l[kR][2];
  MT_UNROLL
  for (int rg = 0; rg < kR; ++rg) m[rg][0] = m[rg][1] = kNegInf, l[rg][0] = l[rg][1] = 0;
  float o[kR][kMaxD / 8][4] = {};
  for (int64_t j0 = 0; j0 < kv_end; j0 += kBn) {
    cp_async_wait_all();
    __syncthreads();  // K (and Q) are in, and no warp still reads the previous V
    load_tile<kBn, kMaxD>(Vs, v, v_at, j0, s.Sk, int(s.Dv));
    const bool active = j0 < warp_end;  // some row of this warp sees a key of the tile
    float sc[kR][kBn / 8][4];
    if (active) {
      row_products<kMaxD, kR>(sc, Qs, ldq, 16 * kR * warp, Ks, ldq, padded_d(s.D));
      MT_UNROLL
      for (int rg = 0; rg < kR; ++rg) {
        const int64_t g0 = r0 + 16 * rg;  // the group's first row
        // whether the mask cuts this tile for the group's rows (keys past Sk, or past the
        // first row's causal limit)
        const bool cut = j0 + kBn > s.Sk || (mask.causal && j0 + kBn - 1 > g0 + mask.offset);
        // in a cut tile, key column c of group row r is visible where c < n_keys and, under a
        // causal mask, c - r <= diag (both clamped to the tile: 32-bit compares)
        const int n_keys = int(s.Sk - j0 < kBn ? s.Sk - j0 : kBn);
        const int64_t d = g0 + mask.offset - j0;
        const int diag = !mask.causal || d > kBn ? kBn : (d < -kBn ? -kBn : int(d));
        MT_UNROLL
        for (int n = 0; n < kBn / 8; ++n) MT_UNROLL
        for (int e = 0; e < 4; ++e) sc[rg][n][e] *= scale2;
        if (cut) {
          MT_UNROLL
          for (int n = 0; n < kBn / 8; ++n) MT_UNROLL
          for (int e = 0; e < 4; ++e) {
            if (acc_col(n, e) >= n_keys || acc_col(n, e) - acc_row(e) > diag)
              sc[rg][n][e] = kNegInf;
          }
        }
        float mx[2] = {kNegInf, kNegInf};
        MT_UNROLL
        for (int n = 0; n < kBn / 8; ++n) MT_UNROLL
        for (int e = 0; e < 4; ++e) mx[e >> 1] = fmaxf(mx[e >> 1], sc[rg][n][e]);
        float base[2];  // the row's max, 0 while it has seen no key (so that 2^(-inf - 0) = 0)
        MT_UNROLL
        for (int r = 0; r < 2; ++r) {
          const float m_new = fmaxf(m[rg][r], quad_max(mx[r]));
          const float alpha = m[rg][r] == kNegInf ? 0.0f : exp2f(m[rg][r] - m_new);
          m[rg][r] = m_new;
          l[rg][r] *= alpha;
          MT_UNROLL
          for (int n = 0; n < kMaxD / 8; ++n)
            o[rg][n][2 * r] *= alpha, o[rg][n][2 * r + 1] *= alpha;
          base[r] = m_new == kNegInf ? 0.0f : m_new;
        }
        MT_UNROLL
        for (int n = 0; n < kBn / 8; ++n) MT_UNROLL
        for (int e = 0; e < 4; ++e) {
          float& x = sc[rg][n][e];
          x = exp2f(x - base[e >> 1]);
          l[rg][e >> 1] += x;
        }
      }
    }
    cp_async_wait_all();
    __syncthreads();  // V is in, and no warp still reads K
    if (j0 + kBn < kv_end) load_tile<kBn, kMaxD>(Ks, k, k_at, j0 + kBn, s.Sk, int(s.D));
    if (active) weight_products<kR>(o, sc, Vs, ldv, padded_d(s.Dv) / 8);
  }
  cp_async_wait_all();

  MT_UNROLL
  for (int rg = 0; rg < kR; ++rg) {
    const int64_t g0 = r0 + 16 * rg;
    const float l0 = quad_sum(l[rg][0]), l1 = quad_sum(l[rg][1]);
    // 1 / l per row (a row that saw no key: 0), one division per row, not per element
    const float inv0 = l0 > 0 ? 1.0f / l0 : 0.0f, inv1 = l1 > 0 ? 1.0f / l1 : 0.0f;
    for_acc(o[rg], int(s.Dv), [&](int rr, int c, float x) {
      const int64_t i = g0 + rr;
      if (i < s.Sq) store_as(out + o_at.at(i) + c, x * (rr < 8 ? inv0 : inv1));
    });
    if (threadIdx.x % 4 == 0) {
      MT_UNROLL
      for (int r = 0; r < 2; ++r) {
        const int64_t i = g0 + acc_row(2 * r);
        const float li = r == 0 ? l0 : l1;
        if (i < s.Sq) lse[stat_at(s, b, h, i)] = li > 0 ? (m[rg][r] + log2f(li)) * kLn2 : kNegInf;
      }
    }
  }
}

// The backward's probabilities P[i, j] as prob's (attention_tiles.cuh) in base 2, one FFMA and
// one EX2 each: p = 2^(score scale2 - l2), scale2 = scale log2(e), l2 = lse_i log2(e). Where the
// tile crosses the mask or the sequences' ends (`cut`), p = 0 where query i is past Sq, key j
// past Sk or hidden from i; elsewhere every row sees every key, and its lse is finite.
// p holds the scores; l2(n, e), query(n, e), key(n, e): l2, query and key of accumulator
// element e of tile n.
template <typename L2, typename Query, typename Key>
__device__ __forceinline__ void probabilities(float (&p)[kN][4],
                                              const AttnShape& s,
                                              const AttnMask& m,
                                              bool cut,
                                              float scale2,
                                              L2 l2,
                                              Query query,
                                              Key key) {
  MT_UNROLL
  for (int n = 0; n < kN; ++n) MT_UNROLL
  for (int e = 0; e < 4; ++e) p[n][e] = exp2f(fmaf(p[n][e], scale2, -l2(n, e)));
  if (!cut) return;
  MT_UNROLL
  for (int n = 0; n < kN; ++n) MT_UNROLL
  for (int e = 0; e < 4; ++e) {
    const int64_t i = query(n, e), j = key(n, e);
    if (!seen(s, m, i, j)) p[n][e] = 0.0f;
  }
}

template <int kMaxD, typename T>
__global__ void __launch_bounds__(kThreads)
    attention_dq_tc_kernel(BwdTensors<T> t, AttnShape s, AttnMask mask) {
  MT_DYNAMIC_SMEM(smem_raw);
  const int ldq = row_ld(s.D), ldv = row_ld(s.Dv);
  uint16_t* Qs = reinterpret_cast<uint16_t*>(smem_raw);  // [kB][ldq]
  uint16_t* dOs = Qs + kB * ldq;                         // [kB][ldv]
  uint16_t* Kb = dOs + kB * ldv;                         // two [kB][ldq]: K of even, odd tiles
  uint16_t* Vb = Kb + 2 * kB * ldq;                      // two [kB][ldv]
  const int warp = int(threadIdx.x / 32);
  const int64_t b = blockIdx.y / s.H, h = blockIdx.y % s.H, g = h / (s.H / s.G);
  const int64_t i0 = int64_t(gridDim.x - 1 - blockIdx.x) * kB, r0 = i0 + 16 * warp;
  const Rows k_at = kv_rows(s, b, g, s.D), v_at = kv_rows(s, b, g, s.Dv), q_at = q_rows(s, b, h);
  // K and V of the tile at j0 into buffer `buf`
  auto load_kv = [&](int64_t j0, int buf) {
    load_tile<kB, kMaxD>(Kb + buf * kB * ldq, t.k, k_at, j0, s.Sk, int(s.D));
    load_tile<kB, kMaxD>(Vb + buf * kB * ldv, t.v, v_at, j0, s.Sk, int(s.Dv));
  };

  load_tile<kB, kMaxD>(Qs, t.q, q_at, i0, s.Sq, int(s.D));
  load_tile<kB, kMaxD>(dOs, t.dout, o_rows(s, b, h), i0, s.Sq, int(s.Dv));
  const float scale2 = s.scale * kLog2e;
  float l2[2], dlt[2];  // lse log2(e) and delta of the thread's two rows
  MT_UNROLL
  for (int r = 0; r < 2; ++r) {
    const int64_t i = r0 + acc_row(2 * r);
    l2[r] = i < s.Sq ? t.lse[stat_at(s, b, h, i)] * kLog2e : kNegInf;
    dlt[r] = i < s.Sq ? t.delta[stat_at(s, b, h, i)] : 0.0f;
  }
  const int64_t kv_end = key_end(s, mask, i0 + kB < s.Sq ? i0 + kB : s.Sq);
  const int64_t warp_end = key_end(s, mask, r0 + 16 < s.Sq ? r0 + 16 : s.Sq);

  if (kv_end > 0) load_kv(0, 0);

  // Double-buffered: the next tile's K and V land while this tile's products are computed.
  float dq[1][kMaxD / 8][4] = {};
  for (int64_t j0 = 0, it = 0; j0 < kv_end; j0 += kB, ++it) {
    cp_async_wait_all();
    __syncthreads();  // this tile is in, and no warp still reads the other buffer
    if (j0 + kB < kv_end) load_kv(j0 + kB, int(it + 1) & 1);
    if (j0 >= warp_end) continue;
    const uint16_t* Ks = Kb + (it & 1) * kB * ldq;
    const uint16_t* Vs = Vb + (it & 1) * kB * ldv;
    float sc[1][kN][4], dp[1][kN][4];
    row_products<kMaxD, 1>(sc, Qs, ldq, 16 * warp, Ks, ldq, padded_d(s.D));
    row_products<kMaxD, 1>(dp, dOs, ldv, 16 * warp, Vs, ldv, padded_d(s.Dv));
    const bool cut =
        r0 + 16 > s.Sq || j0 + kB > s.Sk || (mask.causal && j0 + kB - 1 > r0 + mask.offset);
    probabilities(
        sc[0], s, mask, cut, scale2, [&](int, int e) { return l2[e >> 1]; },
        [&](int, int e) { return r0 + acc_row(e); },
        [&](int n, int e) { return j0 + acc_col(n, e); });
    MT_UNROLL
    for (int n = 0; n < kN; ++n) MT_UNROLL
    for (int e = 0; e < 4; ++e) sc[0][n][e] *= dp[0][n][e] - dlt[e >> 1];  // dS
    weight_products<1>(dq, sc, Ks, ldq, padded_d(s.D) / 8);
  }
  cp_async_wait_all();

  for_acc(dq[0], int(s.D), [&](int rr, int c, float x) {
    const int64_t i = r0 + rr;
    if (i < s.Sq) store_grad(t.dq + q_at.at(i) + c, x * s.scale);
  });
}

template <int kMaxD, typename T>
__global__ void __launch_bounds__(kThreads)
    attention_dkdv_tc_kernel(BwdTensors<T> t, AttnShape s, AttnMask mask) {
  MT_DYNAMIC_SMEM(smem_raw);
  const int ldq = row_ld(s.D), ldv = row_ld(s.Dv), Dp = padded_d(s.D), Dvp = padded_d(s.Dv);
  uint16_t* Ks = reinterpret_cast<uint16_t*>(smem_raw);         // [kB][ldq]
  uint16_t* Vs = Ks + kB * ldq;                                 // [kB][ldv]
  uint16_t* Qb = Vs + kB * ldv;                                 // two [kB][ldq]: even, odd steps
  uint16_t* dOb = Qb + 2 * kB * ldq;                            // two [kB][ldv]
  float* lse_b = reinterpret_cast<float*>(dOb + 2 * kB * ldv);  // two [kB]
  float* delta_b = lse_b + 2 * kB;                              // two [kB]
  const int warp = int(threadIdx.x / 32);
  const int64_t hpg = s.H / s.G;
  const int64_t b = blockIdx.y / s.G, g = blockIdx.y % s.G;
  const int64_t j0 = int64_t(blockIdx.x) * kB, r0 = j0 + 16 * warp;

  const Rows k_at = kv_rows(s, b, g, s.D), v_at = kv_rows(s, b, g, s.Dv);
  load_tile<kB, kMaxD>(Ks, t.k, k_at, j0, s.Sk, int(s.D));
  load_tile<kB, kMaxD>(Vs, t.v, v_at, j0, s.Sk, int(s.Dv));

  const float scale2 = s.scale * kLog2e;
  float dk[1][kMaxD / 8][4] = {}, dv[1][kMaxD / 8][4] = {};
  // Queries that can see key j0 or later: i + offset >= j0.
  int64_t i_begin = 0;
  if (mask.causal && j0 - mask.offset > 0) i_begin = (j0 - mask.offset) / kB * kB;
  // Steps: the query tiles from i_begin of each of the group's heads.
  const int64_t tiles = i_begin < s.Sq ? (s.Sq - i_begin + kB - 1) / kB : 0, steps = hpg * tiles;
  auto head_of = [&](int64_t step) { return g * hpg + step / tiles; };
  auto first_of = [&](int64_t step) { return i_begin + step % tiles * kB; };
  // Q, dO, lse log2(e) and delta of a step into buffer `buf`
  auto load_step = [&](int64_t step, int buf) {
    const int64_t h = head_of(step), i0 = first_of(step);
    load_tile<kB, kMaxD>(Qb + buf * kB * ldq, t.q, q_rows(s, b, h), i0, s.Sq, int(s.D));
    load_tile<kB, kMaxD>(dOb + buf * kB * ldv, t.dout, o_rows(s, b, h), i0, s.Sq, int(s.Dv));
    if (threadIdx.x < kB) {
      const int64_t i = i0 + threadIdx.x;
      lse_b[buf * kB + threadIdx.x] = i < s.Sq ? t.lse[stat_at(s, b, h, i)] * kLog2e : kNegInf;
      delta_b[buf * kB + threadIdx.x] = i < s.Sq ? t.delta[stat_at(s, b, h, i)] : 0.0f;
    }
  };
  if (steps > 0) load_step(0, 0);

  // Double-buffered: the next step's tiles land while this step's products are computed.
  for (int64_t step = 0; step < steps; ++step) {
    cp_async_wait_all();
    __syncthreads();  // this step's tiles (and K, V) are in, and no warp reads the other buffer
    if (step + 1 < steps) load_step(step + 1, int(step + 1) & 1);
    const int buf = int(step & 1);
    const uint16_t* Qs = Qb + buf * kB * ldq;
    const uint16_t* dOs = dOb + buf * kB * ldv;
    const float* lse_s = lse_b + buf * kB;
    const float* delta_s = delta_b + buf * kB;
    const int64_t i0 = first_of(step);
    const int64_t i_last = (i0 + kB < s.Sq ? i0 + kB : s.Sq) - 1;
    if (r0 >= s.Sk || (mask.causal && i_last + mask.offset < r0)) continue;
    float st[1][kN][4], dpt[1][kN][4];  // S^T, dP^T: this warp's 16 keys by the tile's queries
    row_products<kMaxD, 1>(st, Ks, ldq, 16 * warp, Qs, ldq, Dp);
    row_products<kMaxD, 1>(dpt, Vs, ldv, 16 * warp, dOs, ldv, Dvp);
    const bool cut =
        i0 + kB > s.Sq || r0 + 16 > s.Sk || (mask.causal && r0 + 15 > i0 + mask.offset);
    // the statistics of the query columns: element e of tile n is column acc_col(n, e)
    probabilities(
        st[0], s, mask, cut, scale2, [&](int n, int e) { return lse_s[acc_col(n, e)]; },
        [&](int n, int e) { return i0 + acc_col(n, e); },
        [&](int, int e) { return r0 + acc_row(e); });
    MT_UNROLL
    for (int n = 0; n < kN; ++n) MT_UNROLL
    for (int e = 0; e < 4; ++e)
      dpt[0][n][e] = st[0][n][e] * (dpt[0][n][e] - delta_s[acc_col(n, e)]);  // dS^T
    weight_products<1>(dv, st, dOs, ldv, Dvp / 8);
    weight_products<1>(dk, dpt, Qs, ldq, Dp / 8);
  }
  cp_async_wait_all();

  for_acc(dk[0], int(s.D), [&](int rr, int c, float x) {
    const int64_t j = r0 + rr;
    if (j < s.Sk) store_grad(t.dk + k_at.at(j) + c, x * s.scale);
  });
  for_acc(dv[0], int(s.Dv), [&](int rr, int c, float x) {
    const int64_t j = r0 + rr;
    if (j < s.Sk) store_grad(t.dv + v_at.at(j) + c, x);
  });
}

// Dynamic shared memory of each kernel, in bytes (the layouts above).
template <int kMaxD>
size_t forward_smem(const AttnShape& s) {  // Q of kM rows, K and V of kBn
  using F = FwdTiles<kMaxD>;
  return 2 * size_t((F::kM + F::kBn) * row_ld(s.D) + F::kBn * row_ld(s.Dv));
}
size_t dq_smem(const AttnShape& s) {  // Q, dO and two buffers of K, V
  return 2 * size_t(3 * kB * (row_ld(s.D) + row_ld(s.Dv)));
}
size_t dkdv_smem(const AttnShape& s) {  // K, V and two buffers of Q, dO, lse, delta
  return dq_smem(s) + sizeof(float) * 4 * kB;
}

// Whether the device gives a block `bytes` of shared memory (opted in): an H100/H200 227 KiB,
// an A100 163 KiB; the largest blocks, the backward's at head dim 256, take 199 KiB.
bool fits(size_t bytes) {
#ifdef MTRON_CUDA_SIM
  (void)bytes;
  return true;
#else
  int dev = 0, optin = 0;
  MT_CUDA_CHECK(cudaGetDevice(&dev));
  MT_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return bytes <= size_t(optin);
#endif
}

}  // namespace

template <typename T>
bool attention_forward_tc(cudaStream_t st,
                          T* out,
                          float* lse,
                          const T* q,
                          const T* k,
                          const T* v,
                          const AttnShape& s,
                          const AttnMask& mask) {
  bool ran = false;
  with_max_d(s, [&](auto max_d) {
    constexpr int kMaxD = decltype(max_d)::value, kM = FwdTiles<kMaxD>::kM;
    const size_t smem = forward_smem<kMaxD>(s);
    if (!fits(smem)) return;
    ran = true;
    allow_smem(attention_forward_tc_kernel<kMaxD, T>, smem);
    launch(sizeof(T) == 2 ? "attention_forward_tc_bf16" : "attention_forward_tc",
           attention_forward_tc_kernel<kMaxD, T>,
           dim3(unsigned((s.Sq + kM - 1) / kM), unsigned(s.B * s.H)), kThreads, smem, st, out, lse,
           q, k, v, s, mask);
  });
  return ran;
}

template <typename T>
bool attention_backward_tc(cudaStream_t st,
                           const BwdTensors<T>& t,
                           const AttnShape& s,
                           const AttnMask& mask) {
  if (!fits(dq_smem(s)) || !fits(dkdv_smem(s))) return false;
  const bool bf16 = sizeof(T) == 2;
  with_max_d(s, [&](auto max_d) {
    constexpr int kMaxD = decltype(max_d)::value;
    const size_t smem_kv = dkdv_smem(s), smem_q = dq_smem(s);
    allow_smem(attention_dkdv_tc_kernel<kMaxD, T>, smem_kv);
    allow_smem(attention_dq_tc_kernel<kMaxD, T>, smem_q);
    launch(bf16 ? "attention_dkdv_tc_bf16" : "attention_dkdv_tc",
           attention_dkdv_tc_kernel<kMaxD, T>,
           dim3(unsigned((s.Sk + kB - 1) / kB), unsigned(s.B * s.G)), kThreads, smem_kv, st, t, s,
           mask);
    launch(bf16 ? "attention_dq_tc_bf16" : "attention_dq_tc", attention_dq_tc_kernel<kMaxD, T>,
           dim3(unsigned((s.Sq + kB - 1) / kB), unsigned(s.B * s.H)), kThreads, smem_q, st, t, s,
           mask);
  });
  return true;
}

template bool attention_forward_tc(cudaStream_t,
                                   float*,
                                   float*,
                                   const float*,
                                   const float*,
                                   const float*,
                                   const AttnShape&,
                                   const AttnMask&);
template bool attention_forward_tc(cudaStream_t,
                                   uint16_t*,
                                   float*,
                                   const uint16_t*,
                                   const uint16_t*,
                                   const uint16_t*,
                                   const AttnShape&,
                                   const AttnMask&);
template bool attention_backward_tc(cudaStream_t,
                                    const BwdTensors<float>&,
                                    const AttnShape&,
                                    const AttnMask&);
template bool attention_backward_tc(cudaStream_t,
                                    const BwdTensors<uint16_t>&,
                                    const AttnShape&,
                                    const AttnMask&);

}  // namespace mtron::kernels::cuda
