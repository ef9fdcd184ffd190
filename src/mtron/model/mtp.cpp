#include "mtron/model/mtp.h"

#include <string>

#include "mtron/kernels/elementwise.h"
#include "mtron/kernels/gemm_operand.h"

namespace mtron::model {

using kernels::Trans;

namespace {

std::string depth_prefix(int64_t depth) {
  return "mtp.layers." + std::to_string(depth) + ".";
}

}  // namespace

MtpLayer::MtpLayer(const ModelConfig& cfg,
                   int64_t depth,
                   const parallel::TensorParallel& tp,
                   const parallel::ExpertParallel& ep,
                   ParamBuffer& params,
                   ParamBuffer& expert_params,
                   RecomputeModules recompute)
    : cfg_(cfg), p_(params), h_(cfg.hidden_size), hl_(cfg.hidden_size / tp.size) {
  const std::string pre = depth_prefix(depth);
  const bool sp = tp.sequence_parallel;
  enorm_.add_params(cfg, pre + "enorm", sp, params);
  hnorm_.add_params(cfg, pre + "hnorm", sp, params);
  eh_w_ = params.add(
      sharded_spec(pre + "eh_proj.weight", {h_, 2 * h_}, 0, tp.rank, tp.size, cfg.init_method_std));
  layer_.emplace(cfg, cfg.num_layers + depth, tp, ep, params, expert_params, recompute,
                 pre + "transformer_layer.");
  final_norm_.add_params(cfg, pre + "final_layernorm", sp, params);
}

Act MtpLayer::norm_input(const RunCtx& rc,
                         const TokenLayout& tl,
                         const Norm& n,
                         Arena& keep,
                         Arena& scratch,
                         const float* x,
                         float*& mean,
                         float*& rstd) const {
  const auto& tp = rc.tp;
  const int64_t N = tl.rows(), Nl = tp.sp_rows(N), h = h_;
  const bool sp = tp.sequence_parallel;
  float* y = sp ? scratch.alloc<float>(Nl * h) : gemm_input_buffer(rc, keep, scratch, Nl * h);
  mean = cfg_.normalization == Normalization::kLayerNorm ? keep.alloc<float>(Nl) : nullptr;
  rstd = keep.alloc<float>(Nl);
  n.forward(rc, cfg_, p_, y, mean, rstd, x, Nl);
  float* full = y;
  if (sp) {
    full = gemm_input_buffer(rc, keep, scratch, N * h);
    parallel::enter_tp_forward(tp, full, y, N, h);
  }
  return as_gemm_input(rc, keep, full, N * h);
}

void MtpLayer::forward(const RunCtx& rc,
                       const TokenLayout& tl,
                       Stash& st,
                       Arena& keep,
                       Arena& scratch,
                       const float* e,
                       const float* hid,
                       float* out) const {
  const auto& tp = rc.tp;
  const int64_t N = tl.rows(), Nl = tp.sp_rows(N), h = h_;
  st.e = e;
  st.hid = hid;
  st.en_in = norm_input(rc, tl, enorm_, keep, scratch, e, st.en_mean, st.en_rstd);
  st.hn_in = norm_input(rc, tl, hnorm_, keep, scratch, hid, st.hn_mean, st.hn_rstd);

  // This rank's channels of [en | hn] W^T, in place among the zeros of the others' channels.
  float* x = keep.alloc<float>(Nl * h);
  float* placed = tp.sequence_parallel ? scratch.alloc<float>(N * h) : x;
  if (tp.size > 1) kernels::fill_zero(rc.k, placed, int64_t(sizeof(float)) * N * h);
  const Act w = p_.weight(eh_w_);
  float* mine = placed + tp.rank * hl_;
  kernels::gemm(rc.k, Trans::kN, Trans::kT, N, hl_, h, 1.0f, st.en_in, h, w, 2 * h, 0.0f, mine, h);
  kernels::gemm(rc.k, Trans::kN, Trans::kT, N, hl_, h, 1.0f, st.hn_in, h, w.at(h), 2 * h, 1.0f,
                mine, h);
  parallel::exit_tp_forward(tp, x, placed, N, h);

  float* y = keep.alloc<float>(Nl * h);
  layer_->forward(rc, tl, &st.layer, keep, scratch, x, y);
  st.y = y;
  st.fn_mean = cfg_.normalization == Normalization::kLayerNorm ? keep.alloc<float>(Nl) : nullptr;
  st.fn_rstd = keep.alloc<float>(Nl);
  final_norm_.forward(rc, cfg_, p_, out, st.fn_mean, st.fn_rstd, y, Nl);
}

void MtpLayer::backward(const RunCtx& rc,
                        const TokenLayout& tl,
                        Stash& st,
                        Arena& scratch,
                        float* dout,
                        float* de,
                        float* dhid) const {
  const auto& tp = rc.tp;
  const int64_t N = tl.rows(), Nl = tp.sp_rows(N), h = h_;
  const bool sp = tp.sequence_parallel;
  float* dy = scratch.alloc<float>(Nl * h);
  kernels::fill_zero(rc.k, dy, int64_t(sizeof(float)) * Nl * h);
  final_norm_.backward(rc, cfg_, p_, dy, dout, st.y, st.fn_mean, st.fn_rstd, Nl);
  layer_->backward(rc, tl, st.layer, scratch, dy);  // dy: d(loss)/d(x) now

  // eh_proj: this rank's channels of d(loss)/d(x), over all rows.
  float* dfull = sp ? scratch.alloc<float>(N * h) : dy;
  parallel::exit_tp_backward(tp, dfull, dy, N, h);
  const Act g = as_gemm_input(rc, scratch, dfull, N * h).at(tp.rank * hl_);
  const Act w = p_.weight(eh_w_);
  float* dw = p_.grad(eh_w_);
  kernels::gemm(rc.k, Trans::kT, Trans::kN, hl_, h, N, 1.0f, g, h, st.en_in, h, 1.0f, dw, 2 * h);
  kernels::gemm(rc.k, Trans::kT, Trans::kN, hl_, h, N, 1.0f, g, h, st.hn_in, h, 1.0f, dw + h,
                2 * h);
  // Each input half's gradient (partial over TP), back through its norm.
  auto input_grad = [&](const Norm& n, int64_t half, const float* x, const float* mean,
                        const float* rstd, float* dx) {
    float* dpart = scratch.alloc<float>(N * h);
    kernels::gemm(rc.k, Trans::kN, Trans::kN, N, h, hl_, 1.0f, g, h, w.at(half * h), 2 * h, 0.0f,
                  dpart, h);
    float* dnorm = sp ? scratch.alloc<float>(Nl * h) : dpart;
    parallel::enter_tp_backward(tp, dnorm, dpart, N, h);
    n.backward(rc, cfg_, p_, dx, dnorm, x, mean, rstd, Nl);
  };
  kernels::fill_zero(rc.k, de, int64_t(sizeof(float)) * Nl * h);
  input_grad(enorm_, 0, st.e, st.en_mean, st.en_rstd, de);
  input_grad(hnorm_, 1, st.hid, st.hn_mean, st.hn_rstd, dhid);
}

}  // namespace mtron::model
