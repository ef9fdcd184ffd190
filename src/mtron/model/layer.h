// defines: TokenLayout, LayerKv, TransformerLayer
//
// One pre-norm transformer layer (Megatron-Core's TransformerLayer with the local spec):
//   x2 = x  + proj(attention(rope(qkv(norm1(x)))))       attention block
// (with --multi-latent-attention, q, k, v come from MLA's latent projections instead: mla.h)
//   y  = x2 + fc2(act(fc1(norm2(x2))))                    MLP block (GELU or SwiGLU)
// on this rank's tensor-parallel shard: QKV and fc1 are column-parallel (by query group, and by
// [gate|up] blocks), proj and fc2 row-parallel, with the TP/SP mappings of parallel/mappings.h
// around them. Rows are tokens, sequence-major (n = s*B + b); with sequence parallelism the
// residual stream holds this rank's S/TP block of the sequence. With context parallelism the
// rows are this rank's two sequence chunks and attention is ring attention over the CP group.
//
// In an MoE layer (cfg.is_moe_layer) the MLP block is the routed experts (moe.h) plus, with
// --moe-shared-expert-intermediate-size, a shared expert: a dense MLP of that size, named
// mlp.shared_experts.*, whose output is added to the experts'.
//
// Dropout (dropout.h, in training): hidden dropout of the attention and MLP outputs before
// their residual adds, attention dropout inside the attention kernel; backward regenerates the
// masks.
//
// forward() saves what backward needs in a Stash carved from an arena the caller owns (one per
// micro-batch in flight); backward() works in place on the residual gradient. Selective recompute
// (--recompute-modules) leaves parts out of the stash (in the scratch arena of the forward
// only), and backward rebuilds them into its own scratch before the block that reads them, from
// the same inputs with the same kernels, so the gradients are bit for bit those without:
//   layernorm       both norms' outputs (from the stashed inputs x and x2)
//   mla_up_proj     MLA's q, k and v (from its stashed latents and rotated RoPE key)
//   mlp             a dense layer's fc1 output and activation (from fc1's stashed input)
//   shared_experts  the same of an MoE layer's shared expert
//   moe             all of an MoE layer's MLP but its input: the routed experts' forward
//                   (router, dispatch, experts, combine) runs again, and the shared expert's
//   moe_act         the routed experts' activation (moe.h)
//   core_attn       nothing: attention stashes only its output and log-sum-exp, both needed Without
//   a stash
// (inference: evaluation of generation) everything comes from the scratch arena. Generation
// passes a KV cache: the new rows' keys and values are appended to it and the queries attend to
// every cached position (Megatron's inference key/value memory).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "mtron/core/arena.h"
#include "mtron/core/formulas.h"
#include "mtron/core/model_config.h"
#include "mtron/model/dropout.h"
#include "mtron/model/linear.h"
#include "mtron/model/mla.h"
#include "mtron/model/moe.h"
#include "mtron/model/norm.h"
#include "mtron/model/params.h"

namespace mtron::model {

// Token rows of one micro-batch on this rank (after CP splitting, before SP splitting).
struct TokenLayout {
  int64_t B = 0;                 // sequences
  int64_t S = 0;                 // tokens per sequence on this rank
  const int32_t* pos = nullptr;  // [S*B] position of each row in its sequence
  float aux_weight = 1.0f;       // weight of per-micro-batch auxiliary losses (MoE)
  StepDropout drop{};            // the masks' key (dropout.h); off: no dropout
  bool train = true;             // a training forward (false: evaluation; moe.h's Sinkhorn)
  int64_t rows() const { return S * B; }
};

// One layer's keys and values (after RoPE) of the positions so far, on the run's device:
// k [capacity, B, Gl, D], v [capacity, B, Gl, Dv] (sequence-major, as attention reads them), of
// which the first `length` positions are filled. TP 1 and CP 1 (generation runs one whole
// model). Multi-latent attention caches its compressed latent instead (mla.h attend_cached):
// k [capacity, B, kv_lora_rank + qk_pos_emb_head_dim], v null.
struct LayerKv {
  float* k = nullptr;
  float* v = nullptr;
  int64_t capacity = 0, length = 0;
};

class TransformerLayer {
 public:
  struct Stash {
    const float* x = nullptr;  // input [Nl, h] (owned by the caller)
    float *ln1_mean = nullptr, *ln1_rstd = nullptr;
    Act ln1_in;  // [N, h] QKV's GEMM input
    float *q = nullptr, *k = nullptr,
          *v = nullptr;      // [N, Hl, D], [N, Gl, D] after RoPE, [N, Gl, Dv]
    bool fused_qkv = false;  // q, k, v: views of the QKV projection's output (AttnShape)
    // bf16 attention (bf16_qkv) at CP 1 or by an a2a layer (parallel::attends_fused): what the
    // bf16 ops read and wrote, the QKV projection's bf16 output (after RoPE) and attention's
    // output, head-sharded under a2a (q, k, v above null; att_in the bf16 output, att null).
    parallel::FusedHeads fused16;
    // bf16 attention by the other CP communications (bf16_values()): the QKV projection's bf16
    // output after RoPE. q, k, v, att and attention's output gradient then hold the bf16 values
    // CP 1's bf16 attention reads, so the CP exchanges move them as bf16. The stash keeps qkv16
    // and att_in alone: q, k, v and att are temporaries widened from them (widen_qkv), in the
    // forward and again in the backward.
    bf16* qkv16 = nullptr;
    bool bf16_values() const { return qkv16 != nullptr; }
    MlaProjection::Stash mla;  // multi-latent attention's latents
    // --qk-layernorm (without MLA): q and k before their norms, the norms' statistics per head row.
    float *q_in = nullptr, *k_in = nullptr;
    float *qn_mean = nullptr, *qn_rstd = nullptr, *kn_mean = nullptr, *kn_rstd = nullptr;
    float *att = nullptr, *lse = nullptr;  // [N, Hl*Dv], [B, Hl, S]
    Act att_in;                            // proj's GEMM input
    float* x2 = nullptr;                   // [Nl, h]
    float *ln2_mean = nullptr, *ln2_rstd = nullptr;
    Act ln2_in;  // [N, h]
    Act fc1;     // [N, Fl or 2 Fl] before the activation: fp32, or bf16 (bf16_gemm_outputs)
    Act act_in;  // [N, Fl] fc2's GEMM input
    MoELayer::Stash moe;  // MoE layers
  };

  // Registers this layer's parameters (global layer index `layer`) for TP rank/size of tp; an
  // MoE layer's experts go to `expert_params` (this EP rank's experts, ETP shards). `recompute`:
  // the modules selective recompute rebuilds. Parameter names start with `prefix` (empty:
  // "decoder.layers.<layer>."); the layer index keys the dropout masks.
  TransformerLayer(const ModelConfig& cfg,
                   int64_t layer,
                   const parallel::TensorParallel& tp,
                   const parallel::ExpertParallel& ep,
                   ParamBuffer& params,
                   ParamBuffer& expert_params,
                   RecomputeModules recompute = RecomputeModules{0},
                   const std::string& prefix = {});

  // y[Nl, h] from x[Nl, h]; stash buffers from `keep`, temporaries from `scratch`. st null: no
  // stash (nothing kept, `keep` unused). kv: the rows are the next tl.S positions of each of the
  // tl.B sequences of the cache, whose keys and values they append (kv->length is the caller's
  // to advance).
  void forward(const RunCtx& rc,
               const TokenLayout& tl,
               Stash* st,
               Arena& keep,
               Arena& scratch,
               const float* x,
               float* y,
               const LayerKv* kv = nullptr) const;
  // In place: dxy holds dL/dy [Nl, h] on entry and dL/dx on exit. Accumulates parameter grads.
  // What selective recompute left out of st is rebuilt into `scratch` (st then points there).
  void backward(
      const RunCtx& rc, const TokenLayout& tl, Stash& st, Arena& scratch, float* dxy) const;
  // The routed experts of an MoE layer, else null.
  MoELayer* moe() { return moe_.get(); }

 private:
  bool dense_mlp() const { return fc1_w_ >= 0; }
  // What selective recompute rebuilds in this layer.
  bool recompute_norms() const { return recompute_.has(RecomputeModule::kLayernorm); }
  bool recompute_moe() const { return moe_ && recompute_.has(RecomputeModule::kMoe); }
  bool recompute_mlp() const {
    return dense_mlp() && (moe_ ? recompute_moe() || recompute_.has(RecomputeModule::kSharedExperts)
                                : recompute_.has(RecomputeModule::kMlp));
  }
  // norm(x) for x [Nl, h] (statistics into mean and rstd): with gemm_in, the following GEMM's
  // input of all N rows (gathered over SP; in bf16 written by the norm where it may be); with
  // `routed`, the fp32 output [Nl, h] returned (the routed experts' input; else null). From `keep`.
  float* norm_input(const RunCtx& rc,
                    const TokenLayout& tl,
                    const Norm& norm,
                    const float* x,
                    float* mean,
                    float* rstd,
                    bool routed,
                    Act* gemm_in,
                    Arena& keep,
                    Arena& scratch) const;
  // pre_mlp_layernorm of st.x2 (its statistics and a dense MLP's GEMM input into st): the routed
  // experts' fp32 input, or null without them.
  float* mlp_norm(
      const RunCtx& rc, const TokenLayout& tl, Stash& st, Arena& keep, Arena& scratch) const {
    return norm_input(rc, tl, ln2_, st.x2, st.ln2_mean, st.ln2_rstd, moe_ != nullptr,
                      dense_mlp() ? &st.ln2_in : nullptr, keep, scratch);
  }
  // The dense MLP's fc1 output and activation (st.fc1, st.act_in) from st.ln2_in, from `keep`.
  void mlp_up(const RunCtx& rc, int64_t N, Stash& st, Arena& keep, Arena& scratch) const;
  // st.att (or, with bf16_qkv, st.att_in) from the normed input st.ln1_in: q, k and v (QKV or
  // MLA's projections, norms, RoPE; in st), then attention().
  void qkv_attention(const RunCtx& rc,
                     const TokenLayout& tl,
                     Stash& st,
                     Arena& keep,
                     Arena& scratch,
                     const LayerKv* kv) const;
  // Whether attention in the fused QKV layout reads and writes bf16 (the bf16 attention ops):
  // the QKV projection's bf16 output in place (RoPE rotating it there), a bf16 output that is
  // the output projection's GEMM input, bf16 gradients that are QKV's. Where the tensor-core
  // kernels run (bf16 products, no attention dropout) and both projections' GEMMs write bf16
  // (not FP8).
  bool bf16_qkv(const RunCtx& rc, const TokenLayout& tl, bool fused_qkv) const;
  // st.q, st.k, st.v from st.qkv16: widened and split into temporaries from `scratch`.
  void widen_qkv(const RunCtx& rc, const TokenLayout& tl, Stash& st, Arena& scratch) const;
  // RoPE (with --position-embedding-type rope; else nothing) in place over the fused QKV buffer
  // qkv [N, Gl, Hl / Gl + 2, D] (fp32 or bf16) or its gradient (adjoint): the query and key
  // heads rotated, the value heads not.
  template <typename T>
  void rope_fused_qkv(const RunCtx& rc, const TokenLayout& tl, T* qkv, bool adjoint) const;
  // The shape of the rows' attention over themselves (training), fused_qkv: AttnShape's.
  kernels::AttnShape self_attention_shape(const RunCtx& rc,
                                          const TokenLayout& tl,
                                          bool fused_qkv) const;
  // The attention block's backward from the output projection's output gradient dpartial
  // [N, h] (fp32) to QKV's input gradient dln1_full [N, h]: with st.qkv16 (bf16_qkv) in bf16,
  // else in fp32.
  void attention_block_backward(const RunCtx& rc,
                                const TokenLayout& tl,
                                const Stash& st,
                                Arena& scratch,
                                const float* dpartial,
                                float* dln1_full) const;
  // Attention of the new rows: over themselves (training, with ring attention over CP) or over
  // the cache they are appended to.
  void attention(
      const RunCtx& rc, const TokenLayout& tl, Stash& st, Arena& scratch, const LayerKv* kv) const;
  // The gradient of a block's output before its hidden dropout, from dy [Nl, h] (the residual
  // stream's gradient): a masked copy in `scratch`, or dy itself without dropout.
  float* dropout_grad(const RunCtx& rc,
                      const TokenLayout& tl,
                      Arena& scratch,
                      std::string_view kind,
                      float* dy) const;

  const ModelConfig& cfg_;
  ParamBuffer& p_;
  int64_t layer_;  // global layer index
  // local heads, local groups, query/key and value head dims, local ffn, hidden
  int64_t Hl_, Gl_, D_, Dv_, Fl_, h_;
  float softmax_scale_;     // 1/sqrt(D), or MLA's (core/mla_config.h)
  kernels::RopeFreq rope_;  // standard attention's RoPE
  int64_t qkv_l_;           // local QKV width: Gl * (H/G + 2) * D
  Norm ln1_, ln2_;
  Norm q_norm_, k_norm_;  // --qk-layernorm (w -1: none)
  // parameter handles (-1: absent)
  int qkv_w_ = -1, qkv_b_ = -1, proj_w_ = -1, proj_b_ = -1;
  int fc1_w_ = -1, fc1_b_ = -1, fc2_w_ = -1, fc2_b_ = -1;  // dense MLP or shared expert
  std::unique_ptr<MoELayer> moe_;
  std::unique_ptr<MlaProjection> mla_;  // multi-latent attention, in place of linear_qkv
  RecomputeModules recompute_;
};

}  // namespace mtron::model
