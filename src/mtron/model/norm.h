// defines: Norm
//
// A LayerNorm or RMSNorm layer (cfg.normalization) as the transformer layer and multi-latent
// attention's latent norms use it.
#pragma once

#include <cstdint>
#include <string>

#include "mtron/core/model_config.h"
#include "mtron/model/linear.h"
#include "mtron/model/params.h"

namespace mtron::model {

// A LayerNorm or RMSNorm (cfg.normalization) over rows of `width` channels, with its parameter
// handles.
struct Norm {
  int w = -1, b = -1;  // b only for LayerNorm
  int64_t width = 0;
  // Registers weight (and bias) named prefix + ".weight"/".bias" for rows of `width` (0: the
  // hidden size). With --apply-layernorm-1p the weight starts at 0 and the norm applies
  // 1 + weight (the gradient is the same). `tp_partial`: replicated over TP with a gradient
  // partial per TP rank (ParamSpec::sequence_parallel).
  void add_params(const ModelConfig& cfg,
                  const std::string& prefix,
                  bool tp_partial,
                  ParamBuffer& params,
                  int64_t width = 0);
  // out[n, width] (T: float, or bf16: the next GEMM's input); mean (LayerNorm only) and
  // rstd [n] saved.
  template <typename T>
  void forward(const RunCtx& rc,
               const ModelConfig& cfg,
               const ParamBuffer& p,
               T* out,
               float* mean,
               float* rstd,
               const float* in,
               int64_t n) const;
  // din[n, width] += d(norm)/d(in) dout; parameter grads accumulate.
  void backward(const RunCtx& rc,
                const ModelConfig& cfg,
                const ParamBuffer& p,
                float* din,
                const float* dout,
                const float* in,
                const float* mean,
                const float* rstd,
                int64_t n) const;
};

}  // namespace mtron::model
