#include "mtron/model/layer.h"

#include <cmath>

#include "mtron/kernels/activation.h"
#include "mtron/kernels/attention.h"
#include "mtron/kernels/elementwise.h"
#include "mtron/kernels/norm.h"
#include "mtron/kernels/rope.h"

namespace mtron::model {

namespace {

// A TP-sharded weight: global shape, sharded along `dim` in `tp.size` equal slices.
ParamSpec sharded(std::string name,
                  Shape global,
                  int dim,
                  const parallel::TensorParallel& tp,
                  float std,
                  bool weight_decay = true) {
  return sharded_spec(std::move(name), std::move(global), dim, tp.rank, tp.size, std, weight_decay);
}

ParamSpec replicated_bias(std::string name, int64_t n, bool sequence_parallel) {
  return ParamSpec{.name = std::move(name),
                   .global_shape = {n},
                   .local_shape = {n},
                   .init = ParamInit::kZeros,
                   .weight_decay = false,
                   .sequence_parallel = sequence_parallel};
}

}  // namespace

TransformerLayer::TransformerLayer(const ModelConfig& cfg,
                                   int64_t layer,
                                   const parallel::TensorParallel& tp,
                                   const parallel::ExpertParallel& ep,
                                   ParamBuffer& params,
                                   ParamBuffer& expert_params,
                                   RecomputeModules recompute,
                                   const std::string& prefix)
    : cfg_(cfg), p_(params), layer_(layer), recompute_(recompute) {
  const int64_t H = cfg.num_attention_heads, G = cfg.query_groups(), D = cfg.qk_dim();
  const bool moe = cfg.is_moe_layer(layer);
  const int64_t F = moe ? cfg.moe_shared_expert_intermediate_size : cfg.ffn();
  const int64_t h = cfg.hidden_size;
  Hl_ = H / tp.size;
  Gl_ = G / tp.size;
  D_ = D;
  Dv_ = cfg.v_dim();
  softmax_scale_ = cfg.mla.enabled ? cfg.mla.softmax_scale() : 1.0f / std::sqrt(float(D));
  rope_.base = cfg.rotary_base;
  if (cfg.rope_scaling) rope_.llama3_factor = cfg.rope_scaling_factor;
  rope_.interleaved = cfg.rotary_interleaved;
  Fl_ = F / tp.size;
  h_ = h;
  qkv_l_ = Gl_ * (H / G + 2) * D;
  const float std = cfg.init_method_std;
  const float out_std = std / std::sqrt(2.0f * float(cfg.num_layers));
  const bool sp = tp.sequence_parallel;
  const bool bias = cfg.add_bias_linear;
  const std::string pre = prefix.empty() ? "decoder.layers." + std::to_string(layer) + "." : prefix;

  ln1_.add_params(cfg, pre + "input_layernorm", sp, params);
  if (cfg.mla.enabled) {
    mla_ = std::make_unique<MlaProjection>(cfg, pre + "self_attention.", tp, params,
                                           recompute.has(RecomputeModule::kMlaUpProj));
  } else {
    // QKV rows are Megatron's interleaved [group][hpg q | k | v][D]: a TP shard is a contiguous
    // block of whole groups.
    qkv_w_ = params.add(
        sharded(pre + "self_attention.linear_qkv.weight", {G * (H / G + 2) * D, h}, 0, tp, std));
    if (cfg.qkv_bias()) {
      qkv_b_ = params.add(
          sharded(pre + "self_attention.linear_qkv.bias", {G * (H / G + 2) * D}, 0, tp, 0, false));
    }
  }
  proj_w_ =
      params.add(sharded(pre + "self_attention.linear_proj.weight", {h, H * Dv_}, 1, tp, out_std));
  if (bias) proj_b_ = params.add(replicated_bias(pre + "self_attention.linear_proj.bias", h, sp));
  if (cfg.qk_layernorm && !cfg.mla.enabled) {  // with MLA: the latent norms (model/mla.h)
    // Replicated over TP, each rank's gradient from its own heads: summed over TP as the
    // sequence-parallel parameters' are (train/ddp.h).
    q_norm_.add_params(cfg, pre + "self_attention.q_layernorm", true, params, D);
    k_norm_.add_params(cfg, pre + "self_attention.k_layernorm", true, params, D);
  }

  ln2_.add_params(cfg, pre + "pre_mlp_layernorm", sp, params);
  if (moe)
    moe_ = std::make_unique<MoELayer>(cfg, layer, pre + "mlp.", tp, ep, params, expert_params,
                                      recompute.has(RecomputeModule::kMoeAct));
  if (F == 0) return;  // an MoE layer without a shared expert
  // SwiGLU's fc1 is [gate; up]: as a [2, F, h] tensor sharded along F, each rank holds
  // [gate_r; up_r], which is Megatron's local layout and one GEMM.
  const std::string mlp = pre + (moe ? "mlp.shared_experts." : "mlp.");
  if (cfg.swiglu) {
    fc1_w_ = params.add(sharded(mlp + "linear_fc1.weight", {2, F, h}, 1, tp, std));
    if (bias) fc1_b_ = params.add(sharded(mlp + "linear_fc1.bias", {2, F}, 1, tp, 0, false));
  } else {
    fc1_w_ = params.add(sharded(mlp + "linear_fc1.weight", {F, h}, 0, tp, std));
    if (bias) fc1_b_ = params.add(sharded(mlp + "linear_fc1.bias", {F}, 0, tp, 0, false));
  }
  fc2_w_ = params.add(sharded(mlp + "linear_fc2.weight", {h, F}, 1, tp, out_std));
  if (bias) fc2_b_ = params.add(replicated_bias(mlp + "linear_fc2.bias", h, sp));
}

namespace {
const float* opt(const ParamBuffer& p, int handle) {
  return handle < 0 ? nullptr : p.master(handle);
}
float* opt_grad(const ParamBuffer& p, int handle) {
  return handle < 0 ? nullptr : p.grad(handle);
}
// The bf16 compute copy of an optional bias (bf16 mode).
const bf16* opt16(const ParamBuffer& p, int handle) {
  if (handle < 0) return nullptr;
  const Act b = p.weight(handle);
  MT_ASSERT(b.dtype == DType::kBF16, "a bf16 bias in ", dtype_name(b.dtype), " mode");
  return static_cast<const bf16*>(b.data);
}
// The GEMM input of all N rows [N, h] from a norm's fp32 output `local` (this rank's rows):
// gathered over SP, then as_gemm_input.
Act gathered_gemm_input(
    const RunCtx& rc, Arena& keep, Arena& scratch, float* local, int64_t N, int64_t h) {
  float* full = local;
  if (rc.tp.sequence_parallel) {
    full = gemm_input_buffer(rc, keep, scratch, N * h);
    parallel::enter_tp_forward(rc.tp, full, local, N, h);
  }
  return as_gemm_input(rc, keep, full, N * h);
}
}  // namespace

kernels::AttnShape TransformerLayer::self_attention_shape(const RunCtx& rc,
                                                          const TokenLayout& tl,
                                                          bool fused_qkv) const {
  return attention_shape(rc, tl.B, tl.S, tl.S, Hl_, Gl_, D_, Dv_, softmax_scale_, fused_qkv);
}

bool TransformerLayer::bf16_qkv(const RunCtx& rc, const TokenLayout& tl, bool fused_qkv) const {
  return fused_qkv && bf16_attention(rc) && bf16_gemm_outputs(rc, p_.weight(qkv_w_)) &&
         bf16_gemm_outputs(rc, p_.weight(proj_w_)) &&
         attention_dropout(rc, cfg_, tl.drop, layer_, Hl_).p == 0;
}

template <typename T>
void TransformerLayer::rope_fused_qkv(const RunCtx& rc,
                                      const TokenLayout& tl,
                                      T* qkv,
                                      bool adjoint) const {
  if (cfg_.position_embedding_type != PositionEmbedding::kRope) return;
  // the row's heads, in groups of H/G + 2 (each group's value head left as it is)
  const int64_t N = tl.rows(), heads = qkv_l_ / D_, group = Hl_ / Gl_ + 2;
  if (adjoint) {
    kernels::rope_backward(rc.k, qkv, tl.pos, N, heads, D_, cfg_.rotary_dim(), rope_, group);
  } else {
    kernels::rope_forward(rc.k, qkv, tl.pos, N, heads, D_, cfg_.rotary_dim(), rope_, group);
  }
}

void TransformerLayer::attention(
    const RunCtx& rc, const TokenLayout& tl, Stash& st, Arena& scratch, const LayerKv* kv) const {
  const float scale = softmax_scale_;
  if (!kv) {
    parallel::context_attention_forward(rc.k, rc.cp, layer_, scratch, st.att, st.lse, st.q, st.k,
                                        st.v, self_attention_shape(rc, tl, st.fused_qkv),
                                        attention_dropout(rc, cfg_, tl.drop, layer_, Hl_),
                                        st.bf16_values());
    return;
  }
  const int64_t krow = tl.B * Gl_ * D_, vrow = tl.B * Gl_ * Dv_;
  const int64_t fl = int64_t(sizeof(float)) * tl.S;
  kernels::copy(rc.k, kv->k + kv->length * krow, st.k, fl * krow);
  kernels::copy(rc.k, kv->v + kv->length * vrow, st.v, fl * vrow);
  const kernels::AttnShape as =
      attention_shape(rc, tl.B, tl.S, kv->length + tl.S, Hl_, Gl_, D_, Dv_, scale);
  kernels::attention_forward(rc.k, st.att, st.lse, st.q, kv->k, kv->v, as,
                             kernels::AttnMask{true, kv->length});
}

void TransformerLayer::qkv_attention(const RunCtx& rc,
                                     const TokenLayout& tl,
                                     Stash& st,
                                     Arena& keep,
                                     Arena& scratch,
                                     const LayerKv* kv) const {
  const int64_t N = tl.rows(), h = h_;
  const bool ln = cfg_.normalization == Normalization::kLayerNorm;
  // Attention reads q, k, v where the QKV projection wrote them (RoPE rotating them there)
  // unless they are normed first (--qk-layernorm), travel (ring attention) or go to a KV cache.
  const bool fusable = !mla_ && !kv && q_norm_.w < 0;
  st.fused_qkv = fusable && rc.cp.size == 1;
  st.fused16 = {};
  st.qkv16 = nullptr;
  st.att = nullptr;
  if (bf16_qkv(rc, tl, fusable)) {
    // The QKV projection's bf16 output, RoPE rotating it there; an a2a or a2a+p2p layer stashes
    // its head-sharded copy instead.
    const bool fused = parallel::attends_fused(rc.cp, layer_);
    bf16* qkv16 = (fused && rc.cp.size > 1 ? scratch : keep).alloc<bf16>(N * qkv_l_);
    linear_forward(rc, qkv16, st.ln1_in, p_.weight(qkv_w_), opt16(p_, qkv_b_), N, h, qkv_l_);
    rope_fused_qkv(rc, tl, qkv16, false);
    if (fused) {  // CP 1, a2a, a2a+p2p: the bf16 ops on the fused layout
      bf16* att = keep.alloc<bf16>(N * Hl_ * Dv_);
      st.fused16 =
          parallel::fused_attention_forward(rc.k, rc.cp, layer_, keep, scratch, att, st.lse, qkv16,
                                            self_attention_shape(rc, tl, true));
      st.att_in = Act::of(att);
      return;
    }
    // The other CP communications: widened into temporaries for the CP code, which exchanges
    // them as bf16; forward() stashes the output as the projection's bf16 input alone.
    st.qkv16 = qkv16;
    widen_qkv(rc, tl, st, scratch);
    st.att = scratch.alloc<float>(N * Hl_ * Dv_);
    attention(rc, tl, st, scratch, kv);
    return;
  }
  st.att = keep.alloc<float>(N * Hl_ * Dv_);
  if (st.fused_qkv) {
    float* qkv = keep.alloc<float>(N * qkv_l_);
    linear_forward(rc, qkv, st.ln1_in, p_.weight(qkv_w_), opt(p_, qkv_b_), N, h, qkv_l_);
    rope_fused_qkv(rc, tl, qkv, false);
    const auto views = kernels::fused_qkv_views(qkv, Hl_, Gl_, D_);
    st.q = views.q;
    st.k = views.k;
    st.v = views.v;
    attention(rc, tl, st, scratch, kv);
    return;
  }
  // (MLA's, with --recompute-modules mla_up_proj, for this forward only)
  Arena& qkv = mla_ && mla_->recompute_up() ? scratch : keep;
  st.q = qkv.alloc<float>(N * Hl_ * D_);
  st.k = qkv.alloc<float>(N * Gl_ * D_);
  st.v = qkv.alloc<float>(N * Gl_ * Dv_);
  if (mla_) {
    mla_->forward(rc, tl.pos, N, st.mla, keep, scratch, st.ln1_in, st.q, st.k, st.v);
  } else {
    float* qkv = scratch.alloc<float>(N * qkv_l_);
    linear_forward(rc, qkv, st.ln1_in, p_.weight(qkv_w_), opt(p_, qkv_b_), N, h, qkv_l_);
    kernels::qkv_split(rc.k, st.q, st.k, st.v, qkv, N, Gl_, Hl_ / Gl_, D_);
    if (q_norm_.w >= 0) {  // per head row, before RoPE (Megatron's q_layernorm / k_layernorm)
      st.q_in = st.q;
      st.k_in = st.k;
      st.q = keep.alloc<float>(N * Hl_ * D_);
      st.k = keep.alloc<float>(N * Gl_ * D_);
      st.qn_mean = ln ? keep.alloc<float>(N * Hl_) : nullptr;
      st.kn_mean = ln ? keep.alloc<float>(N * Gl_) : nullptr;
      st.qn_rstd = keep.alloc<float>(N * Hl_);
      st.kn_rstd = keep.alloc<float>(N * Gl_);
      q_norm_.forward(rc, cfg_, p_, st.q, st.qn_mean, st.qn_rstd, st.q_in, N * Hl_);
      k_norm_.forward(rc, cfg_, p_, st.k, st.kn_mean, st.kn_rstd, st.k_in, N * Gl_);
    }
    if (cfg_.position_embedding_type == PositionEmbedding::kRope) {
      kernels::rope_forward(rc.k, st.q, tl.pos, N, Hl_, D_, cfg_.rotary_dim(), rope_, 0);
      kernels::rope_forward(rc.k, st.k, tl.pos, N, Gl_, D_, cfg_.rotary_dim(), rope_, 0);
    }
  }
  attention(rc, tl, st, scratch, kv);
}

void TransformerLayer::widen_qkv(const RunCtx& rc,
                                 const TokenLayout& tl,
                                 Stash& st,
                                 Arena& scratch) const {
  const parallel::WidenedQkv w =
      parallel::widen_qkv(rc.k, scratch, st.qkv16, tl.rows(), Hl_, Gl_, D_);
  st.q = w.q;
  st.k = w.k;
  st.v = w.v;
}

float* TransformerLayer::norm_input(const RunCtx& rc,
                                    const TokenLayout& tl,
                                    const Norm& norm,
                                    const float* x,
                                    float* mean,
                                    float* rstd,
                                    bool routed,
                                    Act* gemm_in,
                                    Arena& keep,
                                    Arena& scratch) const {
  // The GEMM input is the norm's output itself without SP (in bf16 written so by the norm, unless
  // the routed experts read it in fp32); with SP the gathered rows are.
  const int64_t N = tl.rows(), Nl = rc.tp.sp_rows(N), h = h_;
  const bool sp = rc.tp.sequence_parallel;
  if (!routed && !sp && bf16_gemm_inputs(rc)) {
    bf16* out = keep.alloc<bf16>(N * h);
    norm.forward(rc, cfg_, p_, out, mean, rstd, x, Nl);
    *gemm_in = Act::of(out);
    return nullptr;
  }
  float* out = routed ? keep.alloc<float>(Nl * h)
               : sp   ? scratch.alloc<float>(Nl * h)
                      : gemm_input_buffer(rc, keep, scratch, Nl * h);
  norm.forward(rc, cfg_, p_, out, mean, rstd, x, Nl);
  if (gemm_in) *gemm_in = gathered_gemm_input(rc, keep, scratch, out, N, h);
  return routed ? out : nullptr;
}

void TransformerLayer::mlp_up(
    const RunCtx& rc, int64_t N, Stash& st, Arena& keep, Arena& scratch) const {
  // The activation's input (and, in the backward, fc2's dgrad) in bf16 where both GEMMs may
  // write it; GELU then in fc1's GEMM, and its derivative in fc2's dgrad GEMM (squared ReLU and
  // SwiGLU: their own kernels)
  const int64_t fc1_w = cfg_.swiglu ? 2 * Fl_ : Fl_, h = h_;
  if (bf16_gemm_outputs(rc, p_.weight(fc1_w_)) && bf16_gemm_outputs(rc, p_.weight(fc2_w_))) {
    bf16* fc1 = keep.alloc<bf16>(N * fc1_w);
    st.fc1 = Act::of(fc1);
    if (cfg_.activation() == MlpActivation::kGelu) {
      bf16* act = keep.alloc<bf16>(N * Fl_);
      linear_forward_gelu(rc, act, fc1, st.ln2_in, p_.weight(fc1_w_), opt16(p_, fc1_b_), N, h, Fl_);
      st.act_in = Act::of(act);
      return;
    }
    linear_forward(rc, fc1, st.ln2_in, p_.weight(fc1_w_), opt16(p_, fc1_b_), N, h, fc1_w);
  } else {
    float* fc1 = keep.alloc<float>(N * fc1_w);
    linear_forward(rc, fc1, st.ln2_in, p_.weight(fc1_w_), opt(p_, fc1_b_), N, h, fc1_w);
    st.fc1 = Act::of(fc1);
  }
  st.act_in = mlp_activation(rc, keep, scratch, st.fc1, N, Fl_, cfg_.activation());
}

void TransformerLayer::forward(const RunCtx& rc,
                               const TokenLayout& tl,
                               Stash* stash,
                               Arena& keep_arena,
                               Arena& scratch,
                               const float* x,
                               float* y,
                               const LayerKv* kv) const {
  Stash none;
  Stash& st = stash ? *stash : none;
  Arena& keep = stash ? keep_arena : scratch;
  // What selective recompute leaves out of the stash lives in scratch (this forward only).
  Arena& norm_keep = recompute_norms() ? scratch : keep;
  const auto& tp = rc.tp;
  const int64_t N = tl.rows(), Nl = tp.sp_rows(N), h = h_;
  const bool sp = tp.sequence_parallel;
  const bool ln = cfg_.normalization == Normalization::kLayerNorm;
  st.x = x;

  // Attention block.
  st.ln1_mean = ln ? keep.alloc<float>(Nl) : nullptr;
  st.ln1_rstd = keep.alloc<float>(Nl);
  norm_input(rc, tl, ln1_, x, st.ln1_mean, st.ln1_rstd, false, &st.ln1_in, norm_keep, scratch);

  if (kv) {
    MT_ASSERT(rc.tp.size == 1 && rc.cp.size == 1, "a KV cache holds a whole model's heads");
    MT_ASSERT(kv->length + tl.S <= kv->capacity, "the KV cache is full");
  }
  st.lse = keep.alloc<float>(tl.B * Hl_ * tl.S);
  if (mla_ && kv) {  // the cache holds the compressed latent (mla.h)
    st.att = keep.alloc<float>(N * Hl_ * Dv_);
    mla_->attend_cached(rc, tl.pos, tl.B, tl.S, scratch, st.ln1_in, kv->k, kv->length, st.att);
  } else {
    qkv_attention(rc, tl, st, keep, scratch, kv);
  }
  if (st.att) st.att_in = as_gemm_input(rc, keep, st.att, N * Hl_ * Dv_);
  if (st.bf16_values()) st.q = st.k = st.v = st.att = nullptr;  // temporaries (backward widens)

  st.x2 = keep.alloc<float>(Nl * h);
  float* partial = sp ? scratch.alloc<float>(N * h) : st.x2;
  // The row-parallel linears' bias goes in after the TP reduction; without one (TP 1), in the
  // GEMM's epilogue, and so does the residual where no dropout comes between.
  const bool bias_in_gemm = tp.size == 1;
  const bool residual_in_gemm = bias_in_gemm && !hidden_dropout_on(cfg_, tl);
  linear_forward(rc, partial, st.att_in, p_.weight(proj_w_),
                 bias_in_gemm ? opt(p_, proj_b_) : nullptr, N, Hl_ * Dv_, h,
                 residual_in_gemm ? x : nullptr);
  parallel::exit_tp_forward(tp, st.x2, partial, N, h);
  if (proj_b_ >= 0 && !bias_in_gemm) kernels::bias_add(rc.k, st.x2, p_.master(proj_b_), Nl, h);
  hidden_dropout(rc, cfg_, tl, {layer_, "attention_output"}, st.x2);
  if (!residual_in_gemm) kernels::add(rc.k, st.x2, st.x2, x, Nl * h);

  // MLP block: the dense MLP (an MoE layer's shared expert) and/or the routed experts.
  st.ln2_mean = ln ? keep.alloc<float>(Nl) : nullptr;
  st.ln2_rstd = keep.alloc<float>(Nl);
  float* ln2 = mlp_norm(rc, tl, st, norm_keep, scratch);
  if (dense_mlp()) {
    mlp_up(rc, N, st, recompute_mlp() ? scratch : keep, scratch);
    partial = sp ? scratch.alloc<float>(N * h) : y;
    linear_forward(rc, partial, st.act_in, p_.weight(fc2_w_),
                   bias_in_gemm ? opt(p_, fc2_b_) : nullptr, N, Fl_, h,
                   residual_in_gemm && !moe_ ? st.x2 : nullptr);
    parallel::exit_tp_forward(tp, y, partial, N, h);
    if (fc2_b_ >= 0 && !bias_in_gemm) kernels::bias_add(rc.k, y, p_.master(fc2_b_), Nl, h);
  }
  if (moe_) {
    float* routed = dense_mlp() ? scratch.alloc<float>(Nl * h) : y;
    moe_->forward(rc, tl, stash ? &st.moe : nullptr, recompute_moe() ? scratch : keep, scratch, ln2,
                  routed);
    if (dense_mlp()) kernels::add(rc.k, y, y, routed, Nl * h);
  }
  hidden_dropout(rc, cfg_, tl, {layer_, "mlp_output"}, y);
  if (!residual_in_gemm || moe_) kernels::add(rc.k, y, y, st.x2, Nl * h);
}

float* TransformerLayer::dropout_grad(const RunCtx& rc,
                                      const TokenLayout& tl,
                                      Arena& scratch,
                                      std::string_view kind,
                                      float* dy) const {
  if (!hidden_dropout_on(cfg_, tl)) return dy;
  const int64_t N = tl.rows(), Nl = rc.tp.sp_rows(N);
  float* d = scratch.alloc<float>(Nl * h_);
  kernels::copy(rc.k, d, dy, int64_t(sizeof(float)) * Nl * h_);
  hidden_dropout(rc, cfg_, tl, {layer_, kind}, d);
  return d;
}

// The attention block's backward from the output projection's output gradient dpartial [N, h]
// to QKV's input gradient dln1_full [N, h]: with bf16_qkv the projection's dgrad and attention's
// gradients in bf16 (attention writes them where QKV's GEMMs read them), else in fp32.
void TransformerLayer::attention_block_backward(const RunCtx& rc,
                                                const TokenLayout& tl,
                                                const Stash& st,
                                                Arena& scratch,
                                                const float* dpartial,
                                                float* dln1_full) const {
  const int64_t N = tl.rows(), h = h_;
  const bool sp = rc.tp.sequence_parallel;
  const auto proj_dgrad = [&](auto* datt) {
    linear_backward(rc, scratch, datt, p_.grad(proj_w_), sp ? nullptr : opt_grad(p_, proj_b_),
                    dpartial, st.att_in, p_.weight(proj_w_), N, Hl_ * Dv_, h);
    return datt;
  };
  // QKV's bf16 output gradient: RoPE's adjoint over it, then the QKV GEMMs' backward.
  const auto qkv_backward16 = [&](bf16* dqkv) {
    rope_fused_qkv(rc, tl, dqkv, true);
    linear_backward(rc, scratch, dln1_full, p_.grad(qkv_w_), opt_grad(p_, qkv_b_), Act::of(dqkv),
                    st.ln1_in, p_.weight(qkv_w_), N, h, qkv_l_);
  };
  if (st.fused16.qkv) {
    const bf16* datt = proj_dgrad(scratch.alloc<bf16>(N * Hl_ * Dv_));
    bf16* dqkv = scratch.alloc<bf16>(N * qkv_l_);
    parallel::fused_attention_backward(rc.k, rc.cp, layer_, scratch, dqkv, datt, st.fused16, st.lse,
                                       self_attention_shape(rc, tl, true));
    qkv_backward16(dqkv);
    return;
  }
  float* datt = nullptr;
  if (st.bf16_values()) {  // CP 1's bf16 output gradient, widened
    datt = scratch.alloc<float>(N * Hl_ * Dv_);
    kernels::convert(rc.k, datt, proj_dgrad(scratch.alloc<bf16>(N * Hl_ * Dv_)), N * Hl_ * Dv_);
  } else {
    datt = proj_dgrad(scratch.alloc<float>(N * Hl_ * Dv_));
  }
  // dq, dk, dv: in the fused layout one buffer, QKV's output gradient
  float *dq = nullptr, *dk = nullptr, *dv = nullptr;
  if (st.fused_qkv) {
    const auto d = kernels::fused_qkv_views(scratch.alloc<float>(N * qkv_l_), Hl_, Gl_, D_);
    kernels::fill_zero(rc.k, d.q, int64_t(sizeof(float)) * N * qkv_l_);
    dq = d.q;
    dk = d.k;
    dv = d.v;
  } else {
    dq = scratch.alloc<float>(N * Hl_ * D_);
    dk = scratch.alloc<float>(N * Gl_ * D_);
    dv = scratch.alloc<float>(N * Gl_ * Dv_);
    kernels::fill_zero(rc.k, dq, int64_t(sizeof(float)) * N * Hl_ * D_);
    kernels::fill_zero(rc.k, dk, int64_t(sizeof(float)) * N * Gl_ * D_);
    kernels::fill_zero(rc.k, dv, int64_t(sizeof(float)) * N * Gl_ * Dv_);
  }
  parallel::context_attention_backward(
      rc.k, rc.cp, layer_, scratch, dq, dk, dv, datt, st.q, st.k, st.v, st.att, st.lse,
      self_attention_shape(rc, tl, st.fused_qkv), attention_dropout(rc, cfg_, tl.drop, layer_, Hl_),
      st.bf16_values());
  if (st.bf16_values()) {
    // CP 1's order: the gradients rounded to bf16 in QKV's layout, RoPE's adjoint over them.
    bf16* dqkv = scratch.alloc<bf16>(N * qkv_l_);
    kernels::qkv_merge_grad(rc.k, dqkv, dq, dk, dv, N, Gl_, Hl_ / Gl_, D_);
    qkv_backward16(dqkv);
  } else if (st.fused_qkv) {
    rope_fused_qkv(rc, tl, dq, true);
    // FP8 quantises this gradient from bf16, as from the split path's merge (and as Transformer
    // Engine from its bf16 attention gradients); its bias gradient then sums bf16 values too.
    const Act dqkv = fp8_linear(rc, p_.weight(qkv_w_)) ? as_gemm_input(rc, scratch, dq, N * qkv_l_)
                                                       : Act::of(dq);
    linear_backward(rc, scratch, dln1_full, p_.grad(qkv_w_), opt_grad(p_, qkv_b_), dqkv, st.ln1_in,
                    p_.weight(qkv_w_), N, h, qkv_l_);
  } else if (mla_) {
    mla_->backward(rc, tl.pos, N, st.mla, scratch, st.ln1_in, dln1_full, dq, dk, dv);
  } else {
    if (cfg_.position_embedding_type == PositionEmbedding::kRope) {
      kernels::rope_backward(rc.k, dq, tl.pos, N, Hl_, D_, cfg_.rotary_dim(), rope_, 0);
      kernels::rope_backward(rc.k, dk, tl.pos, N, Gl_, D_, cfg_.rotary_dim(), rope_, 0);
    }
    if (q_norm_.w >= 0) {
      float* dq_in = scratch.alloc<float>(N * Hl_ * D_);
      float* dk_in = scratch.alloc<float>(N * Gl_ * D_);
      kernels::fill_zero(rc.k, dq_in, int64_t(sizeof(float)) * N * Hl_ * D_);
      kernels::fill_zero(rc.k, dk_in, int64_t(sizeof(float)) * N * Gl_ * D_);
      q_norm_.backward(rc, cfg_, p_, dq_in, dq, st.q_in, st.qn_mean, st.qn_rstd, N * Hl_);
      k_norm_.backward(rc, cfg_, p_, dk_in, dk, st.k_in, st.kn_mean, st.kn_rstd, N * Gl_);
      dq = dq_in;
      dk = dk_in;
    }
    // In bf16 mode the merge writes the QKV GEMMs' bf16 input itself.
    const auto merge = [&](auto* dqkv) {
      kernels::qkv_merge_grad(rc.k, dqkv, dq, dk, dv, N, Gl_, Hl_ / Gl_, D_);
      return Act::of(dqkv);
    };
    const Act dqkv = bf16_gemm_inputs(rc) ? merge(scratch.alloc<bf16>(N * qkv_l_))
                                          : merge(scratch.alloc<float>(N * qkv_l_));
    linear_backward(rc, scratch, dln1_full, p_.grad(qkv_w_), opt_grad(p_, qkv_b_), dqkv, st.ln1_in,
                    p_.weight(qkv_w_), N, h, qkv_l_);
  }
}

void TransformerLayer::backward(
    const RunCtx& rc, const TokenLayout& tl, Stash& st, Arena& scratch, float* dxy) const {
  const auto& tp = rc.tp;
  const int64_t N = tl.rows(), Nl = tp.sp_rows(N), h = h_;
  const bool sp = tp.sequence_parallel;

  // What selective recompute left out of the MLP block's stash (the norm's statistics are written
  // again with the values they hold).
  if (recompute_norms()) {
    float* ln2 = mlp_norm(rc, tl, st, scratch, scratch);
    if (moe_) st.moe.x = ln2;
  }
  if (recompute_moe()) {
    moe_->forward(rc, tl, &st.moe, scratch, scratch, st.moe.x, scratch.alloc<float>(Nl * h));
  }
  if (recompute_mlp()) mlp_up(rc, N, st, scratch, scratch);

  // MLP block: y = x2 + dropout(b2 + exit(fc2(act)) (+ routed experts)). dxy holds dy and
  // becomes dx2; dmlp is the MLP output's gradient.
  float* dln2 = nullptr;  // [Nl, h]
  float* dmlp = dropout_grad(rc, tl, scratch, "mlp_output", dxy);
  float* dpartial = dmlp;
  if (dense_mlp()) {
    // Without SP the bias gradient comes from fc2's output gradient itself (in linear_backward,
    // with its conversion); with SP from this rank's rows before the gather.
    if (fc2_b_ >= 0 && sp) kernels::bias_backward(rc.k, p_.grad(fc2_b_), dmlp, Nl, h);
    if (sp) {
      dpartial = scratch.alloc<float>(N * h);
      parallel::exit_tp_backward(tp, dpartial, dmlp, N, h);
    }
    // fc2's dgrad in fc1's output type (the activation's backward reads both); with GELU in
    // fc1's GEMM (a bf16 fc1 output) fc1's output gradient itself
    const bool gelu_in_gemm =
        cfg_.activation() == MlpActivation::kGelu && st.fc1.dtype == DType::kBF16;
    const auto fc2_dgrad = [&](auto* dact) {
      linear_backward(rc, scratch, dact, p_.grad(fc2_w_), sp ? nullptr : opt_grad(p_, fc2_b_),
                      dpartial, st.act_in, p_.weight(fc2_w_), N, Fl_, h,
                      gelu_in_gemm ? static_cast<const bf16*>(st.fc1.data) : nullptr);
      return Act::of(dact);
    };
    const Act dact = st.fc1.dtype == DType::kBF16 ? fc2_dgrad(scratch.alloc<bf16>(N * Fl_))
                                                  : fc2_dgrad(scratch.alloc<float>(N * Fl_));
    const int64_t fc1_w = cfg_.swiglu ? 2 * Fl_ : Fl_;
    float* dfc1_b = opt_grad(p_, fc1_b_);
    const Act dfc1 = gelu_in_gemm ? dact
                                  : mlp_activation_grad(rc, scratch, st.fc1, dact, N, Fl_,
                                                        cfg_.activation(), &dfc1_b);
    float* dln2_full = scratch.alloc<float>(N * h);
    linear_backward(rc, scratch, dln2_full, p_.grad(fc1_w_), dfc1_b, dfc1, st.ln2_in,
                    p_.weight(fc1_w_), N, h, fc1_w);
    dln2 = sp ? scratch.alloc<float>(Nl * h) : dln2_full;
    parallel::enter_tp_backward(tp, dln2, dln2_full, N, h);
  }
  if (moe_) {
    float* drouted = scratch.alloc<float>(Nl * h);
    moe_->backward(rc, tl, st.moe, scratch, dmlp, drouted);
    if (dln2) {
      kernels::add(rc.k, dln2, dln2, drouted, Nl * h);
    } else {
      dln2 = drouted;
    }
  }
  ln2_.backward(rc, cfg_, p_, dxy, dln2, st.x2, st.ln2_mean, st.ln2_rstd, Nl);

  // Attention block: x2 = x + dropout(b + exit(proj(att))). dxy holds dx2 and becomes dx.
  float* dattn = dropout_grad(rc, tl, scratch, "attention_output", dxy);
  if (proj_b_ >= 0 && sp) kernels::bias_backward(rc.k, p_.grad(proj_b_), dattn, Nl, h);
  dpartial = dattn;
  if (sp) {
    dpartial = scratch.alloc<float>(N * h);
    parallel::exit_tp_backward(tp, dpartial, dattn, N, h);
  }
  // What selective recompute left out of the attention block's stash.
  if (recompute_norms())
    norm_input(rc, tl, ln1_, st.x, st.ln1_mean, st.ln1_rstd, false, &st.ln1_in, scratch, scratch);
  if (mla_ && mla_->recompute_up()) {
    st.q = scratch.alloc<float>(N * Hl_ * D_);
    st.k = scratch.alloc<float>(N * Gl_ * D_);
    st.v = scratch.alloc<float>(N * Gl_ * Dv_);
    mla_->up(rc, tl.pos, N, st.mla, scratch, st.ln1_in, st.q, st.k, st.v);
  }
  if (st.bf16_values()) {  // the bf16 q, k, v and output, widened
    widen_qkv(rc, tl, st, scratch);
    st.att = scratch.alloc<float>(N * Hl_ * Dv_);
    kernels::convert(rc.k, st.att, static_cast<const bf16*>(st.att_in.data), N * Hl_ * Dv_);
  }
  float* dln1_full = scratch.alloc<float>(N * h);
  attention_block_backward(rc, tl, st, scratch, dpartial, dln1_full);
  float* dln1 = sp ? scratch.alloc<float>(Nl * h) : dln1_full;
  parallel::enter_tp_backward(tp, dln1, dln1_full, N, h);
  ln1_.backward(rc, cfg_, p_, dxy, dln1, st.x, st.ln1_mean, st.ln1_rstd, Nl);
}

}  // namespace mtron::model
