#include "mtron/model/norm.h"

#include "mtron/kernels/elementwise.h"
#include "mtron/kernels/norm.h"

namespace mtron::model {

void Norm::add_params(const ModelConfig& cfg,
                      const std::string& prefix,
                      bool tp_partial,
                      ParamBuffer& params,
                      int64_t n) {
  width = n > 0 ? n : cfg.hidden_size;
  const Shape shape = {width};
  ParamSpec ws{.name = prefix + ".weight",
               .global_shape = shape,
               .local_shape = shape,
               .init = cfg.apply_layernorm_1p ? ParamInit::kZeros : ParamInit::kOnes,
               .weight_decay = false,
               .sequence_parallel = tp_partial};
  w = params.add(ws);
  if (cfg.normalization == Normalization::kLayerNorm) {
    ParamSpec bs = ws;
    bs.name = prefix + ".bias";
    bs.init = ParamInit::kZeros;
    b = params.add(bs);
  }
}

namespace {

// The weight a norm applies: its parameter, or 1 + parameter (zero-centred, --apply-layernorm-1p)
// in `one_plus`.
const float* applied_weight(const RunCtx& rc,
                            const ModelConfig& cfg,
                            const ParamBuffer& p,
                            int w,
                            int64_t H,
                            Tensor& one_plus) {
  if (!cfg.apply_layernorm_1p) return p.master(w);
  one_plus = Tensor::empty({H}, DType::kF32, rc.k.device);
  kernels::fill(rc.k, one_plus.f32(), 1.0f, H);
  kernels::add(rc.k, one_plus.f32(), one_plus.f32(), p.master(w), H);
  return one_plus.f32();
}

}  // namespace

template <typename T>
void Norm::forward(const RunCtx& rc,
                   const ModelConfig& cfg,
                   const ParamBuffer& p,
                   T* out,
                   float* mean,
                   float* rstd,
                   const float* in,
                   int64_t n) const {
  Tensor one_plus;
  const float* gamma = applied_weight(rc, cfg, p, w, width, one_plus);
  if (cfg.normalization == Normalization::kLayerNorm) {
    kernels::layernorm_forward(rc.k, out, mean, rstd, in, gamma, p.master(b), n, width,
                               cfg.norm_epsilon);
  } else {
    kernels::rmsnorm_forward(rc.k, out, rstd, in, gamma, n, width, cfg.norm_epsilon);
  }
}
template void Norm::forward(const RunCtx&,
                            const ModelConfig&,
                            const ParamBuffer&,
                            float*,
                            float*,
                            float*,
                            const float*,
                            int64_t) const;
template void Norm::forward(const RunCtx&,
                            const ModelConfig&,
                            const ParamBuffer&,
                            bf16*,
                            float*,
                            float*,
                            const float*,
                            int64_t) const;

void Norm::backward(const RunCtx& rc,
                    const ModelConfig& cfg,
                    const ParamBuffer& p,
                    float* din,
                    const float* dout,
                    const float* in,
                    const float* mean,
                    const float* rstd,
                    int64_t n) const {
  Tensor one_plus;
  const float* gamma = applied_weight(rc, cfg, p, w, width, one_plus);
  if (cfg.normalization == Normalization::kLayerNorm) {
    kernels::layernorm_backward(rc.k, din, p.grad(w), p.grad(b), dout, in, gamma, mean, rstd, n,
                                width);
  } else {
    kernels::rmsnorm_backward(rc.k, din, p.grad(w), dout, in, gamma, rstd, n, width);
  }
}

}  // namespace mtron::model
