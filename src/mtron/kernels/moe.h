// defines: moe_route, moe_aux_scores, moe_aux_sums, moe_logsumexp, moe_permute,
//          moe_permute_backward, moe_combine, moe_combine_backward, moe_router_backward
//
// The mixture-of-experts router and token permutation (Megatron-Core's TopKRouter and the
// permute / unpermute of its token dispatcher; model/moe.h drives them) over T tokens, E experts,
// top k. logits and scores are [T, E]; idx, weight and row are [T, k], pair i = t * k + j being
// token t's j-th choice; row[i] is the pair's row in the permuted order, -1 for a dropped pair.
//
//   moe_route            idx: the k experts of the largest logits, best first (ties: the lower
//                        index); weight: softmax over the k chosen logits (pre_softmax: the
//                        softmax over all E logits at the chosen ones, not renormalised), or
//                        (sigmoid) their sigmoids, normalised to sum 1 when k > 1; times scale
//                        when set. Both
//                        score functions are monotonic, so the top-k of the scores is the top-k
//                        of the logits; choosing on the logits avoids the exact ties that
//                        rounding sigmoid(l) to fp32 creates between close logits (which would
//                        make the choice depend on the last bit of the logits, and so on the
//                        layout). With a bias or groups (Megatron's topk_routing_with_score_
//                        function) the choice is on the selection scores: the logits (softmax),
//                        sigmoid(l) + bias (sigmoid); with groups, the group_topk groups of the
//                        largest sums of their k / group_topk best selection scores (ties: the
//                        lower group), then the top k of the experts in those groups.
//   moe_aux_scores       the auxiliary loss's scores: softmax over all E logits, or the sigmoids
//                        normalised to sum 1.
//   moe_aux_sums         psum[b, e] = sum of scores[t, e], counts[b, e] = number of pairs of
//                        expert e, over the tokens t of count vector b = (row0 + t) % nb (nb = 1:
//                        one vector; nb = B: one per sequence of a sequence-major micro-batch);
//                        written, in double, summed in token order.
//   moe_logsumexp        lse[t] = log sum_e exp(logits[t, e]) (the z-loss's).
//   moe_permute          rows[row[i]] = x[t] for every kept pair (rows [P, h], x [T, h]; the
//                        permutation and combine ops read T and k of the MoeRouting only).
//   moe_permute_backward dx[t] = sum over t's kept pairs of drows[row[i]] (written).
//   moe_combine          y[t] = sum over t's kept pairs of weight[i] rows[row[i]] (written).
//   moe_combine_backward drows[row[i]] = weight[i] dy[t] for kept pairs (written);
//                        dweight[i] = dy[t] . rows[row[i]], 0 for a dropped pair.
//   moe_router_backward  dlogits (written): the gradient through the routing weights (dweight),
//                        plus MoeRouterLoss's terms: the auxiliary loss's (its gradient per score
//                        of token t is aux_grad * counts[(row0 + t) % nb, e]) and the z-loss's
//                        (z_grad * lse[t] * softmax(logits[t])).
#pragma once

#include <cstdint>

#include "mtron/kernels/op.h"

namespace mtron::kernels {

// The router's shape: T tokens, E experts, top k, and the score function (softmax or sigmoid);
// Megatron's DeepSeek options: group-limited routing (group_topk of `groups` equal groups of
// experts, 0: off), the per-expert bias added to the sigmoid scores for the choice only (bias
// [E] on the device, null: none) and the factor on the weights (scale, 0: none).
struct MoeRouting {
  int64_t T = 0, E = 0, k = 0;
  bool sigmoid = false;
  bool pre_softmax = false;  // softmax scores over all E before the top k (not with groups)
  int64_t groups = 0, group_topk = 0;
  const float* bias = nullptr;
  float scale = 0.0f;
};

// The router backward's terms besides the routing weights: the auxiliary loss (scores [T, E] and
// the micro-batch's count vectors counts [nb, E], token t's being (row0 + t) % nb; scores null:
// none) and the z-loss (z_grad > 0).
struct MoeRouterLoss {
  const float* scores = nullptr;
  const float* counts = nullptr;
  double aux_grad = 0, z_grad = 0;
  int64_t nb = 1, row0 = 0;
};

#define MT_PARAMS_moe_aux_sums                                                                 \
  (double* psum, double* counts, const float* scores, const int32_t* idx, const MoeRouting& r, \
   int64_t nb, int64_t row0)
#define MT_PARAMS_moe_combine                                                                 \
  (float* y, const float* rows, const int64_t* row, const float* weight, const MoeRouting& r, \
   int64_t h)
#define MT_PARAMS_moe_combine_backward                                                   \
  (float* drows, float* dweight, const float* dy, const float* rows, const int64_t* row, \
   const float* weight, const MoeRouting& r, int64_t h)
#define MT_PARAMS_moe_router_backward                                            \
  (float* dlogits, const float* logits, const int32_t* idx, const float* weight, \
   const float* dweight, const MoeRouting& r, const MoeRouterLoss& loss)
#define MTRON_MOE_OPS(OP)                                                                 \
  OP(void, moe_route, moe_route, moe_route_contract,                                      \
     (int32_t * idx, float* weight, const float* logits, const MoeRouting& r),            \
     (idx, weight, logits, r))                                                            \
  OP(void, moe_aux_scores, moe_aux_scores, moe_aux_scores_contract,                       \
     (float* scores, const float* logits, const MoeRouting& r), (scores, logits, r))      \
  OP(void, moe_aux_sums, moe_aux_sums, moe_aux_sums_contract, MT_PARAMS_moe_aux_sums,     \
     (psum, counts, scores, idx, r, nb, row0))                                            \
  OP(void, moe_logsumexp, moe_logsumexp, moe_logsumexp_contract,                          \
     (float* lse, const float* logits, const MoeRouting& r), (lse, logits, r))            \
  OP(void, moe_permute, moe_permute, moe_permute_contract,                                \
     (float* rows, const float* x, const int64_t* row, const MoeRouting& r, int64_t h),   \
     (rows, x, row, r, h))                                                                \
  OP(void, moe_permute_backward, moe_permute_backward, moe_permute_backward_contract,     \
     (float* dx, const float* drows, const int64_t* row, const MoeRouting& r, int64_t h), \
     (dx, drows, row, r, h))                                                              \
  OP(void, moe_combine, moe_combine, moe_combine_contract, MT_PARAMS_moe_combine,         \
     (y, rows, row, weight, r, h))                                                        \
  OP(void, moe_combine_backward, moe_combine_backward, moe_combine_backward_contract,     \
     MT_PARAMS_moe_combine_backward, (drows, dweight, dy, rows, row, weight, r, h))       \
  OP(void, moe_router_backward, moe_router_backward, moe_router_backward_contract,        \
     MT_PARAMS_moe_router_backward, (dlogits, logits, idx, weight, dweight, r, loss))
MTRON_MOE_OPS(MT_OP_DECLARE)

}  // namespace mtron::kernels
