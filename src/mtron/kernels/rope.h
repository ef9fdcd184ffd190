// defines: qkv_split, qkv_merge_grad, mla_kv_split, mla_kv_merge_grad, rope_forward,
//          rope_backward
//
// Megatron's fused QKV projection writes, per token, the query groups one after another, each
// as [hpg query heads | 1 key head | 1 value head] of D channels (hpg = heads per group):
//   qkv[N, G, hpg + 2, D]
// qkv_split copies it into separate q[N, H, D], k[N, G, D], v[N, G, D] (H = G * hpg);
// qkv_merge_grad is its adjoint (writes dqkv; to a bf16 dqkv, the QKV GEMMs' input, the rounding
// of the fp32 values).
//
// Multi-latent attention's key and value heads: kv_up_proj writes, per token, each head as
// [Dn no-RoPE key channels | Dv value channels], kv[N, H, Dn + Dv], and every head shares the
// token's RoPE key kpe[N, Dr]. mla_kv_split writes k[N, H, Dn + Dr] = [kv's Dn | kpe] per head
// and v[N, H, Dv]; mla_kv_merge_grad is its adjoint: dkv per head from dk's first Dn channels
// and dv, and dkpe[N, Dr] = the sum over heads of dk's last Dr channels (both written).
//
// RoPE (rotate-half pairing as Megatron-Core's default and Hugging Face): for i < R/2 with
// R = rot_dim, inv_freq_i = RopeFreq::inv_freq(i, R), angle = pos * inv_freq_i (fp32),
// c = cos(angle) * mscale, s = sin(angle) * mscale,
//   x[i]       <- x[i] c - x[i + R/2] s
//   x[i + R/2] <- x[i + R/2] c + x[i] s
// With RopeFreq::interleaved (--rotary-interleaved) pair i is channels 2i and 2i + 1 instead.
// Channels >= R pass unchanged. In place over x[N, nh, D]; pos[N] is each token's position. With
// group > 0 the heads come in groups of `group` whose last head is left as it is: the fused QKV
// layout [N, G, hpg + 2, D] with nh = G (hpg + 2) and group = hpg + 2 rotates the query and key
// heads in place and not the value head (rope_rotates).
#pragma once

#include <cmath>
#include <cstdint>

#include "mtron/core/philox_inline.h"  // MT_HOST_DEVICE
#include "mtron/kernels/op.h"

namespace mtron::kernels {

// RoPE's frequencies. Plain RoPE (yarn_factor 1): inv_freq_i = 1 / base^(float(2i)/R) in fp32,
// as Megatron computes it, and mscale 1. YaRN (Megatron's YarnRotaryEmbedding, Hugging Face's
// "yarn" rope_scaling) blends that extrapolated frequency e_i with the interpolated one
// 1 / (factor base^(2i/R)) by the linear ramp r_i = clamp((i - low) / (high - low), 0, 1) over
// the correction range [low, high] (high + 0.001 when equal): with m_i = 1 - r_i,
// inv_freq_i = interpolated (1 - m_i) + e_i m_i, Megatron's expression; cos and sin are
// multiplied by mscale (YaRN's concentration factor). Llama 3.x's scaling (llama3_factor > 0:
// Megatron's RotaryEmbedding._apply_scaling, Hugging Face's "llama3" rope_type, with their
// constants: low and high frequency factors 1 and 4, an original context of 8192) keeps the
// plain frequencies of wavelengths below 8192 / 4, divides those above 8192 by the factor and
// blends the two between, in PyTorch's fp32 operations in PyTorch's order (scalar / tensor is
// the tensor's reciprocal times the scalar; each product rounded to fp32 before a sum, so no
// backend's contraction into a fused multiply-add changes it). The one formula of every backend.
struct RopeFreq {
  float base = 10000.0f;
  float yarn_factor = 1.0f;  // 1: plain RoPE
  float ramp_low = 0.0f, ramp_high = 0.0f;
  float mscale = 1.0f;
  float llama3_factor = 0.0f;  // 0: no Llama 3.x scaling
  bool interleaved = false;    // pairs (2i, 2i + 1) instead of (i, i + R/2)
  // The channels of pair i: (pair_first(i), pair_first(i) + pair_step(R)).
  MT_HOST_DEVICE int64_t pair_first(int64_t i) const { return interleaved ? 2 * i : i; }
  MT_HOST_DEVICE int64_t pair_step(int64_t R) const { return interleaved ? 1 : R / 2; }
  MT_HOST_DEVICE static float mul(float a, float b) { return float(double(a) * double(b)); }
  MT_HOST_DEVICE float llama3(float f) const {
    const float wavelen = mul(1.0f / f, 6.2831855f);  // 2 pi / f as PyTorch computes it
    const float scaled = wavelen > 8192.0f ? f / llama3_factor : f;
    if (wavelen < 2048.0f || wavelen > 8192.0f) return scaled;
    const float smooth = (mul(1.0f / wavelen, 8192.0f) - 1.0f) / 3.0f;
    return mul(1.0f - smooth, scaled) / llama3_factor + mul(smooth, scaled);
  }
  MT_HOST_DEVICE float inv_freq(int64_t i, int64_t R) const {
    // base^e as a double power rounded once to fp32, the same value on every backend (CUDA's
    // powf may be 2 ulp off glibc's; far positions' angles turn that into visible differences)
    const float p = float(pow(double(base), double(float(2 * i) / float(R))));
    if (llama3_factor > 0.0f) return llama3(1.0f / p);
    if (yarn_factor == 1.0f) return 1.0f / p;
    const float high = ramp_high == ramp_low ? ramp_high + 0.001f : ramp_high;
    const float ramp = fminf(fmaxf((float(i) - ramp_low) / (high - ramp_low), 0.0f), 1.0f);
    const float m = 1.0f - ramp;
    // the blend's products are exact in double and its sum rounded once, so no backend's
    // contraction into a fused multiply-add changes it
    return float(double(1.0f / (yarn_factor * p)) * double(1.0f - m) +
                 double(1.0f / p) * double(m));
  }
};

// Whether rope rotates head h of a row (header comment).
MT_HOST_DEVICE inline bool rope_rotates(int64_t h, int64_t group) {
  return group == 0 || h % group != group - 1;
}

// rope_backward: the adjoint (rotation by -angle), in place over dx.
#define MT_PARAMS_qkv_split \
  (float* q, float* k, float* v, const float* qkv, int64_t N, int64_t G, int64_t hpg, int64_t D)
#define MT_PARAMS_qkv_merge_grad_of(T)                                                             \
  (T * dqkv, const float* dq, const float* dk, const float* dv, int64_t N, int64_t G, int64_t hpg, \
   int64_t D)
#define MT_PARAMS_qkv_merge_grad MT_PARAMS_qkv_merge_grad_of(float)
#define MT_PARAMS_qkv_merge_grad_bf16 MT_PARAMS_qkv_merge_grad_of(bf16)
#define MT_PARAMS_mla_kv_split                                                              \
  (float* k, float* v, const float* kv, const float* kpe, int64_t N, int64_t H, int64_t Dn, \
   int64_t Dr, int64_t Dv)
#define MT_PARAMS_mla_kv_merge_grad                                                             \
  (float* dkv, float* dkpe, const float* dk, const float* dv, int64_t N, int64_t H, int64_t Dn, \
   int64_t Dr, int64_t Dv)
// rope_forward / rope_backward of fp32 or bf16 x (T); bf16 is rotated in fp32 and rounded once.
#define MT_PARAMS_rope_forward_of(T)                                                         \
  (T * x, const int32_t* pos, int64_t N, int64_t nh, int64_t D, int64_t rot_dim, RopeFreq f, \
   int64_t group)
#define MT_PARAMS_rope_backward_of(T)                                                         \
  (T * dx, const int32_t* pos, int64_t N, int64_t nh, int64_t D, int64_t rot_dim, RopeFreq f, \
   int64_t group)
#define MT_PARAMS_rope_forward MT_PARAMS_rope_forward_of(float)
#define MT_PARAMS_rope_forward_bf16 MT_PARAMS_rope_forward_of(bf16)
#define MT_PARAMS_rope_backward MT_PARAMS_rope_backward_of(float)
#define MT_PARAMS_rope_backward_bf16 MT_PARAMS_rope_backward_of(bf16)
#define MTRON_ROPE_OPS(OP)                                                                    \
  OP(void, qkv_split, qkv_split, qkv_split_contract, MT_PARAMS_qkv_split,                     \
     (q, k, v, qkv, N, G, hpg, D))                                                            \
  OP(void, qkv_merge_grad, qkv_merge_grad, qkv_merge_grad_contract, MT_PARAMS_qkv_merge_grad, \
     (dqkv, dq, dk, dv, N, G, hpg, D))                                                        \
  OP(void, qkv_merge_grad, qkv_merge_grad_bf16, qkv_merge_grad_contract,                      \
     MT_PARAMS_qkv_merge_grad_bf16, (dqkv, dq, dk, dv, N, G, hpg, D))                         \
  OP(void, mla_kv_split, mla_kv_split, mla_kv_split_contract, MT_PARAMS_mla_kv_split,         \
     (k, v, kv, kpe, N, H, Dn, Dr, Dv))                                                       \
  OP(void, mla_kv_merge_grad, mla_kv_merge_grad, mla_kv_merge_grad_contract,                  \
     MT_PARAMS_mla_kv_merge_grad, (dkv, dkpe, dk, dv, N, H, Dn, Dr, Dv))                      \
  OP(void, rope_forward, rope_forward, rope_contract, MT_PARAMS_rope_forward,                 \
     (x, pos, N, nh, D, rot_dim, f, group))                                                   \
  OP(void, rope_forward, rope_forward_bf16, rope_contract, MT_PARAMS_rope_forward_bf16,       \
     (x, pos, N, nh, D, rot_dim, f, group))                                                   \
  OP(void, rope_backward, rope_backward, rope_contract, MT_PARAMS_rope_backward,              \
     (dx, pos, N, nh, D, rot_dim, f, group))                                                  \
  OP(void, rope_backward, rope_backward_bf16, rope_contract, MT_PARAMS_rope_backward_bf16,    \
     (dx, pos, N, nh, D, rot_dim, f, group))
MTRON_ROPE_OPS(MT_OP_DECLARE)

}  // namespace mtron::kernels
