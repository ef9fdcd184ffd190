#include "mtron/model/mla.h"

#include "mtron/kernels/elementwise.h"
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
                             ParamBuffer& params)
    : cfg_(cfg), m_(cfg.mla), p_(params) {
  const int64_t H = cfg.num_attention_heads, h = cfg.hidden_size, Dq = m_.q_head_dim();
  Hl_ = H / tp.size;
  h_ = h;
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
  const int64_t h = h_, Dn = m_.qk_head_dim, Dr = m_.qk_pos_emb_head_dim, Dv = m_.v_head_dim;
  const int64_t Dq = Dn + Dr, qr = m_.q_lora_rank, kvr = m_.kv_lora_rank;
  const bool ln = cfg_.normalization == Normalization::kLayerNorm;
  // Query: q_up(q_layernorm(q_down(x))) or linear_q_proj(x), RoPE on each head's last Dr.
  if (q_down_ >= 0) {
    st.qc = keep.alloc<float>(N * qr);
    linear_forward(rc, st.qc, x, p_.weight(q_down_), nullptr, N, h, qr);
    float* qn = st.qc;
    if (q_norm_.w >= 0) {
      st.q_mean = ln ? keep.alloc<float>(N) : nullptr;
      st.q_rstd = keep.alloc<float>(N);
      qn = gemm_input_buffer(rc, keep, scratch, N * qr);
      q_norm_.forward(rc, cfg_, p_, qn, st.q_mean, st.q_rstd, st.qc, N);
    }
    st.qn_in = as_gemm_input(rc, keep, qn, N * qr);
    linear_forward(rc, q, st.qn_in, p_.weight(q_up_), nullptr, N, qr, Hl_ * Dq);
  } else {
    linear_forward(rc, q, x, p_.weight(q_up_), nullptr, N, h, Hl_ * Dq);
  }
  kernels::rope_forward(rc.k, q + Dn, pos, N, Hl_, Dq, Dr, cfg_.rotary_base);
  // Keys and values: linear_kv_down_proj's rows [0, kvr) make the latent, rows [kvr, kvr + Dr)
  // the shared RoPE key.
  const Act w_down = p_.weight(kv_down_);
  st.ckv = keep.alloc<float>(N * kvr);
  linear_forward(rc, st.ckv, x, w_down, nullptr, N, h, kvr);
  float* kpe = scratch.alloc<float>(N * Dr);
  linear_forward(rc, kpe, x, w_down.at(kvr * h), nullptr, N, h, Dr);
  kernels::rope_forward(rc.k, kpe, pos, N, 1, Dr, Dr, cfg_.rotary_base);
  float* kvn = st.ckv;
  if (kv_norm_.w >= 0) {
    st.kv_mean = ln ? keep.alloc<float>(N) : nullptr;
    st.kv_rstd = keep.alloc<float>(N);
    kvn = gemm_input_buffer(rc, keep, scratch, N * kvr);
    kv_norm_.forward(rc, cfg_, p_, kvn, st.kv_mean, st.kv_rstd, st.ckv, N);
  }
  st.kvn_in = as_gemm_input(rc, keep, kvn, N * kvr);
  float* kv = scratch.alloc<float>(N * Hl_ * (Dn + Dv));
  linear_forward(rc, kv, st.kvn_in, p_.weight(kv_up_), nullptr, N, kvr, Hl_ * (Dn + Dv));
  kernels::mla_kv_split(rc.k, k, v, kv, kpe, N, Hl_, Dn, Dr, Dv);
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
  kernels::rope_backward(rc.k, dkpe, pos, N, 1, Dr, Dr, cfg_.rotary_base);
  float* dkvn = scratch.alloc<float>(N * kvr);
  linear_backward(rc, scratch, dkvn, p_.grad(kv_up_), nullptr, dkv, st.kvn_in, p_.weight(kv_up_), N,
                  kvr, Hl_ * (Dn + Dv));
  float* dckv = dkvn;
  if (kv_norm_.w >= 0) {
    dckv = scratch.alloc<float>(N * kvr);
    kernels::fill_zero(rc.k, dckv, int64_t(sizeof(float)) * N * kvr);
    kv_norm_.backward(rc, cfg_, p_, dckv, dkvn, st.ckv, st.kv_mean, st.kv_rstd, N);
  }
  const Act w_down = p_.weight(kv_down_);
  linear_backward(rc, scratch, dx, p_.grad(kv_down_), nullptr, dckv, x, w_down, N, h, kvr);
  linear_backward(rc, scratch, part, p_.grad(kv_down_) + kvr * h, nullptr, dkpe, x,
                  w_down.at(kvr * h), N, h, Dr);
  kernels::add(rc.k, dx, dx, part, N * h);
  // Query.
  kernels::rope_backward(rc.k, dq + Dn, pos, N, Hl_, Dq, Dr, cfg_.rotary_base);
  if (q_down_ >= 0) {
    float* dqn = scratch.alloc<float>(N * qr);
    linear_backward(rc, scratch, dqn, p_.grad(q_up_), nullptr, dq, st.qn_in, p_.weight(q_up_), N,
                    qr, Hl_ * Dq);
    float* dqc = dqn;
    if (q_norm_.w >= 0) {
      dqc = scratch.alloc<float>(N * qr);
      kernels::fill_zero(rc.k, dqc, int64_t(sizeof(float)) * N * qr);
      q_norm_.backward(rc, cfg_, p_, dqc, dqn, st.qc, st.q_mean, st.q_rstd, N);
    }
    linear_backward(rc, scratch, part, p_.grad(q_down_), nullptr, dqc, x, p_.weight(q_down_), N, h,
                    qr);
  } else {
    linear_backward(rc, scratch, part, p_.grad(q_up_), nullptr, dq, x, p_.weight(q_up_), N, h,
                    Hl_ * Dq);
  }
  kernels::add(rc.k, dx, dx, part, N * h);
}

}  // namespace mtron::model
