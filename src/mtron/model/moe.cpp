#include "mtron/model/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "mtron/kernels/activation.h"
#include "mtron/kernels/device.h"
#include "mtron/kernels/gemm.h"
#include "mtron/kernels/moe.h"
#include "mtron/kernels/moe_token.h"
#include "mtron/model/layer.h"

namespace mtron::model {

using kernels::Trans;

namespace {

// A 20-bit hash of a (layer, token, expert) pair (splitmix64's finaliser).
double pair_hash(int64_t layer, int64_t token, int64_t expert) {
  uint64_t x = (uint64_t(layer) << 48) ^ (uint64_t(expert) << 40) ^ uint64_t(token);
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return double((x ^ (x >> 31)) >> 44);
}

// n elements of a device buffer, on the host.
template <typename T>
std::vector<T> to_host(const kernels::Ctx& k, const T* src, int64_t n) {
  std::vector<T> v(static_cast<size_t>(n));
  kernels::copy_to_host(k, v.data(), src, int64_t(sizeof(T)) * n);
  return v;
}

// The first of this rank's T token rows in the micro-batch's rows (sequence parallelism splits
// them over TP).
int64_t first_row(const RunCtx& rc, int64_t T) {
  return rc.tp.sequence_parallel ? rc.tp.rank * T : 0;
}

// c[E] = exp(l[e] - max l): a token's Sinkhorn costs, Megatron's exp(l) scaled by a constant
// that the token's scale d0 absorbs (the same balanced matrix up to the eps terms, without
// overflow above l = 88).
void sinkhorn_costs(const float* l, int64_t E, double* c) {
  const double m = *std::max_element(l, l + E);
  for (int64_t e = 0; e < E; ++e) c[e] = std::exp(double(l[e]) - m);
}

// Megatron's sinkhorn() on the costs of logits l[T, E], in double: d0[t] = 1 / T / (sum_e d1[e]
// c[t, e] + eps), d1[e] = 1 / E / (sum_t d0[t] c[t, e] + eps), from d1 = 1, until the mean change
// of d1 is at most 1e-4 (NaN logits end it). Returns d1: the balanced matrix is
// d0[t] d1[e] c[t, e], whose order within a row is that of d1[e] c[t, e].
std::vector<double> sinkhorn_scales(const std::vector<float>& l, int64_t T, int64_t E) {
  constexpr double kEps = 1e-8, kTol = 1e-4;
  std::vector<double> cost(static_cast<size_t>(T * E)), d1(static_cast<size_t>(E), 1.0),
      col(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) sinkhorn_costs(l.data() + t * E, E, cost.data() + t * E);
  for (double error = 1e9; error > kTol;) {
    std::fill(col.begin(), col.end(), 0.0);
    for (int64_t t = 0; t < T; ++t) {
      const double* c = cost.data() + t * E;
      double row = 0;
      for (int64_t e = 0; e < E; ++e) row += d1[size_t(e)] * c[e];
      const double d0 = 1.0 / double(T) / (row + kEps);
      for (int64_t e = 0; e < E; ++e) col[size_t(e)] += d0 * c[e];
    }
    error = 0;
    for (int64_t e = 0; e < E; ++e) {
      const double d = 1.0 / double(E) / (col[size_t(e)] + kEps);
      error += std::abs(d - d1[size_t(e)]);
      d1[size_t(e)] = d;
    }
    error /= double(E);
  }
  return d1;
}

}  // namespace

MoELayer::MoELayer(const ModelConfig& cfg,
                   int64_t layer,
                   const std::string& prefix,
                   const parallel::TensorParallel& tp,
                   const parallel::ExpertParallel& ep,
                   ParamBuffer& dense,
                   ParamBuffer& experts,
                   bool recompute_activation)
    : cfg_(cfg),
      dense_(dense),
      experts_(experts),
      layer_(layer),
      prefix_(prefix),
      recompute_activation_(recompute_activation) {
  E_ = cfg.num_experts;
  k_ = cfg.moe_router_topk;
  h_ = cfg.hidden_size;
  El_ = E_ / ep.ep_size;
  Fl_ = cfg.moe_ffn() / ep.etp_size;
  const int64_t F = cfg.moe_ffn(), h = h_;
  const float std = cfg.init_method_std;
  const float out_std = std / std::sqrt(2.0f * float(cfg.num_layers));
  router_w_ = dense.add(ParamSpec{.name = prefix + "router.weight",
                                  .global_shape = {E_, h},
                                  .local_shape = {E_, h},
                                  .init = ParamInit::kNormal,
                                  .init_std = std,
                                  .sequence_parallel = tp.sequence_parallel});
  for (int64_t le = 0; le < El_; ++le) {
    const std::string e =
        prefix + "experts.local_experts." + std::to_string(ep.ep_rank * El_ + le) + ".";
    // As the dense MLP (layer.cpp): fc1 column-parallel ([gate; up] as [2, F, h] with SwiGLU),
    // fc2 row-parallel, here over the ETP group.
    fc1_w_.push_back(experts.add(
        cfg.swiglu
            ? sharded_spec(e + "linear_fc1.weight", {2, F, h}, 1, ep.etp_rank, ep.etp_size, std)
            : sharded_spec(e + "linear_fc1.weight", {F, h}, 0, ep.etp_rank, ep.etp_size, std)));
    fc2_w_.push_back(experts.add(
        sharded_spec(e + "linear_fc2.weight", {h, F}, 1, ep.etp_rank, ep.etp_size, out_std)));
  }
  expert_bias_.assign(size_t(E_), 0.0f);
  tokens_per_expert_.assign(size_t(E_), 0.0);
}

kernels::MoeRouting MoELayer::routing(int64_t T, const float* bias) const {
  const bool groups = cfg_.moe_router_group_topk > 0;
  // Sinkhorn routing weighs by the sigmoid (top-1) or the softmax over all experts (top-k).
  const bool sinkhorn = cfg_.moe_router_load_balancing_type == RouterLoadBalancing::kSinkhorn;
  return {.T = T,
          .E = E_,
          .k = k_,
          .sigmoid = sinkhorn ? k_ == 1 : cfg_.moe_router_score_function == RouterScore::kSigmoid,
          .pre_softmax = sinkhorn ? k_ > 1 : cfg_.moe_router_pre_softmax,
          .groups = groups ? cfg_.moe_router_num_groups : 0,
          .group_topk = groups ? cfg_.moe_router_group_topk : 0,
          .bias = bias,
          .scale = cfg_.moe_router_topk_scaling_factor};
}

bool MoELayer::bf16_outputs(const RunCtx& rc) const {
  for (int64_t e = 0; e < El_; ++e)
    if (!bf16_gemm_outputs(rc, experts_.weight(fc1_w_[e])) ||
        !bf16_gemm_outputs(rc, experts_.weight(fc2_w_[e])))
      return false;
  return true;
}

void MoELayer::count_tokens(const Stash& st) {
  for (int64_t e = 0; e < E_; ++e) tokens_per_expert_[size_t(e)] += double(st.kept[size_t(e)]);
}

void MoELayer::apply_capacity(const RunCtx& rc, Routing& r, MoEStats& stats, int64_t T) const {
  const Comm* g = rc.ep.tokens;
  const int64_t gs = g ? g->size() : 1, grank = g ? g->rank() : 0;
  const int64_t k = k_, T_mb = T * gs, n = T * k;
  const int64_t cap =
      int64_t(std::ceil(double(T_mb * k) / double(E_) * double(cfg_.moe_expert_capacity_factor)));
  if (cap > T_mb) return;  // as Megatron: a capacity above the token count drops nothing

  // (token index in the micro-batch, expert, weight) of every pair of the micro-batch.
  std::vector<double> mine(size_t(3 * n)), all(size_t(3 * n * gs));
  for (int64_t i = 0; i < n; ++i) {
    double* m = mine.data() + 3 * i;
    m[0] = double(r.token[size_t(i / k)]);
    m[1] = r.idx[size_t(i)];
    m[2] = r.weight[size_t(i)];
  }
  parallel::gather_over_tokens(rc.ep, mine.data(), all.data(), 3 * n);
  std::vector<int64_t> order(size_t(n * gs));
  std::iota(order.begin(), order.end(), int64_t(0));
  const bool by_weight = cfg_.moe_token_drop_policy == TokenDropPolicy::kProbs;
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const double* x = all.data() + 3 * a;
    const double* y = all.data() + 3 * b;
    if (x[1] != y[1]) return x[1] < y[1];
    if (by_weight && x[2] != y[2]) return x[2] > y[2];
    return x[0] < y[0];
  });
  // Our pairs' places within their expert's order.
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j < order.size() && all[size_t(3 * order[j] + 1)] == all[size_t(3 * order[i] + 1)]) {
      const int64_t pair = order[j] - grank * n;
      if (int64_t(j - i) >= cap && pair >= 0 && pair < n) {
        r.row[size_t(pair)] = -1;
        stats.dropped += 1;
        stats.dropped_hash += pair_hash(layer_, r.token[size_t(pair / k)], r.idx[size_t(pair)]);
      }
      ++j;
    }
    i = j;
  }
}

std::vector<int64_t> MoELayer::token_index(const RunCtx& rc,
                                           const TokenLayout& tl,
                                           int64_t T) const {
  const int64_t row0 = first_row(rc, T);
  const std::vector<int32_t> pos = to_host(rc.k, tl.pos + row0, T);
  std::vector<int64_t> token(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t)
    token[size_t(t)] = int64_t(pos[size_t(t)]) * tl.B + (row0 + t) % tl.B;
  return token;
}

void MoELayer::sinkhorn_route(const RunCtx& rc, Stash& st, Routing& r, int64_t T) const {
  const int64_t E = E_, k = k_;
  const std::vector<float> l = to_host(rc.k, st.logits, T * E);
  // The micro-batch's logits in its 1-process row order, gathered over the TP x CP group: every
  // layout balances the same matrix with the same sums.
  const Comm* g = rc.ep.tokens;
  const int64_t gs = g ? g->size() : 1, n = T * (E + 1);
  std::vector<double> mine(static_cast<size_t>(n)), all(static_cast<size_t>(n * gs));
  for (int64_t t = 0; t < T; ++t) {
    mine[size_t(t * (E + 1))] = double(r.token[size_t(t)]);
    std::copy(l.begin() + t * E, l.begin() + (t + 1) * E, mine.begin() + t * (E + 1) + 1);
  }
  parallel::gather_over_tokens(rc.ep, mine.data(), all.data(), n);
  std::vector<float> mb(static_cast<size_t>(T * gs * E));
  for (int64_t i = 0; i < T * gs; ++i) {
    const double* src = all.data() + i * (E + 1);
    std::transform(src + 1, src + 1 + E, mb.begin() + int64_t(src[0]) * E,
                   [](double v) { return float(v); });
  }
  const std::vector<double> d1 = sinkhorn_scales(mb, T * gs, E);

  // Each token's k largest balanced costs (ties: the lower index), weighed as moe_route weighs.
  const kernels::MoeRouting rt = routing(T);
  r.idx.assign(size_t(T * k), 0);
  std::vector<float> w(static_cast<size_t>(T * k));
  std::vector<double> score(static_cast<size_t>(E));
  std::vector<int32_t> order(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    const float* lt = l.data() + t * E;
    sinkhorn_costs(lt, E, score.data());
    for (int64_t e = 0; e < E; ++e) score[size_t(e)] *= d1[size_t(e)];
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return score[size_t(a)] > score[size_t(b)] || (score[size_t(a)] == score[size_t(b)] && a < b);
    });
    std::copy(order.begin(), order.begin() + k, r.idx.begin() + t * k);
    kernels::moe_token::weights(lt, rt, r.idx.data() + t * k, w.data() + t * k);
  }
  kernels::copy_from_host(rc.k, st.idx, r.idx.data(), int64_t(sizeof(int32_t)) * T * k);
  kernels::copy_from_host(rc.k, st.weight, w.data(), int64_t(sizeof(float)) * T * k);
}

void MoELayer::router_statistics(const RunCtx& rc,
                                 const TokenLayout& tl,
                                 Stash& st,
                                 Arena& keep,
                                 Arena& scratch,
                                 Routing& r,
                                 int64_t T) const {
  const int64_t E = E_, k = k_;
  const Comm* group = rc.ep.tokens;
  const int64_t T_mb = T * (group ? group->size() : 1);
  const int64_t row0 = first_row(rc, T);
  const auto lb = cfg_.moe_router_load_balancing_type;
  st.scores = nullptr;
  st.counts = nullptr;
  if (cfg_.moe_aux_loss_coeff > 0 && lb != RouterLoadBalancing::kNone) {
    const int64_t nb = lb == RouterLoadBalancing::kSeqAuxLoss ? tl.B : 1;  // count vectors
    st.scores = keep.alloc<float>(T * E);
    kernels::moe_aux_scores(rc.k, st.scores, st.logits, routing(T));
    // Megatron counts the aux loss's selections on the plain top-k of the scores (no bias, no
    // groups): the routed experts, unless the routing has either.
    const int32_t* aux_idx = st.idx;
    if (cfg_.moe_router_enable_expert_bias || cfg_.moe_router_group_topk > 0) {
      int32_t* idx = scratch.alloc<int32_t>(T * k);
      const kernels::MoeRouting plain{.T = T, .E = E, .k = k, .sigmoid = routing(T).sigmoid};
      kernels::moe_route(rc.k, idx, scratch.alloc<float>(T * k), st.logits, plain);
      aux_idx = idx;
    }
    double* sums = scratch.alloc<double>(2 * nb * E);  // psum | counts
    kernels::moe_aux_sums(rc.k, sums, sums + nb * E, st.scores, aux_idx, routing(T), nb, row0);
    const std::vector<double> psum = to_host(rc.k, sums, nb * E);
    std::vector<double> counts = to_host(rc.k, sums + nb * E, nb * E);
    parallel::sum_over_tokens(rc.ep, counts.data(), nb * E);
    std::vector<float> counts_f(counts.begin(), counts.end());
    st.counts = keep.alloc<float>(nb * E);
    kernels::copy_from_host(rc.k, st.counts, counts_f.data(), int64_t(sizeof(float)) * nb * E);
    const double T_seq = double(T_mb) / double(nb);  // tokens a count vector covers
    double loss = 0;
    for (int64_t i = 0; i < nb * E; ++i) loss += psum[size_t(i)] * counts[size_t(i)];
    st.stats.load_balancing = loss * double(E) / (double(k) * T_seq * T_seq * double(nb));
  }
  if (cfg_.moe_z_loss_coeff > 0) {
    float* lse = scratch.alloc<float>(T);
    kernels::moe_logsumexp(rc.k, lse, st.logits, routing(T));
    double zsum = 0;
    for (const float l : to_host(rc.k, lse, T)) zsum += double(l) * double(l);
    st.stats.z_loss = zsum / double(T_mb);
  }
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j)
      st.stats.routed_hash += pair_hash(layer_, r.token[size_t(t)], r.idx[size_t(t * k + j)]);
  if (cfg_.moe_expert_capacity_factor > 0) {
    r.weight = to_host(rc.k, st.weight, T * k);
    apply_capacity(rc, r, st.stats, T);
  }
}

void MoELayer::forward(const RunCtx& rc,
                       const TokenLayout& tl,
                       Stash* stash,
                       Arena& keep_arena,
                       Arena& scratch,
                       const float* x,
                       float* y) const {
  Stash none;
  Stash& st = stash ? *stash : none;
  Arena& keep = stash ? keep_arena : scratch;
  const int64_t T = rc.tp.sp_rows(tl.rows()), E = E_, k = k_, h = h_;
  st.x = x;
  st.stats = MoEStats{};

  // Router, in fp32 whatever the run's precision.
  st.logits = keep.alloc<float>(T * E);
  kernels::gemm(rc.k, Trans::kN, Trans::kT, T, E, h, 1.0f, x, h, dense_.master(router_w_), h, 0.0f,
                st.logits, E);
  st.idx = keep.alloc<int32_t>(T * k);
  st.weight = keep.alloc<float>(T * k);
  st.row = keep.alloc<int64_t>(T * k);
  Routing r;
  if (stash) r.token = token_index(rc, tl, T);
  if (stash && tl.train && cfg_.moe_router_load_balancing_type == RouterLoadBalancing::kSinkhorn) {
    sinkhorn_route(rc, st, r, T);
  } else {
    float* bias = nullptr;
    if (cfg_.moe_router_enable_expert_bias) {
      bias = scratch.alloc<float>(E);
      kernels::copy_from_host(rc.k, bias, expert_bias_.data(), int64_t(sizeof(float)) * E);
    }
    kernels::moe_route(rc.k, st.idx, st.weight, st.logits, routing(T, bias));
    r.idx = to_host(rc.k, st.idx, T * k);
  }

  // The routing plan is made on the host from the pairs' experts (T k integers): the auxiliary
  // statistics and the capacity limit (training only), then each kept pair's row in the order
  // by expert (then token), which goes back to the device for the permutation.
  r.row.assign(size_t(T * k), 0);
  if (stash) router_statistics(rc, tl, st, keep, scratch, r, T);
  std::vector<int64_t> counts(size_t(E), 0);
  for (int64_t i = 0; i < T * k; ++i)
    if (r.row[size_t(i)] >= 0) ++counts[size_t(r.idx[size_t(i)])];
  std::vector<int64_t> next(size_t(E), 0);
  for (int64_t e = 1; e < E; ++e) next[size_t(e)] = next[size_t(e - 1)] + counts[size_t(e - 1)];
  const int64_t P = next[size_t(E - 1)] + counts[size_t(E - 1)];
  for (int64_t i = 0; i < T * k; ++i)
    if (r.row[size_t(i)] >= 0) r.row[size_t(i)] = next[size_t(r.idx[size_t(i)])]++;
  kernels::copy_from_host(rc.k, st.row, r.row.data(), int64_t(sizeof(int64_t)) * T * k);
  if (stash) st.kept = counts;

  // Permute, dispatch, run the experts, combine.
  float* perm = scratch.alloc<float>(P * h);
  kernels::moe_permute(rc.k, perm, x, st.row, routing(T), h);
  st.plan = parallel::DispatchPlan(rc.k, rc.ep, counts.data(), E);
  const int64_t R = st.plan.expert_rows();
  float* ein = gemm_input_buffer(rc, keep, scratch, R * h);
  st.plan.to_experts(ein, perm, h, scratch);
  st.expert_in = as_gemm_input(rc, keep, ein, R * h);

  // fc1's output (the activation's input) in bf16 where every expert's GEMMs may write bf16, as
  // in the dense MLP
  const int64_t w1 = cfg_.swiglu ? 2 * Fl_ : Fl_;
  const auto fc1 = [&](auto* out) {
    st.plan.for_each_expert([&](int64_t e, int64_t b, int64_t n) {
      linear_forward(rc, out + b * w1, st.expert_in.at(b * h), experts_.weight(fc1_w_[e]), nullptr,
                     n, h, w1);
    });
    return Act::of(out);
  };
  st.fc1 = bf16_outputs(rc) ? fc1(keep.alloc<bf16>(R * w1)) : fc1(keep.alloc<float>(R * w1));
  st.act_in = mlp_activation(rc, stash && recompute_activation_ ? scratch : keep, scratch, st.fc1,
                             R, Fl_, cfg_.activation());
  float* eout = scratch.alloc<float>(R * h);  // partial over ETP
  st.plan.for_each_expert([&](int64_t e, int64_t b, int64_t n) {
    linear_forward(rc, eout + b * h, st.act_in.at(b * Fl_), experts_.weight(fc2_w_[e]), nullptr, n,
                   Fl_, h);
  });
  st.combined = keep.alloc<float>(P * h);
  st.plan.from_experts(st.combined, eout, h, scratch);
  kernels::moe_combine(rc.k, y, st.combined, st.row, st.weight, routing(T), h);
}

void MoELayer::backward(const RunCtx& rc,
                        const TokenLayout& tl,
                        const Stash& st,
                        Arena& scratch,
                        const float* dy,
                        float* dx) const {
  const int64_t T = rc.tp.sp_rows(tl.rows()), E = E_, k = k_, h = h_;
  const int64_t P = st.plan.local_rows(), R = st.plan.expert_rows();

  // Combine: y[t] = sum_j w_j combined[row_j].
  float* dcomb = scratch.alloc<float>(P * h);
  float* dw = scratch.alloc<float>(T * k);
  kernels::moe_combine_backward(rc.k, dcomb, dw, dy, st.combined, st.row, st.weight, routing(T), h);

  // Experts.
  float* deout = scratch.alloc<float>(R * h);
  st.plan.to_experts(deout, dcomb, h, scratch);
  const int64_t w1 = cfg_.swiglu ? 2 * Fl_ : Fl_;
  const Act act_in = recompute_activation_
                         ? mlp_activation(rc, scratch, scratch, st.fc1, R, Fl_, cfg_.activation())
                         : st.act_in;
  // fc2's dgrad in fc1's output type (the activation's backward reads both)
  const auto fc2_dgrad = [&](auto* dact) {
    st.plan.for_each_expert([&](int64_t e, int64_t b, int64_t n) {
      linear_backward(rc, scratch, dact + b * Fl_, experts_.grad(fc2_w_[e]), nullptr, deout + b * h,
                      act_in.at(b * Fl_), experts_.weight(fc2_w_[e]), n, Fl_, h);
    });
    return Act::of(dact);
  };
  const Act dact = st.fc1.dtype == DType::kBF16 ? fc2_dgrad(scratch.alloc<bf16>(R * Fl_))
                                                : fc2_dgrad(scratch.alloc<float>(R * Fl_));
  const Act dfc1 = mlp_activation_grad(rc, scratch, st.fc1, dact, R, Fl_, cfg_.activation());
  float* dein = scratch.alloc<float>(R * h);  // partial over ETP
  st.plan.for_each_expert([&](int64_t e, int64_t b, int64_t n) {
    linear_backward(rc, scratch, dein + b * h, experts_.grad(fc1_w_[e]), nullptr, dfc1.at(b * w1),
                    st.expert_in.at(b * h), experts_.weight(fc1_w_[e]), n, h, w1);
  });
  float* dperm = scratch.alloc<float>(P * h);
  st.plan.from_experts(dperm, dein, h, scratch);

  // Router: routing weights, auxiliary losses and z-loss -> dlogits -> dW_r, dx.
  const Comm* group = rc.ep.tokens;
  const int64_t T_mb = T * (group ? group->size() : 1);
  const int64_t row0 = first_row(rc, T);
  const bool seq = cfg_.moe_router_load_balancing_type == RouterLoadBalancing::kSeqAuxLoss;
  const int64_t nb = seq ? tl.B : 1;
  const double T_seq = double(T_mb) / double(nb);
  // d(aux)/d(score[t][i]) = coeff * E / (k T_seq^2 nb) * count[i], times the micro-batch weight.
  const double aux_g = tl.aux_weight * cfg_.moe_aux_loss_coeff * double(E) /
                       (double(k) * T_seq * T_seq * double(nb));
  const double z_g = tl.aux_weight * cfg_.moe_z_loss_coeff * 2.0 / double(T_mb);
  float* dlogits = scratch.alloc<float>(T * E);
  kernels::moe_router_backward(rc.k, dlogits, st.logits, st.idx, st.weight, dw, routing(T),
                               {st.scores, st.counts, aux_g, z_g, nb, row0});
  // dx = the experts' input gradient (each token's kept pairs) + the router's.
  kernels::moe_permute_backward(rc.k, dx, dperm, st.row, routing(T), h);
  kernels::gemm(rc.k, Trans::kT, Trans::kN, E, h, T, 1.0f, dlogits, E, st.x, h, 1.0f,
                dense_.grad(router_w_), h);
  kernels::gemm(rc.k, Trans::kN, Trans::kN, T, h, E, 1.0f, dlogits, E, dense_.master(router_w_), h,
                1.0f, dx, h);
}

}  // namespace mtron::model
