// defines: qkv_split, qkv_merge_grad, mla_kv_split, mla_kv_merge_grad, rope_forward,
//          rope_backward
//
// Megatron's fused QKV projection writes, per token, the query groups one after another, each
// as [hpg query heads | 1 key head | 1 value head] of D channels (hpg = heads per group):
//   qkv[N, G, hpg + 2, D]
// qkv_split copies it into separate q[N, H, D], k[N, G, D], v[N, G, D] (H = G * hpg);
// qkv_merge_grad is its adjoint (writes dqkv).
//
// Multi-latent attention's key and value heads: kv_up_proj writes, per token, each head as
// [Dn no-RoPE key channels | Dv value channels], kv[N, H, Dn + Dv], and every head shares the
// token's RoPE key kpe[N, Dr]. mla_kv_split writes k[N, H, Dn + Dr] = [kv's Dn | kpe] per head
// and v[N, H, Dv]; mla_kv_merge_grad is its adjoint: dkv per head from dk's first Dn channels
// and dv, and dkpe[N, Dr] = the sum over heads of dk's last Dr channels (both written).
//
// RoPE (rotate-half pairing as Megatron-Core's default and Hugging Face): for i < R/2 with
// R = rot_dim, inv_freq_i = base^(-2i/R), angle = pos * inv_freq_i (fp32),
//   x[i]       <- x[i] cos - x[i + R/2] sin
//   x[i + R/2] <- x[i + R/2] cos + x[i] sin
// Channels >= R pass unchanged. In place over x[N, nh, D]; pos[N] is each token's position.
#pragma once

#include <cstdint>

#include "mtron/kernels/op.h"

namespace mtron::kernels {

// rope_backward: the adjoint (rotation by -angle), in place over dx.
#define MT_PARAMS_qkv_split \
  (float* q, float* k, float* v, const float* qkv, int64_t N, int64_t G, int64_t hpg, int64_t D)
#define MT_PARAMS_qkv_merge_grad                                                         \
  (float* dqkv, const float* dq, const float* dk, const float* dv, int64_t N, int64_t G, \
   int64_t hpg, int64_t D)
#define MT_PARAMS_mla_kv_split                                                              \
  (float* k, float* v, const float* kv, const float* kpe, int64_t N, int64_t H, int64_t Dn, \
   int64_t Dr, int64_t Dv)
#define MT_PARAMS_mla_kv_merge_grad                                                             \
  (float* dkv, float* dkpe, const float* dk, const float* dv, int64_t N, int64_t H, int64_t Dn, \
   int64_t Dr, int64_t Dv)
#define MT_PARAMS_rope_forward \
  (float* x, const int32_t* pos, int64_t N, int64_t nh, int64_t D, int64_t rot_dim, float base)
#define MT_PARAMS_rope_backward \
  (float* dx, const int32_t* pos, int64_t N, int64_t nh, int64_t D, int64_t rot_dim, float base)
#define MTRON_ROPE_OPS(OP)                                                                       \
  OP(void, qkv_split, qkv_split, no_contract, MT_PARAMS_qkv_split, (q, k, v, qkv, N, G, hpg, D)) \
  OP(void, qkv_merge_grad, qkv_merge_grad, no_contract, MT_PARAMS_qkv_merge_grad,                \
     (dqkv, dq, dk, dv, N, G, hpg, D))                                                           \
  OP(void, mla_kv_split, mla_kv_split, no_contract, MT_PARAMS_mla_kv_split,                      \
     (k, v, kv, kpe, N, H, Dn, Dr, Dv))                                                          \
  OP(void, mla_kv_merge_grad, mla_kv_merge_grad, no_contract, MT_PARAMS_mla_kv_merge_grad,       \
     (dkv, dkpe, dk, dv, N, H, Dn, Dr, Dv))                                                      \
  OP(void, rope_forward, rope_forward, rope_contract, MT_PARAMS_rope_forward,                    \
     (x, pos, N, nh, D, rot_dim, base))                                                          \
  OP(void, rope_backward, rope_backward, rope_contract, MT_PARAMS_rope_backward,                 \
     (dx, pos, N, nh, D, rot_dim, base))
MTRON_ROPE_OPS(MT_OP_DECLARE)

}  // namespace mtron::kernels
