// defines: MoEStats, MoELayer
//
// The routed part of a mixture-of-experts MLP (Megatron-Core's MoELayer with the TopKRouter and
// the alltoall token dispatcher); the shared expert, when present, is the layer's dense MLP
// (layer.h). On this rank's token rows x[T, h] (T = the sequence-parallel rows: with TP > 1,
// sequence parallelism is required, as Megatron requires it in training):
//
//   router   logits = x W_r^T in fp32; softmax: top-k of the logits, weights = softmax over the
//            k chosen logits; sigmoid: top-k of sigmoid(logits), weights normalised to sum 1
//            (k > 1). Ties go to the lower expert index.
//   Sinkhorn (--moe-router-load-balancing-type sinkhorn: Megatron's S-BASE routing) in a
//            training forward, the top-k of the micro-batch's Sinkhorn-balanced exp(logits)
//            (rows to 1 / T, columns to 1 / E, Megatron's iteration and tolerance), weighted by
//            the sigmoid (k = 1) or the softmax over all E (k > 1) of the logits; evaluation
//            and inference choose the top-k of the logits with the same weights, as Megatron.
//            Megatron balances each rank's tokens; mtron balances the whole micro-batch
//            (gathered across TP x CP, on the host), so the choice is the same for every layout.
//   capacity (--moe-expert-capacity-factor cf; default dropless) each expert keeps at most
//            ceil(T_mb * k / E * cf) of its (token, expert) pairs, T_mb = the micro-batch's
//            tokens; policy probs keeps the highest weights, position the earliest tokens (ties:
//            earlier token). Megatron decides per rank over its local tokens; mtron decides over
//            the whole micro-batch (gathered across TP x CP), so the dropped pairs are the same
//            for every layout.
//   DeepSeek (Megatron's TopKRouter options) group-limited routing, the top-k scaling factor
//            and, with --moe-router-enable-expert-bias, a per-expert bias [E] added to the
//            sigmoid scores for the choice only (kernels/moe.h): a non-trained fp32 buffer,
//            decoder.layers.L.mlp.router.expert_bias in checkpoints, updated after each global
//            batch from the kept pairs per expert that training forwards count here
//            (Megatron's local_tokens_per_expert; train/expert_bias.h updates it).
//   experts  pairs dispatched to their experts (parallel/expert_dispatch.h), fc1 -> act -> fc2
//            per local expert, combined back: y[t] = sum over kept pairs of weight * expert(x[t])
//
// The router's arithmetic, the auxiliary losses' statistics, the permutation and the combine are
// kernels (kernels/moe.h), on the run's device; the routing plan (capacity, each kept pair's row
// in the permuted order, rows per expert) is made on the host from a copy of the chosen experts
// (T k integers), as the dispatch's counts must be there anyway.
//
// Auxiliary losses (Megatron-Core's router formulas: switch_load_balancing_loss_func,
// sequence_load_balancing_loss_func, z_loss_func), over the token set
// Megatron uses: one micro-batch, i.e. the tokens split over TP (SP) x CP, counts summed over
// that group (tokens_per_expert reduced over tp_cp):
//   aux_loss      coeff * E / (k * T_mb^2) * sum_i (sum over tokens of softmax_i) * count_i
//                 (count_i: top-k selections of expert i before dropping)
//   seq_aux_loss  the same per sequence (T = S), averaged over the micro-batch's sequences
//   z-loss        coeff * mean over tokens of logsumexp(logits)^2
// Each rank adds its tokens' share; the gradient of every micro-batch's auxiliary losses is
// weighted by TokenLayout::aux_weight = 1 / (micro-batches in the global batch), so the
// objective is lm loss + the auxiliary losses averaged over the global batch's micro-batches
// (Megatron's target scaling 1 / (num_micro_batches * dp_size)).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mtron/core/arena.h"
#include "mtron/core/model_config.h"
#include "mtron/kernels/moe.h"
#include "mtron/model/linear.h"
#include "mtron/model/params.h"
#include "mtron/parallel/expert_dispatch.h"

namespace mtron::model {

struct TokenLayout;  // layer.h

// This rank's share of the MoE statistics, summed over layers and micro-batches. Summed over the
// TP x CP group, a micro-batch's shares are its statistics.
struct MoEStats {
  double load_balancing = 0;  // aux loss / coeff (aux_loss or seq_aux_loss)
  double z_loss = 0;          // z-loss / coeff
  double dropped = 0;         // (token, expert) pairs dropped by the capacity limit
  // Order-independent checksums of the routed (top-k) and of the dropped (token, expert) pairs:
  // sums of 20-bit hashes of (layer, token in the micro-batch, expert), exact in a double up to
  // 2^33 pairs, so that layouts can be compared (tests).
  double routed_hash = 0, dropped_hash = 0;
  void add(const MoEStats& o) {
    load_balancing += o.load_balancing;
    z_loss += o.z_loss;
    dropped += o.dropped;
    routed_hash += o.routed_hash;
    dropped_hash += o.dropped_hash;
  }
};

class MoELayer {
 public:
  struct Stash {
    const float* x = nullptr;  // [T, h] router and expert input (owned by the caller)
    float* logits = nullptr;   // [T, E]
    float* scores = nullptr;   // [T, E] scores of the aux loss (softmax or normalised sigmoid)
    int32_t* idx = nullptr;    // [T, k] chosen experts, best first
    float* weight = nullptr;   // [T, k] routing weights (of every chosen pair, kept or not)
    int64_t* row = nullptr;    // [T, k] the pair's row in the permuted order, -1: dropped
    float* counts = nullptr;   // aux_loss [E] / seq_aux_loss [B, E] counts over the micro-batch
    parallel::DispatchPlan plan;
    Act expert_in;              // [R, h]
    Act fc1;                    // [R, Fl or 2 Fl] before the activation (bf16 or fp32)
    Act act_in;                 // [R, Fl] (not kept with recompute_activation)
    float* combined = nullptr;  // [P, h] expert outputs back in local order
    MoEStats stats;             // this micro-batch, this layer
    std::vector<int64_t> kept;  // [E] this rank's kept pairs per expert, on the host
  };

  // Registers the router (in `dense`, replicated, sequence-parallel) and this EP rank's experts
  // (in `experts`, sharded over ETP; named by global expert index) for global layer `layer`
  // (num_layers + depth for an MTP depth's), under the MLP prefix `prefix` (Megatron's
  // "decoder.layers.L.mlp." or "mtp.layers.<depth>.transformer_layer.mlp."). recompute_activation
  // (--recompute-modules moe_act): the experts' activation output is not stashed; backward
  // computes it again from fc1's output.
  MoELayer(const ModelConfig& cfg,
           int64_t layer,
           const std::string& prefix,
           const parallel::TensorParallel& tp,
           const parallel::ExpertParallel& ep,
           ParamBuffer& dense,
           ParamBuffer& experts,
           bool recompute_activation = false);
  // y[T, h] (written) from x[T, h]; stash from `keep`, temporaries from `scratch`. Collective
  // over the EP, ETP and TP x CP groups. st null (inference): no stash, no auxiliary statistics
  // and no capacity limit (dropless, as Hugging Face's Mixtral: the next token does not depend
  // on how a prompt was cut into calls).
  void forward(const RunCtx& rc,
               const TokenLayout& tl,
               Stash* st,
               Arena& keep,
               Arena& scratch,
               const float* x,
               float* y) const;
  // Adds a training forward's kept pairs per expert to tokens_per_expert().
  void count_tokens(const Stash& st);
  // The expert bias [E] (zeros without --moe-router-enable-expert-bias) and the kept pairs per
  // expert counted since the last update, on the host.
  std::vector<float>& expert_bias() { return expert_bias_; }
  std::vector<double>& tokens_per_expert() { return tokens_per_expert_; }
  // The layer's MLP prefix and its global index.
  const std::string& prefix() const { return prefix_; }
  int64_t layer() const { return layer_; }
  // dx[T, h] (written) from dy[T, h]; accumulates parameter gradients.
  void backward(const RunCtx& rc,
                const TokenLayout& tl,
                const Stash& st,
                Arena& scratch,
                const float* dy,
                float* dx) const;

 private:
  // The router's kernels' shape for T tokens; bias: the expert bias on the device.
  kernels::MoeRouting routing(int64_t T, const float* bias = nullptr) const;
  // The routing decisions on the host: each pair's expert (and weight, for the capacity limit),
  // each token's index in the micro-batch's 1-process row order, each pair's permuted row.
  struct Routing {
    std::vector<int32_t> idx;
    std::vector<float> weight;
    std::vector<int64_t> token, row;
  };
  // Each local row's index in the micro-batch's 1-process row order (s * B + b, s the global
  // position).
  std::vector<int64_t> token_index(const RunCtx& rc, const TokenLayout& tl, int64_t T) const;
  // Sinkhorn routing of a training forward: st.idx, st.weight and r.idx from st.logits and
  // r.token.
  void sinkhorn_route(const RunCtx& rc, Stash& st, Routing& r, int64_t T) const;
  // The auxiliary losses' scores and statistics, the routed pairs' checksum and the capacity
  // limit (training only; r.token set).
  void router_statistics(const RunCtx& rc,
                         const TokenLayout& tl,
                         Stash& st,
                         Arena& keep,
                         Arena& scratch,
                         Routing& r,
                         int64_t T) const;
  // Drops the pairs over capacity (r.row = -1 before the permutation), counting them in stats.
  void apply_capacity(const RunCtx& rc, Routing& r, MoEStats& stats, int64_t T) const;
  // Whether every local expert's fc1 and fc2 GEMMs may write bf16 (bf16_gemm_outputs): fc1's
  // output and fc2's dgrad are then bf16.
  bool bf16_outputs(const RunCtx& rc) const;

  const ModelConfig& cfg_;
  const ParamBuffer& dense_;
  const ParamBuffer& experts_;
  int64_t layer_;
  std::string prefix_;
  int64_t E_, k_, h_, El_, Fl_;  // experts, top-k, hidden, local experts, local expert ffn
  bool recompute_activation_;
  int router_w_ = -1;
  std::vector<int> fc1_w_, fc2_w_;  // per local expert
  std::vector<float> expert_bias_;
  std::vector<double> tokens_per_expert_;
};

}  // namespace mtron::model
