// defines: AttnMask, attention_forward, attention_backward
//
// Scaled dot-product attention with grouped query heads, tiled with an online softmax, so the
// memory per head is O(S) (the S x S score matrix never exists). Layout, sequence-major as
// Megatron's [s, b, h]:
//   q[Sq, B, H, D], k[Sk, B, G, D], v[Sk, B, G, D], out[Sq, B, H, D], lse[B, H, Sq]
// Query head h reads key/value group h / (H / G). Forward saves lse (log-sum-exp of the scaled
// scores per query row) for backward; a fully masked row gives out = 0 and lse = -inf.
// Backward recomputes the scores blockwise from q, k and lse, and ACCUMULATES into dq, dk, dv
// (+=), so ring attention (context parallelism) can sum contributions of several K/V blocks.
#pragma once

#include <cstdint>

#include "mtron/kernels/op.h"

namespace mtron::kernels {

// Key j is visible to query i iff !causal || j <= i + offset. Standard causal: {true, 0}.
struct AttnMask {
  bool causal = true;
  int64_t offset = 0;
};

struct AttnShape {
  int64_t B, Sq, Sk, H, G, D;
  float scale;  // usually 1/sqrt(D)
};

// attention_backward: out and lse are the forward's (for ring attention: the final merged ones).
#define MT_PARAMS_attention_forward                                                            \
  (float* out, float* lse, const float* q, const float* k, const float* v, const AttnShape& s, \
   AttnMask mask)
#define MT_PARAMS_attention_backward                                                   \
  (float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k, \
   const float* v, const float* out, const float* lse, const AttnShape& s, AttnMask mask)
#define MTRON_ATTENTION_OPS(OP)                                                 \
  OP(void, attention_forward, attention_forward, attention_forward_contract,    \
     MT_PARAMS_attention_forward, (out, lse, q, k, v, s, mask))                 \
  OP(void, attention_backward, attention_backward, attention_backward_contract, \
     MT_PARAMS_attention_backward, (dq, dk, dv, dout, q, k, v, out, lse, s, mask))
MTRON_ATTENTION_OPS(MT_OP_DECLARE)

}  // namespace mtron::kernels
