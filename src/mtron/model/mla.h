// defines: MlaProjection
//
// Multi-latent attention's query, key and value projections (core/mla_config.h), on this
// rank's tensor-parallel shard: q_up (or linear_q_proj) and kv_up are column-parallel by head,
// linear_q_down_proj, linear_kv_down_proj and the two latent norms (q_layernorm, kv_layernorm:
// only with --qk-layernorm, as in Megatron's MLA layer spec) are replicated over TP (Megatron's
// "duplicated" linears). They read the attention block's normed input on all N rows (gathered under
// sequence parallelism, as the QKV projection reads it), so each rank computes the same latents,
// and its heads contribute a part of their gradients: those parameters are TP-partial
// (ParamSpec::sequence_parallel, summed over TP after backward) and the input gradient is partial
// too (the caller's enter_tp_backward sums it).
//
// RoPE (rotate-half, kernels/rope.h) rotates the last qk_pos_emb_head_dim channels of each query
// head and the shared key kpe. Megatron's MLA first de-interleaves those channels (DeepSeek's
// interleaved pairs); that is a fixed permutation of the RoPE rows of linear_q_up_proj (or
// linear_q_proj) and linear_kv_down_proj, so the model family is the same, but a Megatron
// checkpoint's RoPE rows would need that permutation to load here.
#pragma once

#include <cstdint>
#include <string>

#include "mtron/core/arena.h"
#include "mtron/core/model_config.h"
#include "mtron/model/linear.h"
#include "mtron/model/norm.h"
#include "mtron/model/params.h"

namespace mtron::model {

class MlaProjection {
 public:
  struct Stash {
    float* qc = nullptr;  // [N, q_lora_rank] q_down's output (q_layernorm's input)
    float *q_mean = nullptr, *q_rstd = nullptr;
    Act qn_in;             // [N, q_lora_rank] q_up's GEMM input
    float* ckv = nullptr;  // [N, kv_lora_rank] kv_down's latent (kv_layernorm's input)
    float *kv_mean = nullptr, *kv_rstd = nullptr;
    Act kvn_in;  // [N, kv_lora_rank] kv_up's GEMM input
  };

  MlaProjection(const ModelConfig& cfg,
                const std::string& prefix,
                const parallel::TensorParallel& tp,
                ParamBuffer& params);

  // From x [N, h] (the GEMM input of all N rows): q [N, Hl, Dq], k [N, Hl, Dq] after RoPE and
  // v [N, Hl, Dv]. Stash buffers from `keep`, temporaries from `scratch`.
  void forward(const RunCtx& rc,
               const int32_t* pos,
               int64_t N,
               Stash& st,
               Arena& keep,
               Arena& scratch,
               Act x,
               float* q,
               float* k,
               float* v) const;
  // dx [N, h] (written: this rank's part) from dq, dk (in place: RoPE is undone there) and dv.
  // Parameter grads accumulate.
  void backward(const RunCtx& rc,
                const int32_t* pos,
                int64_t N,
                const Stash& st,
                Arena& scratch,
                Act x,
                float* dx,
                float* dq,
                float* dk,
                const float* dv) const;

 private:
  const ModelConfig& cfg_;
  const MlaConfig& m_;
  ParamBuffer& p_;
  int64_t Hl_, h_;
  Norm q_norm_, kv_norm_;        // w -1: none (no --qk-layernorm)
  int q_down_ = -1, q_up_ = -1;  // q_up_: linear_q_up_proj, or linear_q_proj without q_down_
  int kv_down_ = -1, kv_up_ = -1;
};

}  // namespace mtron::model
