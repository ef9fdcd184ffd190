// defines: MtpLayer
//
// One depth of multi-token prediction (DeepSeek-V3; Megatron-Core's MultiTokenPredictionLayer),
// without its embedding and output layer, which it shares with the model (GPTChunk runs those):
//
//   x   = eh_proj([enorm(e) | hnorm(hid)])   e: embeddings of the tokens rolled left by the depth,
//                                            hid: the previous depth's output (depth 1: the
//                                            decoder's output after its final norm)
//   out = final_layernorm(transformer_layer(x))
//
// The embeddings come first in the concatenation, as Megatron's. eh_proj [h, 2h] is
// column-parallel without bias: each TP rank computes its h/TP output channels from the gathered
// rows, and the channels are put together with a sum over TP of each rank's channels placed in
// zeros (exact), which is Megatron's gather of the channels followed by, with SP, its scatter to
// the sequence-parallel region. The transformer layer is a TransformerLayer (global layer index
// num_layers + depth, which keys its dropout masks and routing checksum), named
// mtp.layers.<depth>.transformer_layer.*, of the last decoder layer's kind as in Megatron: with an
// MoE last layer its MLP is routed experts (sharded over EP/ETP as the decoder's, their auxiliary
// losses in the gradient, their expert bias updated with the decoder's).
#pragma once

#include <cstdint>
#include <optional>

#include "mtron/core/arena.h"
#include "mtron/model/layer.h"

namespace mtron::model {

class MtpLayer {
 public:
  struct Stash {
    const float *e = nullptr, *hid = nullptr;  // the inputs [Nl, h] (owned by the caller)
    float *en_mean = nullptr, *en_rstd = nullptr, *hn_mean = nullptr, *hn_rstd = nullptr;
    Act en_in, hn_in;  // [N, h] eh_proj's GEMM inputs
    TransformerLayer::Stash layer;
    const float* y = nullptr;  // [Nl, h] the transformer layer's output
    float *fn_mean = nullptr, *fn_rstd = nullptr;
  };

  // Registers depth `depth`'s (0-based) parameters, mtp.layers.<depth>.*; its transformer layer
  // rebuilds the modules of selective recompute as the decoder's do (Megatron builds it from the
  // same config).
  MtpLayer(const ModelConfig& cfg,
           int64_t depth,
           const parallel::TensorParallel& tp,
           const parallel::ExpertParallel& ep,
           ParamBuffer& params,
           ParamBuffer& expert_params,
           RecomputeModules recompute = RecomputeModules{0});

  // out[Nl, h] from e[Nl, h] and hid[Nl, h]; stash buffers from `keep`, temporaries from
  // `scratch`.
  void forward(const RunCtx& rc,
               const TokenLayout& tl,
               Stash& st,
               Arena& keep,
               Arena& scratch,
               const float* e,
               const float* hid,
               float* out) const;
  // dout [Nl, h]: d(loss)/d(out), overwritten. Writes de [Nl, h] = d(loss)/d(e), adds
  // d(loss)/d(hid) to dhid [Nl, h]; parameter gradients accumulate.
  void backward(const RunCtx& rc,
                const TokenLayout& tl,
                Stash& st,
                Arena& scratch,
                float* dout,
                float* de,
                float* dhid) const;
  // The depth's transformer layer (MoE when the decoder's last layer is).
  TransformerLayer& layer() { return *layer_; }

 private:
  // norm(x) of this rank's rows as eh_proj's GEMM input [N, h] (gathered with SP).
  Act norm_input(const RunCtx& rc,
                 const TokenLayout& tl,
                 const Norm& n,
                 Arena& keep,
                 Arena& scratch,
                 const float* x,
                 float*& mean,
                 float*& rstd) const;

  const ModelConfig& cfg_;
  ParamBuffer& p_;
  int64_t h_, hl_;  // hidden size, this rank's eh_proj output channels
  Norm enorm_, hnorm_, final_norm_;
  int eh_w_ = -1;
  std::optional<TransformerLayer> layer_;  // built after the norms and eh_proj (their order)
};

}  // namespace mtron::model
