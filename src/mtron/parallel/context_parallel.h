// defines: ContextParallel, context_attention_forward, context_attention_backward, FusedHeads,
//          attends_fused, fused_attention_forward, fused_attention_backward, WidenedQkv, widen_qkv
//
// Context parallelism (Megatron's --context-parallel-size). The sequence is cut into 2*CP chunks
// of c = S/(2*CP) tokens; CP rank r holds chunks r and 2*CP-1-r (one early, one late: every rank
// then has the same share of the causal work). Its local rows are the two chunks one after the
// other, sequence-major as everywhere ([2c, B, ...], row = s_local*B + b).
//
// Attention needs every earlier token's keys and values. How they meet the queries is the
// layer's --cp-comm-type (CpCommType, core/parallel_config.h):
//   p2p         ring attention (ring_attention.h): K/V blocks travel round the CP ring.
//   all_gather  every rank gathers the whole sequence's K and V (all_gather over CP, put in
//               sequence order) and attends each of its chunks to the prefix it sees (chunk i:
//               chunks 0..i, causal with offset i*c; one attention call per chunk, no merge);
//               backward gathers them again and reduce-scatters the dK/dV of the whole sequence.
//   a2a         DeepSpeed-Ulysses: an all-to-all over CP gives every rank the whole sequence,
//               in order, for H/CP of the heads (G/CP of the K/V groups); attention runs on it as
//               at CP 1, computing per head what CP 1 computes, and a second all-to-all brings
//               the output's rows home. Backward sends q, k, v, out and dout again and dq, dk, dv
//               back (nothing head-sharded is kept between the passes).
//   a2a+p2p     the all-to-all inside groups of a adjacent CP ranks (the first level of
//               --hierarchical-context-parallel-sizes): after it, group o (of p = CP/a) holds
//               chunks o*a .. o*a+a-1 and their mirror images, that is super-chunks o and 2p-1-o
//               of a*c tokens, for H/a heads: ring attention's layout over p ranks, so the ring
//               runs across the groups (the second level: the ranks at one place in each group).
//
// Bytes each rank sends per attention call (Q, K, V, O: this rank's q, k, v and out in fp32; at
// a2a+p2p the ring's blocks are as large as this rank's K + V; f = (a-1)/a):
//   p2p         forward (CP-1)(K+V), backward 2(CP-1)(K+V)
//   all_gather  forward (CP-1)(K+V), backward 2(CP-1)(K+V)
//   a2a         forward f(Q+K+V+O), backward 2f(Q+K+V+O)        (a = CP)
//   a2a+p2p     a2a's over a, plus p2p's over p
// With bf16 values (bf16 training: q, k, v, out and dout hold bf16 values, as CP 1's bf16
// attention reads them) those tensors travel as bf16, exactly; gradients and partial sums (the
// ring's dK/dV partials, all_gather's reduce-scatter, a2a's dq, dk, dv) stay fp32:
//   p2p         forward (CP-1)(K+V)/2, backward 3/2 (CP-1)(K+V)
//   all_gather  forward (CP-1)(K+V)/2, backward 3/2 (CP-1)(K+V)
//   a2a         forward f(Q+K+V+O)/2, backward f(3/2 (Q+K+V) + O)
// (bf16 training's a2a and a2a+p2p layers, in QKV's fused layout, exchange less: below).
//
// lse's layout is the communication type's own (what backward reads back): two [B, H, c] halves
// for p2p and all_gather, the ring's halves of the head-sharded sequence for a2a and a2a+p2p.
// Attention dropout follows the 1-process run: every call gets its global positions and heads.
#pragma once

#include <cstdint>
#include <vector>

#include "mtron/comm/comm.h"
#include "mtron/core/arena.h"
#include "mtron/core/parallel_config.h"
#include "mtron/kernels/attention.h"

namespace mtron::parallel {

struct ContextParallel {
  ContextParallel() = default;
  ContextParallel(Comm* group, int64_t group_rank, int64_t group_size)
      : comm(group), rank(group_rank), size(group_size) {}

  Comm* comm = nullptr;  // the CP group (may be null when size == 1)
  int64_t rank = 0;
  int64_t size = 1;
  // The layers' --cp-comm-type: one per transformer layer or one for all (ParallelConfig's
  // cp_comms()); empty: p2p.
  std::vector<CpCommType> types;
  // a2a+p2p: the first hierarchical level (the all-to-all over adjacent CP ranks) and the
  // second (the ring across those groups).
  Comm* a2a_level = nullptr;
  Comm* ring_level = nullptr;

  // Global chunk index of local half `half` (0 or 1), of this rank or of CP rank r of `cp_size`.
  int64_t chunk(int64_t half) const { return chunk_of(rank, size, half); }
  static int64_t chunk_of(int64_t r, int64_t cp_size, int64_t half) {
    return half == 0 ? r : 2 * cp_size - 1 - r;
  }
  // Global sequence position of local sequence index s, with S_local tokens per sequence on
  // this rank (the identity when size == 1).
  int64_t position(int64_t s, int64_t S_local) const {
    if (size == 1) return s;
    const int64_t c = S_local / 2;
    return chunk(s / c) * c + s % c;
  }
  // The communication of transformer layer `layer` (an MTP depth's, numbered from the decoder's
  // last on, takes the last entry's); p2p (plain attention) at size 1.
  CpCommType type(int64_t layer) const {
    if (types.empty() || size == 1) return CpCommType::kP2P;
    return types[layer < int64_t(types.size()) ? size_t(layer) : types.size() - 1];
  }
};

// out[S, B, H, Dv] and lse from this rank's q[S, B, H, D], k[S, B, G, D], v[S, B, G, Dv] (S = s.Sq
// = s.Sk local tokens per sequence), causal over the global sequence, by transformer layer
// `layer`'s communication type. Collective over the CP group; with size 1 it is plain causal
// attention. Temporaries come from `scratch`. bf16_values: q, k, v hold bf16 values and the
// caller rounds `out` to bf16 (which a2a's exchange of it then does).
void context_attention_forward(const kernels::Ctx& ctx,
                               const ContextParallel& cp,
                               int64_t layer,
                               Arena& scratch,
                               float* out,
                               float* lse,
                               const float* q,
                               const float* k,
                               const float* v,
                               const kernels::AttnShape& s,
                               const kernels::AttnDropout& drop = {},
                               bool bf16_values = false);

// dq, dk, dv (+=) of this rank's rows; out and lse are the forward's. bf16_values: q, k, v, out
// and dout hold bf16 values.
void context_attention_backward(const kernels::Ctx& ctx,
                                const ContextParallel& cp,
                                int64_t layer,
                                Arena& scratch,
                                float* dq,
                                float* dk,
                                float* dv,
                                const float* dout,
                                const float* q,
                                const float* k,
                                const float* v,
                                const float* out,
                                const float* lse,
                                const kernels::AttnShape& s,
                                const kernels::AttnDropout& drop = {},
                                bool bf16_values = false);

// bf16 attention in QKV's fused layout (bf16 training's: kernels::AttnShape::fused_qkv, the bf16
// attention ops) at CP 1, and under an a2a or a2a+p2p layer (attends_fused): an all-to-all of the
// fused rows gives each rank the whole sequence (a2a+p2p: its group's super-chunks) for G/a of the
// query groups, each with its query heads, key and value (adjacent in a row). a2a attends there
// as at CP 1, by the same bf16 ops (cuDNN's fused attention on CUDA where it takes the shape);
// a2a+p2p runs the ring across the groups on the widened q, k, v (K/V blocks as bf16) and rounds
// its output as CP 1 does. A second all-to-all brings the bf16 output home. Backward sends the
// output gradient there and dq, dk, dv back (a2a+p2p: the ring's fp32 sums rounded once). The
// head-sharded q, k, v and output are kept for the backward (as Transformer Engine keeps them),
// so each pass of the all-to-all exchanges two tensors, all bf16: forward f (Q + K + V + O) / 2
// bytes, backward the same (f = (a-1)/a, Q, K, V, O this rank's q, k, v and output in fp32).
struct FusedHeads {
  const bf16* qkv = nullptr;  // [S, B, G', H'/G' + 2, D]: what attention read (after RoPE)
  const bf16* out = nullptr;  // [S, B, H', Dv]: what it wrote
};

// q [rows, H, D], k and v [rows, G, D] in fp32, from `scratch`: the fused layout's bf16 qkv
// [rows, G, H/G + 2, D] widened and split (what the CP code takes where bf16 training's q, k, v
// live in the fused layout).
struct WidenedQkv {
  float *q, *k, *v;
};
WidenedQkv widen_qkv(const kernels::Ctx& ctx,
                     Arena& scratch,
                     const bf16* qkv,
                     int64_t rows,
                     int64_t H,
                     int64_t G,
                     int64_t D);

// Whether transformer layer `layer` attends in the fused layout: CP 1, or an a2a or a2a+p2p
// layer.
bool attends_fused(const ContextParallel& cp, int64_t layer);

// out [S, B, H, Dv] (this rank's rows) and lse from this rank's qkv (the QKV projection's bf16
// output after RoPE; s: this rank's shape, fused_qkv, no attention dropout). What the backward
// reads is returned: qkv and out themselves at CP 1, else head-sharded copies from `keep`; lse
// in their layout.
FusedHeads fused_attention_forward(const kernels::Ctx& ctx,
                                   const ContextParallel& cp,
                                   int64_t layer,
                                   Arena& keep,
                                   Arena& scratch,
                                   bf16* out,
                                   float* lse,
                                   const bf16* qkv,
                                   const kernels::AttnShape& s);

// dqkv (written, bf16, this rank's rows in the fused layout) from dout (bf16) and the forward's.
void fused_attention_backward(const kernels::Ctx& ctx,
                              const ContextParallel& cp,
                              int64_t layer,
                              Arena& scratch,
                              bf16* dqkv,
                              const bf16* dout,
                              const FusedHeads& heads,
                              const float* lse,
                              const kernels::AttnShape& s);

}  // namespace mtron::parallel
