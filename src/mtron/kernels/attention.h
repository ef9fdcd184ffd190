// defines: AttnDropout, AttnMask, attention_forward, attention_backward, merge_weights,
//          attention_merge, attention_max_head_dim, QkvViews, fused_qkv_views, QkvSpans, qkv_spans
//
// Scaled dot-product attention with grouped query heads, tiled with an online softmax, so the
// memory per head is O(S) (the S x S score matrix never exists). Layout, sequence-major as
// Megatron's [s, b, h]:
//   q[Sq, B, H, D], k[Sk, B, G, D], v[Sk, B, G, Dv], out[Sq, B, H, Dv], lse[B, H, Sq]
// or, with AttnShape::fused_qkv, q, k and v (and dq, dk, dv) as views of the QKV projection's
// output [S, B, G, H / G + 2, D] (per group its H / G query heads, its key head, its value head),
// read and written where they lie, with no split or merge copy.
// Query head h reads key/value group h / (H / G). The value head dim Dv may differ from the
// query/key head dim D (multi-latent attention: D = qk_head_dim + qk_pos_emb_head_dim, Dv =
// v_head_dim); every kernel works on each tensor at its own width, nothing is padded to the other.
// Forward saves lse (log-sum-exp of the scaled scores per query row) for backward; a fully masked
// row gives out = 0 and lse = -inf. Backward recomputes the scores blockwise from q, k and lse, and
// ACCUMULATES into dq, dk, dv
// (+=), so ring attention (context parallelism) can sum contributions of several K/V blocks.
// The bf16 ops (attention_forward_bf16, attention_backward_bf16) take q, k, v, out, dout in bf16
// and write out in bf16 (lse stays fp32); their backward WRITES dq, dk, dv (=, rounded once from
// fp32 sums), so a caller that sums blocks (ring attention) keeps the fp32 ops.
//
// Attention dropout (mask.dropout.p > 0): the probabilities P_ij = exp(s_ij - lse_i)
// are multiplied by z_ij (0 or 1/(1-p), core/philox.h dropout_scales) before P V; the softmax
// statistics (m, l, lse) are those of the undropped P. z_ij is element
//   ((b0 + b) H + h0 + h) S + q0 + i) S + k0 + j
// of the key's stream: indexed by global sample, head, query and key position, so every
// layout (TP heads, CP chunks, DP samples) drops what the 1-process run drops. Backward as
// FlashAttention's: dV += (P z)^T dO, dP = (dO V^T) z, dS = P (dP - Delta) with Delta = dO . O.
//
// attention_merge combines two results of the same queries against disjoint sets of keys (ring
// attention's blocks, parallel/ring_attention.h) into the result against their union, per query
// row: lse' = log(e^lse + e^lse_blk), out = e^(lse - lse') out + e^(lse_blk - lse') out_blk, the
// online-softmax step. A row that sees no key in either (both lse -inf) keeps out = 0, lse = -inf.
#pragma once

#include <cmath>
#include <cstdint>

#include "mtron/core/dtype.h"
#include "mtron/core/philox.h"
#include "mtron/kernels/op.h"

namespace mtron::kernels {

// Which probabilities are dropped (header comment): p = 0, none. Local sequence b, head h,
// query i and key j are global sample b0 + b, head h0 + h (of H), positions q0 + i and k0 + j
// (of S).
struct AttnDropout {
  float p = 0.0f;
  PhiloxKey key{0, 0};
  int64_t b0 = 0, h0 = 0, H = 0, q0 = 0, k0 = 0, S = 0;
  // Element index of (b, h, i, j = 0) in the key's stream.
  MT_HOST_DEVICE uint64_t row_index(int64_t b, int64_t h, int64_t i) const {
    return uint64_t((((b0 + b) * H + h0 + h) * S + q0 + i) * S + k0);
  }
};

// Key j is visible to query i iff !causal || j <= i + offset. Standard causal: {true, 0}.
struct AttnMask {
  bool causal = true;
  int64_t offset = 0;
  AttnDropout dropout{};
};

struct AttnShape {
  int64_t B, Sq, Sk, H, G, D, Dv;  // D: query/key head dim, Dv: value (and output) head dim
  float scale;                     // usually 1/sqrt(D)
  // The matrix products may round their operands (q, k, v, dout, P, dS) to bf16 and accumulate
  // in fp32, as bf16 training does: CUDA then runs the tensor-core kernels (without attention
  // dropout); the CPU computes in fp32 either way. Softmax statistics and outputs stay fp32.
  bool bf16_products = false;
  // q, k, v, dq, dk, dv in the fused QKV layout (header comment): k and v point H / G and
  // H / G + 1 heads past q (dk, dv past dq); needs Sq == Sk and D == Dv.
  bool fused_qkv = false;
  // CUDA, bf16 products: mtron's own tensor-core kernels even where cuDNN's fused attention
  // takes the shape (--attention-backend flash; kernels/cuda/sdpa_graph.h).
  bool own_kernels = false;
  // CUDA, cuDNN: the backward may accumulate dq over key blocks by fp32 atomic additions (cuDNN's
  // faster path on Hopper; the order of the additions, and so dq's last bits, vary from run to
  // run). Off by default: the deterministic graph writes dq by one product per row block.
  bool nondeterministic = false;

  // Offset of (position 0, sequence b, head h) in q and dq, and the stride between positions.
  MT_HOST_DEVICE int64_t q_off(int64_t b, int64_t h) const {
    const int64_t hpg = H / G;
    return fused_qkv ? ((b * G + h / hpg) * (hpg + 2) + h % hpg) * D : (b * H + h) * D;
  }
  MT_HOST_DEVICE int64_t q_step() const { return B * (fused_qkv ? G * (H / G + 2) : H) * D; }
  // The same of group g in k, dk (width D) or v, dv (width Dv).
  MT_HOST_DEVICE int64_t kv_off(int64_t b, int64_t g, int64_t width) const {
    return (b * G + g) * (fused_qkv ? (H / G + 2) * D : width);
  }
  MT_HOST_DEVICE int64_t kv_step(int64_t width) const {
    return B * G * (fused_qkv ? (H / G + 2) * D : width);
  }
  // Offsets of query row i of head h, batch b in q, dq and in out, dout, and of key row j of
  // group g in k, dk (width D) or v, dv (width Dv).
  MT_HOST_DEVICE int64_t q_at(int64_t i, int64_t b, int64_t h) const {
    return q_off(b, h) + i * q_step();
  }
  MT_HOST_DEVICE int64_t o_at(int64_t i, int64_t b, int64_t h) const {
    return (b * H + h) * Dv + i * o_step();
  }
  MT_HOST_DEVICE int64_t o_step() const { return B * H * Dv; }  // between positions in out
  MT_HOST_DEVICE int64_t kv_at(int64_t j, int64_t b, int64_t g, int64_t width) const {
    return kv_off(b, g, width) + j * kv_step(width);
  }
};

// q, k, v (or dq, dk, dv) in a fused QKV buffer of H / G query heads per group and head dim D.
template <typename T>
struct QkvViews {
  T *q, *k, *v;
};
template <typename T>
QkvViews<T> fused_qkv_views(T* qkv, int64_t H, int64_t G, int64_t D) {
  return {qkv, qkv + H / G * D, qkv + (H / G + 1) * D};
}

// How q, k, v (or dq, dk, dv) of shape s lie in one buffer of `size` elements, k at k_at and v
// at v_at: in the fused QKV layout the buffer they view (n_q = size elements from q, none from k
// and v, which lie in it), else q, k, v one after another (n_q, n_k, n_v elements each).
struct QkvSpans {
  int64_t size, k_at, v_at, n_q, n_k, n_v;
};
inline QkvSpans qkv_spans(const AttnShape& s) {
  const int64_t nq = s.Sq * s.B * s.H * s.D, nk = s.Sk * s.B * s.G * s.D;
  const int64_t nv = s.Sk * s.B * s.G * s.Dv;
  if (!s.fused_qkv) return {nq + nk + nv, nq, nq + nk, nq, nk, nv};
  const int64_t hpg = s.H / s.G;
  return {nq + nk + nv, hpg * s.D, (hpg + 1) * s.D, nq + nk + nv, 0, 0};
}

// attention_merge's weights of a query row with log-sum-exps l1 (accumulated) and l2 (block):
// *w1, *w2 and the merged *l; false (nothing written) when both are -inf. The one formula of
// the CPU and CUDA kernels.
MT_HOST_DEVICE inline bool merge_weights(float l1, float l2, float* w1, float* w2, float* l) {
  const float m = fmaxf(l1, l2);
  if (m == -INFINITY) return false;
  *l = m + logf(expf(l1 - m) + expf(l2 - m));
  *w1 = expf(l1 - *l);
  *w2 = expf(l2 - *l);
  return true;
}

// attention_backward: out and lse are the forward's (for ring attention: the final merged ones).
// T: float or bf16 (q, k, v, out, dout, dq, dk, dv; lse is fp32 in both).
#define MT_PARAMS_attention_forward_of(T) \
  (T * out, float* lse, const T* q, const T* k, const T* v, const AttnShape& s, AttnMask mask)
#define MT_PARAMS_attention_backward_of(T)                                                  \
  (T * dq, T * dk, T * dv, const T* dout, const T* q, const T* k, const T* v, const T* out, \
   const float* lse, const AttnShape& s, AttnMask mask)
#define MT_PARAMS_attention_forward MT_PARAMS_attention_forward_of(float)
#define MT_PARAMS_attention_forward_bf16 MT_PARAMS_attention_forward_of(bf16)
#define MT_PARAMS_attention_backward MT_PARAMS_attention_backward_of(float)
#define MT_PARAMS_attention_backward_bf16 MT_PARAMS_attention_backward_of(bf16)
// attention_merge: out[Sq, B, H, Dv], lse[B, H, Sq] merged with out_blk, lse_blk of the same
// shapes (s.Sk, s.G, s.D are not read).
#define MTRON_ATTENTION_OPS(OP)                                                                \
  OP(void, attention_forward, attention_forward, attention_forward_contract,                   \
     MT_PARAMS_attention_forward, (out, lse, q, k, v, s, mask))                                \
  OP(void, attention_forward, attention_forward_bf16, attention_forward_contract,              \
     MT_PARAMS_attention_forward_bf16, (out, lse, q, k, v, s, mask))                           \
  OP(void, attention_backward, attention_backward, attention_backward_contract,                \
     MT_PARAMS_attention_backward, (dq, dk, dv, dout, q, k, v, out, lse, s, mask))             \
  OP(void, attention_backward, attention_backward_bf16, attention_backward_contract,           \
     MT_PARAMS_attention_backward_bf16, (dq, dk, dv, dout, q, k, v, out, lse, s, mask))        \
  OP(void, attention_merge, attention_merge, attention_merge_contract,                         \
     (float* out, float* lse, const float* out_blk, const float* lse_blk, const AttnShape& s), \
     (out, lse, out_blk, lse_blk, s))
MTRON_ATTENTION_OPS(MT_OP_DECLARE)

// The largest head dim (D and Dv) the attention kernels of device d take: no limit on the CPU
// (INT64_MAX), 256 on CUDA (its tiles live in shared memory).
int64_t attention_max_head_dim(Device d);

}  // namespace mtron::kernels
