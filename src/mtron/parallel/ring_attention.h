// defines: ring_attention_forward, ring_attention_backward
//
// Ring attention, context parallelism's p2p communication (context_parallel.h: the chunks each
// rank holds). Each rank's K/V block (its two chunks) travels round the CP ring, CP-1 hops;
// at each step a rank attends its queries to the block it holds, chunk pair by chunk pair
// (chunk j is visible to chunk i if j < i, causally if j == i, not at all if j > i), and merges
// the partial outputs with their log-sum-exps (online softmax). Backward runs the ring again
// with the final out/lse (exact per block): dQ stays local, each block's dK/dV partial travels
// with it, starting at the block owner's successor, and after CP-1 hops arrives home.
//
// Bytes each rank sends per attention call (KV = S_local * B * G * (D + Dv) * 4, the rank's K
// and V in fp32): forward (CP-1) * KV, backward 2 * (CP-1) * KV. With bf16_kv (K and V hold bf16
// values) the K/V blocks travel as bf16, exactly: forward (CP-1) * KV / 2, backward
// 3/2 * (CP-1) * KV (the dK/dV partials are sums, and stay fp32).
//
// Every buffer is on ctx's device: the blocks are loaded with kernels::copy (kernels::convert for
// bf16) and travel through the Comm, a block's partial result joins the accumulated one by
// kernels::attention_merge, and a partial that has come home is added with kernels::add.
//
// lse is saved as two [B, H, c] halves (one per local chunk), not as one [B, H, 2c] array.
//
// Attention dropout (`drop`, kernels/attention.h): each chunk pair's call gets the global
// positions of its query and key chunks (q0, k0), so every CP layout drops what CP 1 drops;
// the merge is linear in the (dropped) probabilities and the lse stays undropped.
#pragma once

#include <cstdint>

#include "mtron/comm/comm.h"
#include "mtron/core/arena.h"
#include "mtron/kernels/attention.h"
#include "mtron/parallel/context_parallel.h"

namespace mtron::parallel {

// out[S, B, H, Dv] and lse from this rank's q[S, B, H, D], k[S, B, G, D], v[S, B, G, Dv] (S = s.Sq
// = s.Sk local tokens per sequence), causal over the global sequence. Collective over cp.comm
// (cp.types are not read); with size 1 it is plain causal attention. Temporaries come from
// `scratch`.
void ring_attention_forward(const kernels::Ctx& ctx,
                            const ContextParallel& cp,
                            Arena& scratch,
                            float* out,
                            float* lse,
                            const float* q,
                            const float* k,
                            const float* v,
                            const kernels::AttnShape& s,
                            const kernels::AttnDropout& drop = {},
                            bool bf16_kv = false);

// dq, dk, dv (+=) of this rank's rows; out and lse are the forward's.
void ring_attention_backward(const kernels::Ctx& ctx,
                             const ContextParallel& cp,
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
                             bool bf16_kv = false);

}  // namespace mtron::parallel
