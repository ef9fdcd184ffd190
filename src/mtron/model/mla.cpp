#include "mtron/model/mla.h"

#include <cmath>

#include "mtron/kernels/attention.h"
#include "mtron/kernels/elementwise.h"
#include "mtron/kernels/gemm_operand.h"
#include "mtron/kernels/rope.h"

namespace mtron::model {

namespace {

// A weight replicated over TP; its gradient is TP-partial when TP > 1 (mla.h).
ParamSpec replicated_weight(std::string name,
                            Shape shape,
                            float std,
                            const parallel::TensorParallel& tp) {
  return ParamSpec{.name = std::move(name),
                   .global_shape = shape,
                   .local_shape = shape,
                   .init = ParamInit::kNormal,
                   .init_std = std,
                   .sequence_parallel = tp.size > 1};
}

}  // namespace

MlaProjection::MlaProjection(const ModelConfig& cfg,
                             const std::string& prefix,
                             const parallel::TensorParallel& tp,
                             ParamBuffer& params,
                             bool recompute_up)
    : cfg_(cfg), m_(cfg.mla), p_(params), recompute_up_(recompute_up) {
  const int64_t H = cfg.num_attention_heads, h = cfg.hidden_size, Dq = m_.q_head_dim();
  Hl_ = H / tp.size;
  h_ = h;
  rope_.base = cfg.rotary_base;
  if (m_.yarn() && m_.rotary_scaling_factor != 1.0f) {
    double low = 0, high = 0;
    m_.yarn_ramp(cfg.rotary_base, &low, &high);
    rope_.yarn_factor = m_.rotary_scaling_factor;
    rope_.ramp_low = float(low);
    rope_.ramp_high = float(high);
    rope_.mscale = float(m_.yarn_concentration());
  }
  const float std = cfg.init_method_std;
  const bool partial = tp.size > 1;
  if (m_.q_lora_rank > 0) {
    q_down_ = params.add(
        replicated_weight(prefix + "linear_q_down_proj.weight", {m_.q_lora_rank, h}, std, tp));
    q_up_ = params.add(sharded_spec(prefix + "linear_q_up_proj.weight", {H * Dq, m_.q_lora_rank}, 0,
                                    tp.rank, tp.size, std));
    if (cfg.qk_layernorm) {
      q_norm_.add_params(cfg, prefix + "q_layernorm", partial, params, m_.q_lora_rank);
    }
  } else {
    q_up_ = params.add(
        sharded_spec(prefix + "linear_q_proj.weight", {H * Dq, h}, 0, tp.rank, tp.size, std));
  }
  kv_down_ = params.add(replicated_weight(prefix + "linear_kv_down_proj.weight",
                                          {m_.kv_lora_rank + m_.qk_pos_emb_head_dim, h}, std, tp));
  kv_up_ = params.add(sharded_spec(prefix + "linear_kv_up_proj.weight",
                                   {H * (m_.qk_head_dim + m_.v_head_dim), m_.kv_lora_rank}, 0,
                                   tp.rank, tp.size, std));
  if (cfg.qk_layernorm) {
    kv_norm_.add_params(cfg, prefix + "kv_layernorm", partial, params, m_.kv_lora_rank);
  }
}

Act MlaProjection::normed_input(const RunCtx& rc,
                                const Norm& norm,
                                Arena& keep,
                                Arena& scratch,
                                float* in,
                                int64_t N,
                                int64_t width,
                                float** mean,
                                float** rstd,
                                float** normed) const {
  float* out = in;
  if (norm.w >= 0) {
    *mean = cfg_.normalization == Normalization::kLayerNorm ? keep.alloc<float>(N) : nullptr;
    *rstd = keep.alloc<float>(N);
    out = gemm_input_buffer(rc, keep, scratch, N * width);
    norm.forward(rc, cfg_, p_, out, *mean, *rstd, in, N);
  }
  if (normed) *normed = out;
  return as_gemm_input(rc, keep, out, N * width);
}

const float* MlaProjection::norm_backward(const RunCtx& rc,
                                          Arena& scratch,
                                          const Norm& norm,
                                          const float* dout,
                                          const float* in,
                                          const float* mean,
                                          const float* rstd,
                                          int64_t N,
                                          int64_t width) const {
  if (norm.w < 0) return dout;
  float* din = scratch.alloc<float>(N * width);
  kernels::fill_zero(rc.k, din, int64_t(sizeof(float)) * N * width);
  norm.backward(rc, cfg_, p_, din, dout, in, mean, rstd, N);
  return din;
}

void MlaProjection::query(const RunCtx& rc,
                          const int32_t* pos,
                          int64_t N,
                          Stash& st,
                          Arena& keep,
                          Arena& scratch,
                          Act x,
                          float* q) const {
  const int64_t qr = m_.q_lora_rank;
  if (q_down_ >= 0) {
    st.qc = keep.alloc<float>(N * qr);
    linear_forward(rc, st.qc, x, p_.weight(q_down_), nullptr, N, h_, qr);
    st.qn_in = normed_input(rc, q_norm_, keep, scratch, st.qc, N, qr, &st.q_mean, &st.q_rstd);
  }
  query_up(rc, pos, N, q_down_ >= 0 ? st.qn_in : x, q);
}

void MlaProjection::query_up(
    const RunCtx& rc, const int32_t* pos, int64_t N, Act in, float* q) const {
  const int64_t Dq = m_.q_head_dim();
  linear_forward(rc, q, in, p_.weight(q_up_), nullptr, N, q_down_ >= 0 ? m_.q_lora_rank : h_,
                 Hl_ * Dq);
  kernels::rope_forward(rc.k, q + m_.qk_head_dim, pos, N, Hl_, Dq, m_.qk_pos_emb_head_dim, rope_,
                        0);
}

void MlaProjection::expand(const RunCtx& rc,
                           int64_t N,
                           Arena& scratch,
                           Act kvn_in,
                           const float* kpe,
                           float* k,
                           float* v) const {
  const int64_t Dn = m_.qk_head_dim, Dr = m_.qk_pos_emb_head_dim, Dv = m_.v_head_dim;
  float* kv = scratch.alloc<float>(N * Hl_ * (Dn + Dv));
  linear_forward(rc, kv, kvn_in, p_.weight(kv_up_), nullptr, N, m_.kv_lora_rank, Hl_ * (Dn + Dv));
  kernels::mla_kv_split(rc.k, k, v, kv, kpe, N, Hl_, Dn, Dr, Dv);
}

const float* MlaProjection::latent(const RunCtx& rc,
                                   const int32_t* pos,
                                   int64_t N,
                                   Stash& st,
                                   Arena& keep,
                                   Arena& scratch,
                                   Act x,
                                   float* kpe) const {
  const int64_t h = h_, Dr = m_.qk_pos_emb_head_dim, kvr = m_.kv_lora_rank, W = kvr + Dr;
  const int64_t f = int64_t(sizeof(float));
  // linear_kv_down_proj's rows [0, kvr) make the latent, rows [kvr, kvr + Dr) the shared RoPE
  // key: one GEMM (one FP8 scale per operand, as Megatron's one linear), its columns split.
  float* down = scratch.alloc<float>(N * W);
  linear_forward(rc, down, x, p_.weight(kv_down_), nullptr, N, h, W);
  st.ckv = keep.alloc<float>(N * kvr);
  kernels::copy_rows(rc.k, st.ckv, kvr * f, down, W * f, kvr * f, N);
  kernels::copy_rows(rc.k, kpe, Dr * f, down + kvr, W * f, Dr * f, N);
  kernels::rope_forward(rc.k, kpe, pos, N, 1, Dr, Dr, rope_, 0);
  float* kvn = nullptr;
  st.kvn_in =
      normed_input(rc, kv_norm_, keep, scratch, st.ckv, N, kvr, &st.kv_mean, &st.kv_rstd, &kvn);
  return kvn;
}

void MlaProjection::forward(const RunCtx& rc,
                            const int32_t* pos,
                            int64_t N,
                            Stash& st,
                            Arena& keep,
                            Arena& scratch,
                            Act x,
                            float* q,
                            float* k,
                            float* v) const {
  query(rc, pos, N, st, keep, scratch, x, q);
  float* kpe = (recompute_up_ ? keep : scratch).alloc<float>(N * m_.qk_pos_emb_head_dim);
  latent(rc, pos, N, st, keep, scratch, x, kpe);
  st.kpe = recompute_up_ ? kpe : nullptr;
  expand(rc, N, scratch, st.kvn_in, kpe, k, v);
}

void MlaProjection::up(const RunCtx& rc,
                       const int32_t* pos,
                       int64_t N,
                       const Stash& st,
                       Arena& scratch,
                       Act x,
                       float* q,
                       float* k,
                       float* v) const {
  MT_ASSERT(st.kpe, "MLA's up projections recomputed without their stash");
  query_up(rc, pos, N, q_down_ >= 0 ? st.qn_in : x, q);
  expand(rc, N, scratch, st.kvn_in, st.kpe, k, v);
}

void MlaProjection::attend_cached(const RunCtx& rc,
                                  const int32_t* pos,
                                  int64_t B,
                                  int64_t S,
                                  Arena& scratch,
                                  Act x,
                                  float* cache,
                                  int64_t cached,
                                  float* att) const {
  const int64_t Dn = m_.qk_head_dim, Dr = m_.qk_pos_emb_head_dim, Dv = m_.v_head_dim;
  const int64_t Dq = Dn + Dr, kvr = m_.kv_lora_rank, W = m_.latent_width(), N = S * B;
  const int64_t L = cached + S, f = int64_t(sizeof(float));
  const float scale = m_.softmax_scale();
  const kernels::AttnMask causal{true, cached};
  Stash st;
  float* q = scratch.alloc<float>(N * Hl_ * Dq);
  query(rc, pos, N, st, scratch, scratch, x, q);
  float* kpe = scratch.alloc<float>(N * Dr);
  const float* kvn = latent(rc, pos, N, st, scratch, scratch, x, kpe);
  float* rows = cache + cached * B * W;  // the new rows n = s*B + b, after the cached ones
  kernels::copy_rows(rc.k, rows, W * f, kvn, kvr * f, kvr * f, N);
  kernels::copy_rows(rc.k, rows + kvr, W * f, kpe, Dr * f, Dr * f, N);
  const Act w_up = p_.weight(kv_up_);  // per head: Dn rows of W_UK, then Dv rows of W_UV
  float* lse = scratch.alloc<float>(B * Hl_ * S);
  if (W > kernels::attention_max_head_dim(rc.k.device)) {
    float* lat = scratch.alloc<float>(L * B * kvr);
    float* kpe_all = scratch.alloc<float>(L * B * Dr);
    kernels::copy_rows(rc.k, lat, kvr * f, cache, W * f, kvr * f, L * B);
    kernels::copy_rows(rc.k, kpe_all, Dr * f, cache + kvr, W * f, Dr * f, L * B);
    float* kv = scratch.alloc<float>(L * B * Hl_ * (Dn + Dv));
    linear_forward(rc, kv, as_gemm_input(rc, scratch, lat, L * B * kvr), w_up, nullptr, L * B, kvr,
                   Hl_ * (Dn + Dv));
    float* k = scratch.alloc<float>(L * B * Hl_ * Dq);
    float* v = scratch.alloc<float>(L * B * Hl_ * Dv);
    kernels::mla_kv_split(rc.k, k, v, kv, kpe_all, L * B, Hl_, Dn, Dr, Dv);
    kernels::attention_forward(rc.k, att, lse, q, k, v,
                               attention_shape(rc, B, S, L, Hl_, Hl_, Dq, Dv, scale), causal);
    return;
  }
  // The absorbed query [N, Hl, W]: q_nope W_UK per head, then q_pe.
  float* qa = scratch.alloc<float>(N * Hl_ * W);
  const Act qin = as_gemm_input(rc, scratch, q, N * Hl_ * Dq);
  for (int64_t hd = 0; hd < Hl_; ++hd) {
    kernels::gemm(rc.k, kernels::Trans::kN, kernels::Trans::kN, N, kvr, Dn, 1.0f, qin.at(hd * Dq),
                  Hl_ * Dq, w_up.at(hd * (Dn + Dv) * kvr), kvr, 0.0f, qa + hd * W, Hl_ * W);
  }
  kernels::copy_rows(rc.k, qa + kvr, W * f, q + Dn, Dq * f, Dr * f, N * Hl_);
  float* o = scratch.alloc<float>(N * Hl_ * W);
  kernels::attention_forward(rc.k, o, lse, qa, cache, cache,
                             attention_shape(rc, B, S, L, Hl_, 1, W, W, scale), causal);
  // att per head: the output's latent part [N, kvr] through W_UV [Dv, kvr].
  const Act oin = as_gemm_input(rc, scratch, o, N * Hl_ * W);
  for (int64_t hd = 0; hd < Hl_; ++hd) {
    kernels::gemm(rc.k, kernels::Trans::kN, kernels::Trans::kT, N, Dv, kvr, 1.0f, oin.at(hd * W),
                  Hl_ * W, w_up.at((hd * (Dn + Dv) + Dn) * kvr), kvr, 0.0f, att + hd * Dv,
                  Hl_ * Dv);
  }
}

void MlaProjection::backward(const RunCtx& rc,
                             const int32_t* pos,
                             int64_t N,
                             const Stash& st,
                             Arena& scratch,
                             Act x,
                             float* dx,
                             float* dq,
                             float* dk,
                             const float* dv) const {
  const int64_t h = h_, Dn = m_.qk_head_dim, Dr = m_.qk_pos_emb_head_dim, Dv = m_.v_head_dim;
  const int64_t Dq = Dn + Dr, qr = m_.q_lora_rank, kvr = m_.kv_lora_rank;
  float* part = scratch.alloc<float>(N * h);  // one path's share of dx
  // Keys and values.
  float* dkv = scratch.alloc<float>(N * Hl_ * (Dn + Dv));
  float* dkpe = scratch.alloc<float>(N * Dr);
  kernels::mla_kv_merge_grad(rc.k, dkv, dkpe, dk, dv, N, Hl_, Dn, Dr, Dv);
  kernels::rope_backward(rc.k, dkpe, pos, N, 1, Dr, Dr, rope_, 0);
  float* dkvn = scratch.alloc<float>(N * kvr);
  linear_backward(rc, scratch, dkvn, p_.grad(kv_up_), nullptr, dkv, st.kvn_in, p_.weight(kv_up_), N,
                  kvr, Hl_ * (Dn + Dv));
  const float* dckv =
      norm_backward(rc, scratch, kv_norm_, dkvn, st.ckv, st.kv_mean, st.kv_rstd, N, kvr);
  const int64_t W = kvr + Dr, f = int64_t(sizeof(float));
  float* ddown = scratch.alloc<float>(N * W);
  kernels::copy_rows(rc.k, ddown, W * f, dckv, kvr * f, kvr * f, N);
  kernels::copy_rows(rc.k, ddown + kvr, W * f, dkpe, Dr * f, Dr * f, N);
  linear_backward(rc, scratch, dx, p_.grad(kv_down_), nullptr, ddown, x, p_.weight(kv_down_), N, h,
                  W);
  // Query.
  kernels::rope_backward(rc.k, dq + Dn, pos, N, Hl_, Dq, Dr, rope_, 0);
  if (q_down_ >= 0) {
    float* dqn = scratch.alloc<float>(N * qr);
    linear_backward(rc, scratch, dqn, p_.grad(q_up_), nullptr, dq, st.qn_in, p_.weight(q_up_), N,
                    qr, Hl_ * Dq);
    const float* dqc = norm_backward(rc, scratch, q_norm_, dqn, st.qc, st.q_mean, st.q_rstd, N, qr);
    linear_backward(rc, scratch, part, p_.grad(q_down_), nullptr, dqc, x, p_.weight(q_down_), N, h,
                    qr);
  } else {
    linear_backward(rc, scratch, part, p_.grad(q_up_), nullptr, dq, x, p_.weight(q_up_), N, h,
                    Hl_ * Dq);
  }
  kernels::add(rc.k, dx, dx, part, N * h);
}

}  // namespace mtron::model
