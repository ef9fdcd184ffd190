// defines: the contracts of the kernel ops (kernels/op.h): what every backend requires of an op's
//          arguments, and what a call costs (OpCost, core/profile.h), for `--profile`
//
// Included by dispatch.cpp only. Bytes count each tensor an op reads and each it writes once, at
// its type (a `+=` output twice): the traffic of a kernel that keeps its working set on chip.
// The minimum (OpCost::min_bytes) is the same work with activations (and their gradients) in
// bf16, the passes a GEMM epilogue takes (bias, bias gradient, GELU with its auxiliary output
// and dGELU) and the split/merge copies of the fused QKV projection at no cost, and conversions
// to a GEMM's input type at no cost; weights, gradients, optimizer state and statistics keep
// their fp32. FLOPs are those of GEMMs and attention (the others are memory-bound).
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "mtron/core/error.h"
#include "mtron/core/profile.h"
#include "mtron/kernels/ops.h"

namespace mtron::kernels {

// n floats, in bytes.
inline double f32s(int64_t n) {
  return 4.0 * double(n);
}
// Moving `act` bytes of fp32 activations (halved at the minimum) and `other` bytes that keep
// their type.
inline OpCost traffic(double act, double other = 0) {
  return {0, act + other, act / 2 + other};
}
// A pass the minimum does without (a conversion, a bias in a GEMM epilogue, a split copy).
inline OpCost avoidable(double bytes) {
  return {0, bytes, 0};
}

template <typename... A>
void unused(const A&...) {}

// fill_zero (written) and copy (read and written).
inline OpCost bytes_contract(const void*, int64_t bytes) {
  MT_ASSERT(bytes >= 0, "a negative byte count: ", bytes);
  return traffic(0, double(bytes));
}
inline OpCost bytes_contract(const void*, const void*, int64_t bytes) {
  return traffic(0, 2 * bytes_contract(nullptr, bytes).bytes);
}

inline OpCost copy_rows_contract(const void*,
                                 int64_t dst_pitch,
                                 const void*,
                                 int64_t src_pitch,
                                 int64_t row_bytes,
                                 int64_t rows) {
  MT_ASSERT(rows >= 0 && row_bytes >= 0 && dst_pitch >= row_bytes && src_pitch >= row_bytes,
            "copy_rows: ", rows, " rows of ", row_bytes, " bytes, pitches ", dst_pitch, " and ",
            src_pitch);
  return traffic(2.0 * double(row_bytes) * double(rows));
}

inline OpCost dropout_contract(const float*, const int32_t*, int64_t rows, const DropoutRows& d) {
  MT_ASSERT(rows >= 0 && d.width >= 0 && d.B >= 1 && d.p >= 0 && d.p < 1, "dropout: rows ", rows,
            " width ", d.width, " B ", d.B, " p ", d.p);
  return traffic(2 * f32s(rows * d.width), 4.0 * double(rows));
}

// ---- elementwise ----------------------------------------------------------------------------

inline OpCost add_contract(float*, const float*, const float*, int64_t n) {
  return traffic(3 * f32s(n));
}
inline OpCost scale_inplace_contract(float*, float, int64_t n) {
  return traffic(0, 2 * f32s(n));  // gradients
}
template <typename D, typename S>
OpCost convert_contract(D*, const S*, int64_t n) {
  return avoidable(double(n) * double(sizeof(D) + sizeof(S)));
}
inline OpCost bias_add_contract(float*, const float*, int64_t N, int64_t C) {
  return avoidable(2 * f32s(N * C) + f32s(C));
}
template <typename T>
OpCost bias_backward_contract(float*, const T*, int64_t N, int64_t C) {
  return avoidable(double(sizeof(T)) * double(N * C) + 2 * f32s(C));
}
inline OpCost bias_backward_narrow_contract(
    float*, const bf16*, const float*, int64_t N, int64_t C) {
  return avoidable(6.0 * double(N * C) + 2 * f32s(C));
}
inline OpCost sum_squares_contract(double*, const float*, int64_t n) {
  return traffic(0, f32s(n));
}
inline OpCost fill_contract(float*, float, int64_t n) {
  return traffic(0, f32s(n));
}

// ---- embedding, activations, norms ----------------------------------------------------------

inline OpCost embedding_forward_contract(
    float*, const int32_t*, const float*, int64_t N, int64_t C, int64_t, int64_t, bool acc) {
  return traffic((acc ? 2 : 1) * f32s(N * C), f32s(N * C) + f32s(N));
}
inline OpCost embedding_backward_contract(
    float*, const float*, const int32_t*, int64_t N, int64_t C, int64_t, int64_t rows) {
  return traffic(f32s(N * C), 2 * f32s(std::min(N, rows) * C) + f32s(N));
}
// With a GELU epilogue the GEMM also writes the pre-activation (bf16) that dGELU reads.
// The elementwise activations (GELU, squared ReLU).
template <typename T, typename I>
OpCost activation_forward_contract(T*, const I*, int64_t n) {
  return {0, double(sizeof(I) + sizeof(T)) * double(n), 2.0 * double(n)};
}
template <typename T, typename I>
OpCost activation_backward_contract(T*, const I*, const I*, int64_t n) {
  return {0, double(2 * sizeof(I) + sizeof(T)) * double(n), 2.0 * double(n)};
}
// gelu_backward to bf16 and bias_backward of its output; the minimum reads dout and the
// pre-activation as dGELU's epilogue does.
template <typename I>
OpCost gelu_backward_bias_contract(float*, bf16*, const I*, const I*, int64_t N, int64_t C) {
  return {0, double(2 * sizeof(I) + 2) * double(N * C) + 2 * f32s(C), 2.0 * double(N * C)};
}
// Reads [gate | up] (2F a row), writes F; the backward reads them and dout, writes 2F. The
// minimum: bf16 activations.
template <typename T>
OpCost swiglu_forward_contract(T*, const T*, int64_t N, int64_t F) {
  return {0, 3.0 * sizeof(T) * double(N * F), 6.0 * double(N * F)};
}
template <typename T>
OpCost swiglu_backward_contract(T*, const T*, const T*, int64_t N, int64_t F) {
  return {0, 5.0 * sizeof(T) * double(N * F), 10.0 * double(N * F)};
}
// out: fp32, or bf16 (the next GEMM's input); the minimum is the same for both.
inline OpCost norm_forward_cost(double out_bytes, int64_t N, int64_t C, double other) {
  return {0, f32s(N * C) + out_bytes + other, traffic(2 * f32s(N * C), other).min_bytes};
}
template <typename T>
OpCost layernorm_forward_contract(T* out,
                                  float* mean,
                                  float* rstd,
                                  const float* inp,
                                  const float* weight,
                                  const float* bias,
                                  int64_t N,
                                  int64_t C,
                                  float eps) {
  unused(out, mean, rstd, inp, weight, bias, eps);
  return norm_forward_cost(double(sizeof(T)) * double(N * C), N, C, 2 * f32s(C) + 2 * f32s(N));
}
inline OpCost layernorm_backward_contract(MT_PARAMS(layernorm_backward)) {
  unused(dinp, dweight, dbias, dout, inp, weight, mean, rstd);
  return traffic(4 * f32s(N * C), 5 * f32s(C) + 2 * f32s(N));  // dinp +=, weight grads +=
}
template <typename T>
OpCost rmsnorm_forward_contract(
    T* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C, float eps) {
  unused(out, rstd, inp, weight, eps);
  return norm_forward_cost(double(sizeof(T)) * double(N * C), N, C, f32s(C) + f32s(N));
}
inline OpCost rmsnorm_backward_contract(MT_PARAMS(rmsnorm_backward)) {
  unused(dinp, dweight, dout, inp, weight, rstd);
  return traffic(4 * f32s(N * C), 3 * f32s(C) + f32s(N));
}

// ---- GEMMs ----------------------------------------------------------------------------------

// 2 M N K FLOPs; bytes: both operands (at their type) and C (read too when beta != 0).
template <typename T>
OpCost gemm_contract(Trans ta,
                     Trans tb,
                     int64_t M,
                     int64_t N,
                     int64_t K,
                     float,
                     const T*,
                     int64_t lda,
                     const T*,
                     int64_t ldb,
                     float beta,
                     const float*,
                     int64_t ldc) {
  MT_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M=", M, " N=", N, " K=", K);
  MT_CHECK(lda >= std::max<int64_t>(1, ta == Trans::kN ? K : M), "gemm: lda=", lda, " too small");
  MT_CHECK(ldb >= std::max<int64_t>(1, tb == Trans::kN ? N : K), "gemm: ldb=", ldb, " too small");
  MT_CHECK(ldc >= std::max<int64_t>(1, N), "gemm: ldc=", ldc, " too small for N=", N);
  const double bytes =
      double(sizeof(T)) * double(M * K + K * N) + (beta != 0 ? 2 : 1) * f32s(M * N);
  return {2.0 * double(M) * double(N) * double(K), bytes, bytes};
}

// The GEMM with C write-only, and the bias and the residual read in its epilogue.
template <typename T>
OpCost gemm_bias_contract(Trans ta,
                          Trans tb,
                          int64_t M,
                          int64_t N,
                          int64_t K,
                          const T* A,
                          int64_t lda,
                          const T* B,
                          int64_t ldb,
                          float* C,
                          const float* bias,
                          const float* residual) {
  MT_CHECK(!residual || residual != C, "gemm_bias: the residual is the output C itself");
  OpCost c = gemm_contract(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
  const double extra = (bias ? f32s(N) : 0) + (residual ? f32s(M * N) : 0);
  c.bytes += extra;
  c.min_bytes += extra;
  return c;
}

// The bf16 C (and bias) at two bytes.
inline OpCost gemm_bias_to_bf16_contract(MT_PARAMS(gemm_bias_to_bf16)) {
  const OpCost c = gemm_contract(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, nullptr, N);
  const double bytes = c.bytes - f32s(M * N) + 2.0 * double(M * N) + (bias ? 2.0 * double(N) : 0);
  unused(C);
  return {c.flops, bytes, bytes};
}

// A bf16-output GEMM's cost c with GELU's bf16 input matrix pre [M, N] (the epilogue's aux
// matrix) written or read besides C.
inline OpCost with_gelu_aux(
    OpCost c, const char* op, const void* C, const void* pre, int64_t M, int64_t N) {
  MT_CHECK(pre && pre != C, op, ": pre is null or the output C itself");
  c.bytes += 2.0 * double(M * N);
  c.min_bytes = c.bytes;
  return c;
}
inline OpCost gemm_gelu_contract(MT_PARAMS(gemm_gelu)) {
  return with_gelu_aux(gemm_bias_to_bf16_contract(ta, tb, M, N, K, A, lda, B, ldb, C, bias),
                       "gemm_gelu", C, pre, M, N);
}
inline OpCost gemm_dgelu_contract(MT_PARAMS(gemm_dgelu)) {
  return with_gelu_aux(gemm_bias_to_bf16_contract(ta, tb, M, N, K, A, lda, B, ldb, C, nullptr),
                       "gemm_dgelu", C, pre, M, N);
}

inline OpCost gemm_fp8_contract(Trans ta,
                                Trans tb,
                                int64_t M,
                                int64_t N,
                                int64_t K,
                                float alpha,
                                const bf16* A,
                                Fp8Format fa,
                                int64_t lda,
                                const bf16* B,
                                Fp8Format fb,
                                int64_t ldb,
                                float beta,
                                const float* C,
                                int64_t ldc) {
  MT_CHECK(fa == Fp8Format::kE4M3 || fb == Fp8Format::kE4M3,
           "gemm_fp8: E5M2 x E5M2 has no FP8 GEMM (one operand must be E4M3)");
  return gemm_contract(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// ---- RoPE and the QKV layout ----------------------------------------------------------------

inline OpCost qkv_split_contract(MT_PARAMS(qkv_split)) {
  unused(q, k, v, qkv);
  return avoidable(2 * f32s(N * G * (hpg + 2) * D));
}
template <typename T>
OpCost qkv_merge_grad_contract(MT_PARAMS_OF(qkv_merge_grad, T)) {
  unused(dqkv, dq, dk, dv);
  return avoidable(double(4 + sizeof(T)) * double(N * G * (hpg + 2) * D));
}
inline OpCost mla_kv_split_contract(MT_PARAMS(mla_kv_split)) {
  unused(k, v, kv, kpe);
  return traffic(f32s(N * H * (Dn + Dv)) + f32s(N * Dr) + f32s(N * H * (Dn + Dr + Dv)));
}
inline OpCost mla_kv_merge_grad_contract(MT_PARAMS(mla_kv_merge_grad)) {
  unused(dkv, dkpe, dk, dv);
  return traffic(f32s(N * H * (Dn + Dv)) + f32s(N * Dr) + f32s(N * H * (Dn + Dr + Dv)));
}
// fp32 x is an activation; bf16 x is at the minimum already.
template <typename T>
OpCost rope_contract(const T*,
                     const int32_t*,
                     int64_t N,
                     int64_t nh,
                     int64_t D,
                     int64_t rot_dim,
                     RopeFreq f,
                     int64_t group) {
  MT_CHECK(rot_dim > 0 && rot_dim % 2 == 0 && rot_dim <= D, "rope: rot_dim=", rot_dim,
           " must be even and in (0, head dim ", D, "]");
  MT_CHECK(f.base > 0 && f.yarn_factor > 0, "rope: base ", f.base, " and YaRN factor ",
           f.yarn_factor, " must be positive");
  MT_CHECK(group >= 0 && (group == 0 || nh % group == 0), "rope: ", nh, " heads are not groups of ",
           group);
  const int64_t rotated = group == 0 ? nh : nh - nh / group;
  const double x = 2.0 * double(sizeof(T)) * double(N * rotated * rot_dim);
  return std::is_same_v<T, float> ? traffic(x, f32s(N)) : traffic(0, x + f32s(N));
}

// ---- attention ------------------------------------------------------------------------------

// Multiply-adds of QK^T (D) and PV (Dv), 2 FLOPs each, halved for the causal mask as Megatron
// counts; with bf16 products also OpCost::tensor_flops.
inline OpCost attention_flops(const AttnShape& s, AttnMask mask, double passes) {
  MT_CHECK(s.B >= 0 && s.Sq >= 0 && s.Sk >= 0 && s.D > 0 && s.Dv > 0 && s.G > 0 && s.H > 0 &&
               s.H % s.G == 0,
           "attention: bad shape B=", s.B, " Sq=", s.Sq, " Sk=", s.Sk, " H=", s.H, " G=", s.G,
           " D=", s.D, " Dv=", s.Dv, " (need H % G == 0)");
  MT_CHECK(!s.fused_qkv || (s.Sq == s.Sk && s.D == s.Dv),
           "attention: the fused QKV layout needs Sq == Sk and D == Dv (Sq=", s.Sq, " Sk=", s.Sk,
           " D=", s.D, " Dv=", s.Dv, ")");
  const double f =
      passes * 2.0 * double(s.B) * double(s.H) * double(s.Sq) * double(s.Sk) * double(s.D + s.Dv);
  const double flops = mask.causal ? f / 2 : f;
  return {flops, 0, 0, s.bf16_products ? flops : 0};
}
// The sizes of q (and dq), out (dout), k (dk), v (dv) of element type T and lse, in bytes.
struct AttnBytes {
  double q, o, k, v, lse;
};
template <typename T = float>
AttnBytes attn_bytes(const AttnShape& s) {
  const auto of = [](int64_t n) { return double(sizeof(T)) * double(n); };
  return {of(s.Sq * s.B * s.H * s.D), of(s.Sq * s.B * s.H * s.Dv), of(s.Sk * s.B * s.G * s.D),
          of(s.Sk * s.B * s.G * s.Dv), f32s(s.B * s.H * s.Sq)};
}
inline OpCost with_traffic(OpCost c, const OpCost& t) {
  c.bytes = t.bytes;
  c.min_bytes = t.min_bytes;
  return c;
}
// fp32 tensors are activations (traffic halves them at the minimum); bf16 ones are at it.
template <typename T>
OpCost attn_traffic(double tensors, double stats) {
  return std::is_same_v<T, float> ? traffic(tensors, stats) : traffic(0, tensors + stats);
}
template <typename T>
OpCost attention_forward_contract(MT_PARAMS_OF(attention_forward, T)) {
  unused(out, lse, q, k, v);
  const AttnBytes b = attn_bytes<T>(s);
  return with_traffic(attention_flops(s, mask, 1), attn_traffic<T>(b.q + b.k + b.v + b.o, b.lse));
}
// Reads dout, q, k, v, out, lse; delta written and read; dq, dk, dv: fp32 +=, bf16 written.
template <typename T>
OpCost attention_backward_contract(MT_PARAMS_OF(attention_backward, T)) {
  unused(dq, dk, dv, dout, q, k, v, out, lse);
  const AttnBytes b = attn_bytes<T>(s);
  const double grads = std::is_same_v<T, float> ? 3 : 2;
  return with_traffic(attention_flops(s, mask, 2),
                      attn_traffic<T>(grads * (b.q + b.k + b.v) + 2 * b.o, 3 * b.lse));
}
// Per query row: two multiply-adds per output element.
inline OpCost attention_merge_contract(
    const float*, const float*, const float*, const float*, const AttnShape& s) {
  MT_CHECK(s.B >= 0 && s.Sq >= 0 && s.H >= 0 && s.Dv >= 0, "attention_merge: bad shape B=", s.B,
           " Sq=", s.Sq, " H=", s.H, " Dv=", s.Dv);
  const AttnBytes b = attn_bytes(s);
  OpCost c = traffic(3 * b.o, 3 * b.lse);
  c.flops = 4.0 * double(s.B) * double(s.H) * double(s.Sq) * double(s.Dv);
  return c;
}

// ---- cross-entropy --------------------------------------------------------------------------

// fp32 logits are activations; bf16 ones are at the minimum already.
template <typename L>
double logit_bytes(const L*, int64_t n) {
  return double(sizeof(L)) * double(n);
}
template <typename L>
OpCost xent_stats_contract(MT_PARAMS_OF(xent_stats, L)) {
  unused(row_max, row_sumexp, target_logit, targets, col_start, vocab_valid);
  const OpCost c = traffic(f32s(n * Vl), 4 * f32s(n));
  return {0, c.bytes - f32s(n * Vl) + logit_bytes(logits, n * Vl), c.min_bytes};
}
inline OpCost xent_rescale_contract(MT_PARAMS(xent_rescale)) {
  unused(row_max, row_sumexp, global_max);
  return traffic(0, 5 * f32s(n));
}
inline OpCost xent_loss_sum_contract(MT_PARAMS(xent_loss_sum)) {
  unused(loss_sum, row_max, row_sumexp, target_logit);
  return traffic(0, (row_mask ? 4 : 3) * f32s(n));
}
template <typename T, typename L>
OpCost xent_backward_contract(MT_PARAMS_EXPAND(MT_PARAMS_xent_backward_in(T, L))) {
  unused(dlogits, targets, row_max, row_sumexp, row_scale, col_start, vocab_valid);
  const OpCost c = traffic(2 * f32s(n * Vl), 4 * f32s(n));
  const double b =
      c.bytes - double(4 - sizeof(T)) * double(n * Vl) - f32s(n * Vl) + logit_bytes(logits, n * Vl);
  return {0, b, c.min_bytes};
}

// ---- MoE ------------------------------------------------------------------------------------

// The router's tensors ([T, E] logits and scores, [T, k] choices) stay fp32; the token rows
// ([T k, h] permuted, [T, h] combined) are activations.
inline OpCost moe_route_contract(const int32_t*, const float*, const float*, const MoeRouting& r) {
  MT_CHECK(r.T >= 0 && r.k >= 1 && r.k <= r.E, "moe_route: need T >= 0 and 1 <= k <= E (T=", r.T,
           " k=", r.k, " E=", r.E, ")");
  return traffic(0, f32s(r.T * r.E) + 2 * f32s(r.T * r.k));
}
inline OpCost moe_aux_scores_contract(float*, const float*, const MoeRouting& r) {
  return traffic(0, 2 * f32s(r.T * r.E));
}
inline OpCost moe_aux_sums_contract(MT_PARAMS(moe_aux_sums)) {
  unused(psum, counts, scores, idx, row0);
  return traffic(0, f32s(r.T * r.E) + f32s(r.T * r.k) + 4 * f32s(nb * r.E));
}
inline OpCost moe_logsumexp_contract(float*, const float*, const MoeRouting& r) {
  return traffic(0, f32s(r.T * r.E) + f32s(r.T));
}
inline OpCost moe_permute_contract(
    float*, const float*, const int64_t*, const MoeRouting& r, int64_t h) {
  return traffic(2 * f32s(r.T * r.k * h), 2 * f32s(r.T * r.k));
}
inline OpCost moe_permute_backward_contract(
    float*, const float*, const int64_t*, const MoeRouting& r, int64_t h) {
  return traffic(f32s(r.T * r.k * h) + 2 * f32s(r.T * h), 2 * f32s(r.T * r.k));
}
inline OpCost moe_combine_contract(MT_PARAMS(moe_combine)) {
  unused(y, rows, row, weight);
  return traffic(f32s(r.T * r.k * h) + f32s(r.T * h), 3 * f32s(r.T * r.k));
}
inline OpCost moe_combine_backward_contract(MT_PARAMS(moe_combine_backward)) {
  unused(drows, dweight, dy, rows, row, weight);
  return traffic(3 * f32s(r.T * r.k * h), 4 * f32s(r.T * r.k));
}
inline OpCost moe_router_backward_contract(MT_PARAMS(moe_router_backward)) {
  unused(dlogits, logits, idx, weight, dweight, loss);
  return traffic(0, 2 * f32s(r.T * r.E) + 3 * f32s(r.T * r.k));
}

// ---- optimizer, FP8 -------------------------------------------------------------------------

// Reads the weight, both moments and the gradient, writes the weight and moments (and the bf16
// copy): fp32 optimizer state at the minimum too.
inline double adamw_bytes(int64_t n, const bf16* param_bf16) {
  return 7 * f32s(n) + (param_bf16 ? 2.0 * double(n) : 0.0);
}
inline OpCost adamw_step_contract(MT_PARAMS(adamw_step)) {
  unused(param, m, v, grad, p);
  return traffic(0, adamw_bytes(n, param_bf16));
}
inline OpCost adamw_step_runs_contract(MT_PARAMS(adamw_step_runs)) {
  unused(param, m, v, grad, p);
  int64_t n = 0;
  for (int64_t i = 0; i < n_runs; ++i) n += runs[i].n;
  return traffic(0, adamw_bytes(n, param_bf16));
}
// Muon: reads the gradient and the momentum, writes the momentum and the update (optimizer state,
// fp32 at the minimum too); the normalisation reads and writes its matrix.
inline OpCost muon_momentum_contract(MT_PARAMS(muon_momentum)) {
  unused(momentum, update, grad, grad_scale, mu, nesterov);
  return traffic(0, 4 * f32s(n));
}
inline OpCost scale_by_inverse_norm_contract(float*, const double* sumsq, double eps, int64_t n) {
  MT_CHECK(sumsq != nullptr && eps > 0, "scale_by_inverse_norm: a sum of squares and eps > 0");
  return traffic(0, 2 * f32s(n));
}
// The quantised values are stored as bf16 (docs/precision.md); the minimum writes FP8 bytes
// from a bf16 input.
template <typename S>
OpCost fp8_quantize_contract(bf16*, float*, const S*, float, Fp8Format, int64_t n) {
  return {0, double(n) * double(sizeof(S) + 2), 3.0 * double(n)};
}
template <typename S>
OpCost abs_max_contract(float*, const S*, int64_t n) {
  return {0, double(n) * double(sizeof(S)), 2.0 * double(n)};
}

}  // namespace mtron::kernels
