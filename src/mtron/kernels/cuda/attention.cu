// CUDA flash attention in fp32, forward and backward (kernels/attention.h).
//
// Layouts as the header: q [Sq, B, H, D], out [Sq, B, H, Dv], k [Sk, B, G, D], v [Sk, B, G, Dv],
// lse [B, H, Sq]; query head h reads key/value group h / (H / G). The S x S score matrix never
// exists.
//
// Tiles of kT = 32 queries by kT = 32 keys; a block of 128 threads gives each query row (or, in
// the dK/dV kernel, each key) 4 threads, `sub` = 0..3. A thread computes the scores of its row
// against keys sub, sub + 4, ... of the tile, and owns the output columns 16 u + 4 sub + 0..3
// of its row (kMaxD / 4 accumulators in registers; kMaxD is max(D, Dv) rounded up to 32, 64, 128
// or 256). Tiles live in dynamic shared memory, each tensor's head dim (D for Q, K; Dv for V, dO)
// padded by zeros to a multiple of 16 (the owned column chunks), with the row stride of
// max(D, Dv) padded + 4 floats: every shared-memory read is a 16-byte float4 (four FMAs per load
// in the dot products), within the written columns, and the rows a warp reads at once fall on
// distinct banks. Loops run over each tensor's own padded width.
// Arithmetic is plain fp32 FMA (no TF32): results agree with the CPU kernel to fp32 rounding.
//
// Forward: per block, one (batch, head, query tile); online softmax over the key tiles that the
// mask leaves visible (a causal block stops at its last visible key). Saves lse.
// Backward, deterministic (no atomics), in three kernels:
//   delta[b, h, i] = dO_i . O_i (the softmax-backward row term, as FlashAttention-2);
//   dK/dV: per block, one (batch, group, key tile); loops over the group's heads and the query
//          tiles that can see the keys, recomputing P = exp(S - lse), accumulating dV += P^T dO
//          and dK += dS^T Q in registers, then adds them into dk/dv;
//   dQ:    per block, one (batch, head, query tile); loops over key tiles, dQ += dS K.
// dS = P (dP - delta) with dP = dO V^T; the softmax scale is applied to dQ and dK at the end.
// Dropout (mask.dropout.p > 0, kernels/attention.h): each kernel draws the multipliers z of its
// (query tile, key tile) into a shared tile beside the loads (dropout_tile); the forward adds
// the undropped P to l and multiplies P by z before P V; the backward takes P z for dV and
// dP z for dS = P (dP z - delta).
// Merge (attention_merge): a grid-stride pass over out, then one over lse (merge_weights).
// With AttnShape::bf16_products and no dropout, attention_forward and attention_backward run the
// tensor-core kernels of attention_tc.cu instead (the backward after the same delta kernel), on
// fp32 or bf16 tensors (the bf16 ops; elsewhere those run these kernels on widened copies).
#include <cstdint>
#include <type_traits>

#include "mtron/core/error.h"
#include "mtron/kernels/cuda/attention_tiles.cuh"
#include "mtron/kernels/cuda/common.cuh"
#include "mtron/kernels/cuda/cuda_ops.h"
#include "mtron/kernels/cuda/sdpa_graph.h"

namespace mtron::kernels::cuda {
namespace {

constexpr int kT = 32;         // queries and keys per tile
constexpr int kThreads = 128;  // 4 per tile row
constexpr int kPerThread = kT / 4;
constexpr int kPs = kT + 4;  // row stride of the P / dS tiles (float4 rows on distinct banks)

// The row stride of the Q/K/V/dO tiles: the head dim padded, + 4.
__host__ __device__ __forceinline__ int tile_ld(int64_t D) {
  return padded_d(D) + 4;
}

__device__ __forceinline__ float4 ld4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}
__device__ __forceinline__ float dot4(float4 a, float4 b, float acc) {
  return fmaf(a.w, b.w, fmaf(a.z, b.z, fmaf(a.y, b.y, fmaf(a.x, b.x, acc))));
}
// acc[0..3] += s v
__device__ __forceinline__ void axpy4(float* acc, float s, float4 v) {
  acc[0] = fmaf(s, v.x, acc[0]);
  acc[1] = fmaf(s, v.y, acc[1]);
  acc[2] = fmaf(s, v.z, acc[2]);
  acc[3] = fmaf(s, v.w, acc[3]);
}
__device__ __forceinline__ float elem(float4 v, int i) {
  return i == 0 ? v.x : (i == 1 ? v.y : (i == 2 ? v.z : v.w));
}

// The tile row stride of a call: max(D, Dv) padded, + 4.
__host__ __device__ __forceinline__ int tile_ld(const AttnShape& s) {
  return tile_ld(s.D > s.Dv ? s.D : s.Dv);
}
// Zs[r][c] (row stride kPs) = the dropout multiplier of query i0 + r and key j0 + c of head h,
// batch b (core/philox_inline.h, the CPU's function): each thread draws one run of kPerThread
// consecutive keys of one row (two or three Philox blocks).
__device__ __forceinline__ void dropout_tile(
    float* Zs, const AttnDropout& d, int64_t b, int64_t h, int64_t i0, int64_t j0) {
  const int r = int(threadIdx.x) / 4, c0 = int(threadIdx.x) % 4 * kPerThread;
  dropout_scales(Zs + r * kPs + c0, d.key, d.row_index(b, h, i0 + r) + uint64_t(j0 + c0), 1,
                 kPerThread, d.p);
}

// Loads kT rows of a [rows, .., D] tensor into a tile with row stride ld, the columns padded
// with zeros to padded_d(D); rows at or beyond n_rows read as zeros. Row t of the tile is
// src + row_offset(first + t).
template <typename RowOffset>
__device__ __forceinline__ void load_tile(float* tile,
                                          int ld,
                                          const float* src,
                                          int64_t first,
                                          int64_t n_rows,
                                          int D,
                                          RowOffset row_offset) {
  const int Dp = padded_d(D);
  for (int e = int(threadIdx.x); e < kT * Dp; e += kThreads) {
    const int t = e / Dp, d = e % Dp;
    const int64_t row = first + t;
    tile[t * ld + d] = (row < n_rows && d < D) ? src[row_offset(row) + d] : 0.0f;
  }
}
// The tile of query rows i0.. of head h, batch b of q (out = false: head dim D) or of out, dout
// (head dim Dv).
__device__ __forceinline__ void load_q_tile(float* tile,
                                            int ld,
                                            const float* src,
                                            int64_t i0,
                                            const AttnShape& s,
                                            int64_t b,
                                            int64_t h,
                                            bool out) {
  load_tile(tile, ld, src, i0, s.Sq, int(out ? s.Dv : s.D),
            [&](int64_t row) { return out ? s.o_at(row, b, h) : s.q_at(row, b, h); });
}
// The tile of key rows j0.. of group g, batch b of a tensor of head dim D (k, v).
__device__ __forceinline__ void load_kv_tile(float* tile,
                                             int ld,
                                             const float* src,
                                             int64_t j0,
                                             const AttnShape& s,
                                             int64_t b,
                                             int64_t g,
                                             int64_t D) {
  load_tile(tile, ld, src, j0, s.Sk, int(D), [&](int64_t row) { return s.kv_at(row, b, g, D); });
}

// sc[u] = a . A[sub + 4 u] over D4 float4 columns, a one tile row, A a tile of row stride ld:
// the dot products of a row with the 8 rows of the other tile this thread takes (the scores,
// and in the backward dP = dO V^T).
__device__ __forceinline__ void row_dots(
    float* sc, const float* a, const float* A, int ld, int D4, int sub) {
  MT_UNROLL
  for (int u = 0; u < kPerThread; ++u) sc[u] = 0;
  for (int d4 = 0; d4 < D4; ++d4) {
    const float4 ad = ld4(a + 4 * d4);
    MT_UNROLL
    for (int u = 0; u < kPerThread; ++u)
      sc[u] = dot4(ad, ld4(A + (sub + 4 * u) * ld + 4 * d4), sc[u]);
  }
}

// out[c] (+)= acc[..] for the columns 16 u + 4 sub + e < D this thread owns.
template <int kMaxD, typename F>
__device__ __forceinline__ void for_owned_columns(int sub, int D, F f) {
  MT_UNROLL
  for (int u = 0; u < kMaxD / 16; ++u) MT_UNROLL
  for (int e = 0; e < 4; ++e) {
    const int c = 16 * u + 4 * sub + e;
    if (c < D) f(c, 4 * u + e);
  }
}

// acc[..] += sum over the tile's kT rows jj of w[jj] * tile[jj][cols this thread owns]: the
// forward's O += P V and the backward's dQ += dS K (w: one row of the P / dS tile).
template <int kMaxD>
__device__ __forceinline__ void accumulate_rows(
    float* acc, const float* w, const float* tile, int ld, int Dp, int sub) {
  for (int jj = 0; jj < kT; jj += 4) {
    const float4 w4 = ld4(w + jj);
    MT_UNROLL
    for (int e = 0; e < 4; ++e) {
      const float x = elem(w4, e);
      MT_UNROLL
      for (int u = 0; u < kMaxD / 16; ++u)
        if (16 * u < Dp) axpy4(acc + 4 * u, x, ld4(tile + (jj + e) * ld + 16 * u + 4 * sub));
    }
  }
}

template <int kMaxD>
__global__ void __launch_bounds__(kThreads) attention_forward_kernel(float* out,
                                                                     float* lse,
                                                                     const float* q,
                                                                     const float* k,
                                                                     const float* v,
                                                                     AttnShape s,
                                                                     AttnMask mask) {
  MT_DYNAMIC_SMEM(smem_raw);
  const int Dv = int(s.Dv), Dvp = padded_d(s.Dv), ld = tile_ld(s), D4 = padded_d(s.D) / 4;
  float* Qs = reinterpret_cast<float*>(smem_raw);  // [kT][ld]
  float* KVs = Qs + kT * ld;                       // [kT][ld]: the K tile, then the V tile
  float* Ps = KVs + kT * ld;                       // [kT][kPs]
  float* Zs = Ps + kT * kPs;                       // [kT][kPs], with dropout
  const bool drop = mask.dropout.p > 0;
  const int r = int(threadIdx.x) / 4, sub = int(threadIdx.x) % 4;
  const int64_t b = blockIdx.y / s.H, h = blockIdx.y % s.H, g = h / (s.H / s.G);
  const int64_t i0 = int64_t(blockIdx.x) * kT, i = i0 + r;

  load_q_tile(Qs, ld, q, i0, s, b, h, false);
  const int64_t i1 = i0 + kT < s.Sq ? i0 + kT : s.Sq;
  const int64_t kv_end = key_end(s, mask, i1);

  float m_i = kNegInf, l_i = 0;
  float acc[kMaxD / 4];
  MT_UNROLL
  for (int u = 0; u < kMaxD / 4; ++u) acc[u] = 0;

  for (int64_t j0 = 0; j0 < kv_end; j0 += kT) {
    __syncthreads();  // the previous tile's V, P and z are no longer read (and Q is loaded)
    load_kv_tile(KVs, ld, k, j0, s, b, g, s.D);
    if (drop) dropout_tile(Zs, mask.dropout, b, h, i0, j0);
    __syncthreads();
    float sc[kPerThread];
    row_dots(sc, Qs + r * ld, KVs, ld, D4, sub);
    float tmax = kNegInf;
    MT_UNROLL
    for (int u = 0; u < kPerThread; ++u) {
      const int64_t j = j0 + sub + 4 * u;
      sc[u] = (j < s.Sk && visible(mask, i, j)) ? sc[u] * s.scale : kNegInf;
      tmax = fmaxf(tmax, sc[u]);
    }
    // the row's 4 threads are adjacent lanes of one warp
    tmax = quad_max(tmax);
    const float m_new = fmaxf(m_i, tmax);
    const float alpha = m_i == kNegInf ? 0.0f : expf(m_i - m_new);
    float psum = 0;
    MT_UNROLL
    for (int u = 0; u < kPerThread; ++u) {
      const int jj = sub + 4 * u;
      const float p = sc[u] == kNegInf ? 0.0f : expf(sc[u] - m_new);
      Ps[r * kPs + jj] = drop ? p * Zs[r * kPs + jj] : p;
      psum += p;
    }
    psum = quad_sum(psum);
    l_i = l_i * alpha + psum;
    m_i = m_new;
    MT_UNROLL
    for (int u = 0; u < kMaxD / 4; ++u) acc[u] *= alpha;
    __syncthreads();  // K is no longer read; P is complete
    load_kv_tile(KVs, ld, v, j0, s, b, g, s.Dv);
    __syncthreads();
    accumulate_rows<kMaxD>(acc, Ps + r * kPs, KVs, ld, Dvp, sub);
  }

  if (i < s.Sq) {
    float* o = out + s.o_at(i, b, h);
    const float inv = l_i > 0 ? 1.0f / l_i : 0.0f;
    for_owned_columns<kMaxD>(sub, Dv, [&](int c, int a) { o[c] = acc[a] * inv; });
    if (sub == 0) lse[stat_at(s, b, h, i)] = l_i > 0 ? m_i + logf(l_i) : kNegInf;
  }
}

// delta[b, h, i] = dO . O over the row; one warp per (i, b, h) row (rows in q's order).
template <typename T>
__global__ void attention_delta_kernel(float* delta, const T* dout, const T* out, AttnShape s) {
  const int64_t rows = s.Sq * s.B * s.H;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; row < rows;
       row += warps) {
    const T* a = dout + row * s.Dv;
    const T* o = out + row * s.Dv;
    float acc = 0;
    for (int64_t d = threadIdx.x % 32; d < s.Dv; d += 32)
      acc = fmaf(load_f32(a + d), load_f32(o + d), acc);
    acc = warp_sum(acc);
    if (threadIdx.x % 32 == 0) {
      const int64_t h = row % s.H, b = (row / s.H) % s.B, i = row / (s.H * s.B);
      delta[stat_at(s, b, h, i)] = acc;
    }
  }
}

template <int kMaxD>
__global__ void __launch_bounds__(kThreads)
    attention_dkdv_kernel(BwdTensors<float> t, AttnShape s, AttnMask mask) {
  MT_DYNAMIC_SMEM(smem_raw);
  const int D = int(s.D), Dp = padded_d(s.D), Dv = int(s.Dv), Dvp = padded_d(s.Dv);
  const int ld = tile_ld(s);
  float* Ks = reinterpret_cast<float*>(smem_raw);  // [kT][ld]
  float* Vs = Ks + kT * ld;                        // [kT][ld]
  float* Qs = Vs + kT * ld;                        // [kT][ld]
  float* dOs = Qs + kT * ld;                       // [kT][ld]
  float* Ps = dOs + kT * ld;                       // [kT keys][kPs]: P^T
  float* dSs = Ps + kT * kPs;                      // [kT keys][kPs]: dS^T
  float* lse_s = dSs + kT * kPs;                   // [kT]
  float* delta_s = lse_s + kT;                     // [kT]
  float* Zs = delta_s + kT;                        // [kT queries][kPs], with dropout
  const bool drop = mask.dropout.p > 0;
  const int jj = int(threadIdx.x) / 4, sub = int(threadIdx.x) % 4;
  const int64_t hpg = s.H / s.G;
  const int64_t b = blockIdx.y / s.G, g = blockIdx.y % s.G;
  const int64_t j0 = int64_t(blockIdx.x) * kT, j = j0 + jj;

  load_kv_tile(Ks, ld, t.k, j0, s, b, g, s.D);
  load_kv_tile(Vs, ld, t.v, j0, s, b, g, s.Dv);

  float dk_acc[kMaxD / 4], dv_acc[kMaxD / 4];
  MT_UNROLL
  for (int u = 0; u < kMaxD / 4; ++u) dk_acc[u] = dv_acc[u] = 0;

  // Queries that can see key j0 or later: i + offset >= j0.
  int64_t i_begin = 0;
  if (mask.causal && j0 - mask.offset > 0) i_begin = (j0 - mask.offset) / kT * kT;

  for (int64_t hh = 0; hh < hpg; ++hh) {
    const int64_t h = g * hpg + hh;
    for (int64_t i0 = i_begin; i0 < s.Sq; i0 += kT) {
      __syncthreads();  // the previous tiles are no longer read (and K, V are loaded)
      load_q_tile(Qs, ld, t.q, i0, s, b, h, false);
      load_q_tile(dOs, ld, t.dout, i0, s, b, h, true);
      if (threadIdx.x < kT) {
        const int64_t i = i0 + threadIdx.x;
        lse_s[threadIdx.x] = i < s.Sq ? t.lse[stat_at(s, b, h, i)] : kNegInf;
        delta_s[threadIdx.x] = i < s.Sq ? t.delta[stat_at(s, b, h, i)] : 0.0f;
      }
      if (drop) dropout_tile(Zs, mask.dropout, b, h, i0, j0);
      __syncthreads();
      float sc[kPerThread], dp[kPerThread];
      row_dots(sc, Ks + jj * ld, Qs, ld, Dp / 4, sub);
      row_dots(dp, Vs + jj * ld, dOs, ld, Dvp / 4, sub);
      MT_UNROLL
      for (int u = 0; u < kPerThread; ++u) {
        const int rr = sub + 4 * u;
        const float p = prob(s, mask, i0 + rr, j, sc[u], lse_s[rr]);
        const float z = drop ? Zs[rr * kPs + jj] : 1.0f;
        Ps[jj * kPs + rr] = p * z;
        dSs[jj * kPs + rr] = p * (dp[u] * z - delta_s[rr]);
      }
      __syncwarp();  // a key's P and dS rows are written and read by its 4 threads (one warp)
      for (int rr = 0; rr < kT; rr += 4) {
        const float4 p4 = ld4(Ps + jj * kPs + rr), ds4 = ld4(dSs + jj * kPs + rr);
        MT_UNROLL
        for (int e = 0; e < 4; ++e) {
          const float p = elem(p4, e), ds = elem(ds4, e);
          MT_UNROLL
          for (int u = 0; u < kMaxD / 16; ++u) {
            const int col = 16 * u + 4 * sub;
            if (16 * u < Dvp) axpy4(dv_acc + 4 * u, p, ld4(dOs + (rr + e) * ld + col));
            if (16 * u < Dp) axpy4(dk_acc + 4 * u, ds, ld4(Qs + (rr + e) * ld + col));
          }
        }
      }
    }
  }

  if (j < s.Sk) {
    float* dkr = t.dk + s.kv_at(j, b, g, s.D);
    float* dvr = t.dv + s.kv_at(j, b, g, s.Dv);
    for_owned_columns<kMaxD>(sub, D, [&](int c, int a) { dkr[c] += dk_acc[a] * s.scale; });
    for_owned_columns<kMaxD>(sub, Dv, [&](int c, int a) { dvr[c] += dv_acc[a]; });
  }
}

template <int kMaxD>
__global__ void __launch_bounds__(kThreads)
    attention_dq_kernel(BwdTensors<float> t, AttnShape s, AttnMask mask) {
  MT_DYNAMIC_SMEM(smem_raw);
  const int D = int(s.D), Dp = padded_d(s.D), Dvp = padded_d(s.Dv), ld = tile_ld(s);
  float* Qs = reinterpret_cast<float*>(smem_raw);  // [kT][ld]
  float* dOs = Qs + kT * ld;                       // [kT][ld]
  float* Ks = dOs + kT * ld;                       // [kT][ld]
  float* Vs = Ks + kT * ld;                        // [kT][ld]
  float* dSs = Vs + kT * ld;                       // [kT][kPs]
  float* Zs = dSs + kT * kPs;                      // [kT][kPs], with dropout
  const bool drop = mask.dropout.p > 0;
  const int r = int(threadIdx.x) / 4, sub = int(threadIdx.x) % 4;
  const int64_t b = blockIdx.y / s.H, h = blockIdx.y % s.H, g = h / (s.H / s.G);
  const int64_t i0 = int64_t(blockIdx.x) * kT, i = i0 + r;

  load_q_tile(Qs, ld, t.q, i0, s, b, h, false);
  load_q_tile(dOs, ld, t.dout, i0, s, b, h, true);
  const float l = i < s.Sq ? t.lse[stat_at(s, b, h, i)] : kNegInf;
  const float dlt = i < s.Sq ? t.delta[stat_at(s, b, h, i)] : 0.0f;
  const int64_t i1 = i0 + kT < s.Sq ? i0 + kT : s.Sq;
  const int64_t kv_end = key_end(s, mask, i1);

  float dq_acc[kMaxD / 4];
  MT_UNROLL
  for (int u = 0; u < kMaxD / 4; ++u) dq_acc[u] = 0;

  for (int64_t j0 = 0; j0 < kv_end; j0 += kT) {
    __syncthreads();  // the previous K, V, dS and z are no longer read (and Q, dO are loaded)
    load_kv_tile(Ks, ld, t.k, j0, s, b, g, s.D);
    load_kv_tile(Vs, ld, t.v, j0, s, b, g, s.Dv);
    if (drop) dropout_tile(Zs, mask.dropout, b, h, i0, j0);
    __syncthreads();
    float sc[kPerThread], dp[kPerThread];
    row_dots(sc, Qs + r * ld, Ks, ld, Dp / 4, sub);
    row_dots(dp, dOs + r * ld, Vs, ld, Dvp / 4, sub);
    MT_UNROLL
    for (int u = 0; u < kPerThread; ++u) {
      const int jj = sub + 4 * u;
      const float z = drop ? Zs[r * kPs + jj] : 1.0f;
      dSs[r * kPs + jj] = prob(s, mask, i, j0 + jj, sc[u], l) * (dp[u] * z - dlt);
    }
    __syncwarp();  // a row's dS is written and read by its 4 threads (one warp)
    accumulate_rows<kMaxD>(dq_acc, dSs + r * kPs, Ks, ld, Dp, sub);
  }

  if (i < s.Sq) {
    float* dqr = t.dq + s.q_at(i, b, h);
    for_owned_columns<kMaxD>(sub, D, [&](int c, int a) { dqr[c] += dq_acc[a] * s.scale; });
  }
}

// Dynamic shared memory of each kernel, in bytes (the last kT x kPs floats: z, with dropout).
int z_tile(const AttnMask& m) {
  return m.dropout.p > 0 ? kT * kPs : 0;
}
size_t forward_smem(const AttnShape& s, const AttnMask& m) {
  return sizeof(float) * size_t(2 * kT * tile_ld(s) + kT * kPs + z_tile(m));
}
size_t dkdv_smem(const AttnShape& s, const AttnMask& m) {
  return sizeof(float) * size_t(4 * kT * tile_ld(s) + 2 * kT * kPs + 2 * kT + z_tile(m));
}
size_t dq_smem(const AttnShape& s, const AttnMask& m) {
  return sizeof(float) * size_t(4 * kT * tile_ld(s) + kT * kPs + z_tile(m));
}

// attention_merge in two grid-stride passes, so that no thread writes an lse another still reads:
// out first (each element from its row's two lse), then lse.
__global__ void attention_merge_out_kernel(
    float* out, const float* lse, const float* out_blk, const float* lse_blk, AttnShape s) {
  const int64_t n = s.Sq * s.B * s.H * s.Dv;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = e / s.Dv, i = row / (s.B * s.H), bh = row % (s.B * s.H);
    float w1, w2, l;
    if (merge_weights(lse[bh * s.Sq + i], lse_blk[bh * s.Sq + i], &w1, &w2, &l))
      out[e] = w1 * out[e] + w2 * out_blk[e];
  }
}

__global__ void attention_merge_lse_kernel(float* lse, const float* lse_blk, AttnShape s) {
  const int64_t n = s.B * s.H * s.Sq;
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < n;
       r += int64_t(gridDim.x) * blockDim.x) {
    float w1, w2, l;
    if (merge_weights(lse[r], lse_blk[r], &w1, &w2, &l)) lse[r] = l;
  }
}

constexpr int64_t kMaxHeadDim = 256;  // with_max_d's largest kMaxD

void check_shape(const AttnShape& s) {
  MT_CHECK(s.D <= kMaxHeadDim && s.Dv <= kMaxHeadDim, "attention on CUDA: head dims ", s.D, ", ",
           s.Dv, " (at most ", kMaxHeadDim, ")");
  MT_CHECK(s.B * s.H <= 65535 && s.B * s.G <= 65535,
           "attention on CUDA: batch x heads = ", s.B * s.H, " (at most 65535)");
}

// The tensor-core kernels take bf16 products without dropout (attention dropout stays on the
// fp32 kernels).
bool tensor_cores(const AttnShape& s, const AttnMask& m) {
  return s.bf16_products && m.dropout.p == 0;
}

}  // namespace

int64_t attention_max_head_dim() {
  return kMaxHeadDim;
}

void attention_forward(const Ctx& ctx, MT_PARAMS(attention_forward)) {
  if (s.B == 0 || s.Sq == 0) return;
  check_shape(s);
  const cudaStream_t st = stream_of(ctx);
  if (tensor_cores(s, mask) && attention_forward_tc(st, out, lse, q, k, v, s, mask)) return;
  with_max_d(s, [&](auto max_d) {
    constexpr int kMaxD = decltype(max_d)::value;
    const size_t smem = forward_smem(s, mask);
    allow_smem(attention_forward_kernel<kMaxD>, smem);
    launch("attention_forward", attention_forward_kernel<kMaxD>,
           dim3(unsigned((s.Sq + kT - 1) / kT), unsigned(s.B * s.H)), kThreads, smem, st, out, lse,
           q, k, v, s, mask);
  });
}

// delta = dO . O per query row, in `delta` (B H Sq floats).
template <typename T>
void delta_rows(cudaStream_t st, float* delta, const T* dout, const T* out, const AttnShape& s) {
  const int64_t rows = s.Sq * s.B * s.H;
  launch(sizeof(T) == 2 ? "attention_delta_bf16" : "attention_delta", attention_delta_kernel<T>,
         grid_for(rows * 32, 256), 256, 0, st, delta, dout, out, s);
}

void attention_backward(const Ctx& ctx, MT_PARAMS(attention_backward)) {
  if (s.B == 0 || s.Sq == 0 || s.Sk == 0) return;
  check_shape(s);
  const cudaStream_t st = stream_of(ctx);
  Scratch delta(sizeof(float) * size_t(s.B * s.H * s.Sq), st);
  delta_rows(st, delta.as<float>(), dout, out, s);
  const BwdTensors<float> t{dq, dk, dv, dout, q, k, v, lse, delta.as<float>()};
  if (tensor_cores(s, mask) && attention_backward_tc(st, t, s, mask)) return;
  with_max_d(s, [&](auto max_d) {
    constexpr int kMaxD = decltype(max_d)::value;
    const size_t smem_kv = dkdv_smem(s, mask), smem_q = dq_smem(s, mask);
    allow_smem(attention_dkdv_kernel<kMaxD>, smem_kv);
    allow_smem(attention_dq_kernel<kMaxD>, smem_q);
    launch("attention_dkdv", attention_dkdv_kernel<kMaxD>,
           dim3(unsigned((s.Sk + kT - 1) / kT), unsigned(s.B * s.G)), kThreads, smem_kv, st, t, s,
           mask);
    launch("attention_dq", attention_dq_kernel<kMaxD>,
           dim3(unsigned((s.Sq + kT - 1) / kT), unsigned(s.B * s.H)), kThreads, smem_q, st, t, s,
           mask);
  });
}

namespace {
// dst = src widened or rounded, n elements (none: no launch).
template <typename D, typename S>
void convert_some(const Ctx& ctx, D* dst, const S* src, int64_t n) {
  if (n > 0) cuda::convert(ctx, dst, src, n);
}
// q, k, v (dq, dk, dv) of one type into (from) the other's buffer w laid out as sp: the one
// buffer in the fused layout, else three.
template <typename D, typename S>
void convert_qkv(const Ctx& ctx, const QkvSpans& sp, D* q, D* k, D* v, const S* w) {
  convert_some(ctx, q, w, sp.n_q);
  convert_some(ctx, k, w + sp.k_at, sp.n_k);
  convert_some(ctx, v, w + sp.v_at, sp.n_v);
}
template <typename D, typename S>
void convert_qkv(const Ctx& ctx, const QkvSpans& sp, D* w, const S* q, const S* k, const S* v) {
  convert_some(ctx, w, q, sp.n_q);
  convert_some(ctx, w + sp.k_at, k, sp.n_k);
  convert_some(ctx, w + sp.v_at, v, sp.n_v);
}
}  // namespace

// bf16 tensors: cuDNN's fused attention runs the shapes it takes (sdpa_graph.h), the
// tensor-core kernels read and write the others; where those do not run (dropout, fp32
// products, too little shared memory) the fp32 kernels on widened copies, laid out as
// qkv_spans, the outputs rounded once.
void attention_forward(const Ctx& ctx, MT_PARAMS(attention_forward_bf16)) {
  if (s.B == 0 || s.Sq == 0) return;
  check_shape(s);
  const cudaStream_t st = stream_of(ctx);
  if (tensor_cores(s, mask))
    for (auto* run : {&attention_forward_cudnn, &attention_forward_tc<uint16_t>})
      if (run(st, bits(out), lse, bits(q), bits(k), bits(v), s, mask)) return;
  const QkvSpans sp = qkv_spans(s);
  const int64_t no = s.Sq * s.B * s.H * s.Dv;
  Scratch wide(sizeof(float) * size_t(sp.size + no), st);
  float* w = wide.as<float>();
  convert_qkv(ctx, sp, w, q, k, v);
  cuda::attention_forward(ctx, w + sp.size, lse, w, w + sp.k_at, w + sp.v_at, s, mask);
  convert_some(ctx, out, w + sp.size, no);
}

void attention_backward(const Ctx& ctx, MT_PARAMS(attention_backward_bf16)) {
  if (s.B == 0 || s.Sq == 0 || s.Sk == 0) return;
  check_shape(s);
  const cudaStream_t st = stream_of(ctx);
  if (tensor_cores(s, mask) &&
      attention_backward_cudnn(st, bits(dq), bits(dk), bits(dv), bits(dout), bits(q), bits(k),
                               bits(v), bits(out), lse, s, mask))
    return;
  Scratch delta(sizeof(float) * size_t(s.B * s.H * s.Sq), st);
  delta_rows(st, delta.as<float>(), bits(dout), bits(out), s);
  const BwdTensors<uint16_t> t{bits(dq), bits(dk), bits(dv), bits(dout),       bits(q),
                               bits(k),  bits(v),  lse,      delta.as<float>()};
  if (tensor_cores(s, mask) && attention_backward_tc(st, t, s, mask)) return;
  const QkvSpans sp = qkv_spans(s);
  const int64_t no = s.Sq * s.B * s.H * s.Dv;
  Scratch wide(sizeof(float) * size_t(2 * sp.size + 2 * no), st);
  float *w = wide.as<float>(), *g = w + sp.size, *o = g + sp.size;
  convert_qkv(ctx, sp, w, q, k, v);
  convert_some(ctx, o, dout, no);
  convert_some(ctx, o + no, out, no);
  cuda::fill_zero(ctx, g, int64_t(sizeof(float)) * sp.size);
  cuda::attention_backward(ctx, g, g + sp.k_at, g + sp.v_at, o, w, w + sp.k_at, w + sp.v_at, o + no,
                           lse, s, mask);
  convert_qkv(ctx, sp, dq, dk, dv, g);
}

void attention_merge(const Ctx& ctx,
                     float* out,
                     float* lse,
                     const float* out_blk,
                     const float* lse_blk,
                     const AttnShape& s) {
  if (s.B * s.H * s.Sq == 0) return;
  const cudaStream_t st = stream_of(ctx);
  launch("attention_merge_out", attention_merge_out_kernel, grid_for(s.Sq * s.B * s.H * s.Dv, 256),
         256, 0, st, out, lse, out_blk, lse_blk, s);
  launch("attention_merge_lse", attention_merge_lse_kernel, grid_for(s.B * s.H * s.Sq, 256), 256, 0,
         st, lse, lse_blk, s);
}

}  // namespace mtron::kernels::cuda
