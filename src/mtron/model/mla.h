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
//
// Generation (attend_cached) caches the compressed latent, not the expanded keys and values:
// per position kv_layernorm(ckv) and the rotated RoPE key, kv_lora_rank + Dr floats shared by
// all heads, against H (Dq + Dv) for the expanded form (DeepSeek-V3: 576 against 40960).
#pragma once

#include <cstdint>
#include <string>

#include "mtron/core/arena.h"
#include "mtron/core/model_config.h"
#include "mtron/kernels/rope.h"
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
    Act kvn_in;            // [N, kv_lora_rank] kv_up's GEMM input
    float* kpe = nullptr;  // [N, Dr] the shared RoPE key after RoPE (with recompute_up only)
  };

  MlaProjection(const ModelConfig& cfg,
                const std::string& prefix,
                const parallel::TensorParallel& tp,
                ParamBuffer& params,
                bool recompute_up = false);

  // From x [N, h] (the GEMM input of all N rows): q [N, Hl, Dq], k [N, Hl, Dq] after RoPE and
  // v [N, Hl, Dv]. Stash buffers from `keep`, temporaries from `scratch`. With recompute_up
  // (--recompute-modules mla_up_proj) the stash also keeps the rotated RoPE key, from which
  // up() makes q, k and v again.
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
  // q, k and v again, as forward() made them, from its stash (recompute_up) and x.
  void up(const RunCtx& rc,
          const int32_t* pos,
          int64_t N,
          const Stash& st,
          Arena& scratch,
          Act x,
          float* q,
          float* k,
          float* v) const;
  bool recompute_up() const { return recompute_up_; }
  // Generation over the cache [capacity, B, MlaConfig::latent_width()] (sequence-major,
  // [kv_layernorm(ckv) | rope(kpe)] per row) whose first `cached` positions are filled: appends the
  // N = S*B new rows x [N, h] (positions cached .. cached + S - 1, pos[N]) and writes att [N,
  // Hl*Dv], their attention over every cached position. Where the device's attention kernel takes
  // head dim latent_width(), kv_up is absorbed (DeepSeek-V2's inference form): per head the query
  // becomes [q_nope W_UK | q_pe] and attention runs with one key/value group whose keys and
  // values are the cache rows themselves (softmax scale 1/sqrt(Dq)); the output's latent part
  // then goes through W_UV. That is the same function (q.k = (q_nope W_UK).c + q_pe.kpe,
  // sum p v = W_UV sum p c), reading latent_width() floats per cached position for all heads at
  // once. Otherwise kv_up expands the cached latents into keys and values and attention runs as
  // in training. Temporaries from `scratch`.
  void attend_cached(const RunCtx& rc,
                     const int32_t* pos,
                     int64_t B,
                     int64_t S,
                     Arena& scratch,
                     Act x,
                     float* cache,
                     int64_t cached,
                     float* att) const;

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
  // q [N, Hl, Dq] after RoPE from x (q_down, q_layernorm and q_up, or linear_q_proj).
  void query(const RunCtx& rc,
             const int32_t* pos,
             int64_t N,
             Stash& st,
             Arena& keep,
             Arena& scratch,
             Act x,
             float* q) const;
  // q [N, Hl, Dq] after RoPE from q_up's GEMM input (the normed query latent, or x).
  void query_up(const RunCtx& rc, const int32_t* pos, int64_t N, Act in, float* q) const;
  // k [N, Hl, Dq] and v [N, Hl, Dv] from kv_up's GEMM input and the rotated RoPE key kpe.
  void expand(const RunCtx& rc,
              int64_t N,
              Arena& scratch,
              Act kvn_in,
              const float* kpe,
              float* k,
              float* v) const;
  // The latent kv_layernorm(ckv) [N, kv_lora_rank] (returned, fp32; its GEMM input in
  // st.kvn_in) and kpe [N, Dr] after RoPE from x.
  const float* latent(const RunCtx& rc,
                      const int32_t* pos,
                      int64_t N,
                      Stash& st,
                      Arena& keep,
                      Arena& scratch,
                      Act x,
                      float* kpe) const;
  // The GEMM input of norm(in) [N, width], its statistics in *mean and *rstd, or of `in` itself
  // when the norm is absent (no --qk-layernorm); *normed: the fp32 tensor the input is of.
  Act normed_input(const RunCtx& rc,
                   const Norm& norm,
                   Arena& keep,
                   Arena& scratch,
                   float* in,
                   int64_t N,
                   int64_t width,
                   float** mean,
                   float** rstd,
                   float** normed = nullptr) const;
  // d(norm input) [N, width] from d(norm output) dout: dout itself when the norm is absent.
  const float* norm_backward(const RunCtx& rc,
                             Arena& scratch,
                             const Norm& norm,
                             const float* dout,
                             const float* in,
                             const float* mean,
                             const float* rstd,
                             int64_t N,
                             int64_t width) const;

  const ModelConfig& cfg_;
  const MlaConfig& m_;
  ParamBuffer& p_;
  int64_t Hl_, h_;
  Norm q_norm_, kv_norm_;        // w -1: none (no --qk-layernorm)
  kernels::RopeFreq rope_;       // plain RoPE or YaRN (core/mla_config.h)
  int q_down_ = -1, q_up_ = -1;  // q_up_: linear_q_up_proj, or linear_q_proj without q_down_
  int kv_down_ = -1, kv_up_ = -1;
  bool recompute_up_;
};

}  // namespace mtron::model
