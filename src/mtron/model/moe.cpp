#include "mtron/model/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "mtron/core/profile.h"
#include "mtron/kernels/activation.h"
#include "mtron/kernels/gemm.h"
#include "mtron/model/layer.h"

namespace mtron::model {

using kernels::Trans;

namespace {

float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}

// One token's top-k: the k largest of score[E] (ties: lower expert first), best first.
void top_k(const float* score, int64_t E, int64_t k, int32_t* idx) {
  for (int64_t j = 0; j < k; ++j) {
    int32_t best = -1;
    for (int64_t e = 0; e < E; ++e) {
      bool taken = false;
      for (int64_t i = 0; i < j; ++i) taken |= idx[i] == e;
      if (!taken && (best < 0 || score[e] > score[best])) best = int32_t(e);
    }
    idx[j] = best;
  }
}

// p[E] = softmax(l[E]); returns log-sum-exp.
float softmax(const float* l, int64_t E, float* p) {
  float m = l[0];
  for (int64_t e = 1; e < E; ++e) m = std::max(m, l[e]);
  double sum = 0;
  for (int64_t e = 0; e < E; ++e) {
    p[e] = std::exp(l[e] - m);
    sum += p[e];
  }
  for (int64_t e = 0; e < E; ++e) p[e] = float(p[e] / sum);
  return m + float(std::log(sum));
}

// The aux-loss scores of one token: softmax of all logits, or sigmoids normalised to sum 1.
void aux_scores(const float* l, int64_t E, bool use_sigmoid, float* s) {
  if (!use_sigmoid) {
    softmax(l, E, s);
    return;
  }
  double z = 0;
  for (int64_t e = 0; e < E; ++e) z += (s[e] = sigmoid(l[e]));
  for (int64_t e = 0; e < E; ++e) s[e] = float(s[e] / (z + 1e-20));
}

// dl[E] += d/dl of sum_e g[e] * scores(l)[e] (aux_scores' adjoint).
void aux_scores_backward(
    const float* l, const float* s, const float* g, int64_t E, bool use_sigmoid, float* dl) {
  double gs = 0;
  for (int64_t e = 0; e < E; ++e) gs += double(g[e]) * s[e];
  if (!use_sigmoid) {
    for (int64_t e = 0; e < E; ++e) dl[e] += s[e] * (g[e] - float(gs));
    return;
  }
  double z = 0;
  for (int64_t e = 0; e < E; ++e) z += sigmoid(l[e]);
  z += 1e-20;
  for (int64_t e = 0; e < E; ++e) {
    const float sg = sigmoid(l[e]);
    dl[e] += float((g[e] - gs) / z) * sg * (1.0f - sg);
  }
}

// A 20-bit hash of a (layer, token, expert) pair (splitmix64's finaliser).
double pair_hash(int64_t layer, int64_t token, int64_t expert) {
  uint64_t x = (uint64_t(layer) << 48) ^ (uint64_t(expert) << 40) ^ uint64_t(token);
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return double((x ^ (x >> 31)) >> 44);
}

// Index of local row t (of T sequence-parallel rows) in the micro-batch's 1-process row order
// (s * B + b, s the global position).
int64_t token_index(const RunCtx& rc, const TokenLayout& tl, int64_t T, int64_t t) {
  const int64_t r = (rc.tp.sequence_parallel ? rc.tp.rank * T : 0) + t;
  return int64_t(tl.pos[r]) * tl.B + r % tl.B;
}

// Megatron-Core's names: the layer's MLP prefix, and expert e's within it.
std::string mlp_prefix(int64_t layer) {
  return "decoder.layers." + std::to_string(layer) + ".mlp.";
}
std::string expert_prefix(int64_t layer, int64_t e) {
  return mlp_prefix(layer) + "experts.local_experts." + std::to_string(e) + ".";
}

}  // namespace

MoELayer::MoELayer(const ModelConfig& cfg,
                   int64_t layer,
                   const parallel::TensorParallel& tp,
                   const parallel::ExpertParallel& ep,
                   ParamBuffer& dense,
                   ParamBuffer& experts)
    : cfg_(cfg), dense_(dense), experts_(experts), layer_(layer) {
  E_ = cfg.num_experts;
  k_ = cfg.moe_router_topk;
  h_ = cfg.hidden_size;
  El_ = E_ / ep.ep_size;
  Fl_ = cfg.moe_ffn() / ep.etp_size;
  const int64_t F = cfg.moe_ffn(), h = h_;
  const float std = cfg.init_method_std;
  const float out_std = std / std::sqrt(2.0f * float(cfg.num_layers));
  router_w_ = dense.add(ParamSpec{.name = mlp_prefix(layer) + "router.weight",
                                  .global_shape = {E_, h},
                                  .local_shape = {E_, h},
                                  .init = ParamInit::kNormal,
                                  .init_std = std,
                                  .sequence_parallel = tp.sequence_parallel});
  for (int64_t le = 0; le < El_; ++le) {
    const std::string e = expert_prefix(layer, ep.ep_rank * El_ + le);
    // As the dense MLP (layer.cpp): fc1 column-parallel ([gate; up] as [2, F, h] with SwiGLU),
    // fc2 row-parallel, here over the ETP group.
    fc1_w_.push_back(experts.add(
        cfg.swiglu
            ? sharded_spec(e + "linear_fc1.weight", {2, F, h}, 1, ep.etp_rank, ep.etp_size, std)
            : sharded_spec(e + "linear_fc1.weight", {F, h}, 0, ep.etp_rank, ep.etp_size, std)));
    fc2_w_.push_back(experts.add(
        sharded_spec(e + "linear_fc2.weight", {h, F}, 1, ep.etp_rank, ep.etp_size, out_std)));
  }
}

void MoELayer::apply_capacity(const RunCtx& rc, const TokenLayout& tl, Stash& st, int64_t T) const {
  const Comm* g = rc.ep.tokens;
  const int64_t gs = g ? g->size() : 1, grank = g ? g->rank() : 0;
  const int64_t k = k_, T_mb = T * gs, n = T * k;
  const int64_t cap =
      int64_t(std::ceil(double(T_mb * k) / double(E_) * double(cfg_.moe_expert_capacity_factor)));
  if (cap > T_mb) return;  // as Megatron: a capacity above the token count drops nothing

  // (token index in the micro-batch, expert, weight) of every pair of the micro-batch.
  std::vector<double> mine(size_t(3 * n)), all(size_t(3 * n * gs));
  for (int64_t t = 0; t < T; ++t) {
    const double token = double(token_index(rc, tl, T, t));
    for (int64_t j = 0; j < k; ++j) {
      double* m = mine.data() + 3 * (t * k + j);
      m[0] = token;
      m[1] = st.idx[t * k + j];
      m[2] = st.weight[t * k + j];
    }
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
        st.row[pair] = -1;
        st.stats.dropped += 1;
        st.stats.dropped_hash += pair_hash(layer_, int64_t(mine[size_t(3 * pair)]), st.idx[pair]);
      }
      ++j;
    }
    i = j;
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
  const bool use_sigmoid = cfg_.moe_router_score_function == RouterScore::kSigmoid;
  st.x = x;
  st.stats = MoEStats{};

  // Router, in fp32 whatever the run's precision.
  st.logits = keep.alloc<float>(T * E);
  kernels::gemm(rc.k, Trans::kN, Trans::kT, T, E, h, 1.0f, x, h, dense_.master(router_w_), h, 0.0f,
                st.logits, E);
  st.idx = keep.alloc<int32_t>(T * k);
  st.weight = keep.alloc<float>(T * k);
  st.row = keep.alloc<int64_t>(T * k);
  {
    MT_PROFILE("moe.route");
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < T; ++t) {
      const float* l = st.logits + t * E;
      int32_t* idx = st.idx + t * k;
      float* w = st.weight + t * k;
      // Both score functions are monotonic, so the top-k of the scores is the top-k of the
      // logits; choosing on the logits avoids the exact ties that rounding sigmoid(l) to fp32
      // creates between close logits (which would make the choice depend on the last bit of the
      // logits, and so on the layout).
      top_k(l, E, k, idx);
      double sum = 0;
      if (!use_sigmoid) {  // softmax over the chosen logits
        const float m = l[idx[0]];
        for (int64_t j = 0; j < k; ++j) sum += (w[j] = std::exp(l[idx[j]] - m));
        for (int64_t j = 0; j < k; ++j) w[j] = float(w[j] / sum);
      } else {  // sigmoids, normalised to sum 1 when k > 1
        for (int64_t j = 0; j < k; ++j) sum += (w[j] = sigmoid(l[idx[j]]));
        if (k > 1)
          for (int64_t j = 0; j < k; ++j) w[j] = float(w[j] / (sum + 1e-20));
      }
      for (int64_t j = 0; j < k; ++j) st.row[t * k + j] = 0;
    }
  }

  // Auxiliary losses: statistics over the micro-batch's tokens (the TP x CP group); training
  // only, as the capacity limit.
  if (stash) router_statistics(rc, tl, st, keep, T);
  permute_and_run_experts(rc, st, keep, scratch, x, y, T);
}

void MoELayer::router_statistics(
    const RunCtx& rc, const TokenLayout& tl, Stash& st, Arena& keep, int64_t T) const {
  const int64_t E = E_, k = k_;
  const bool use_sigmoid = cfg_.moe_router_score_function == RouterScore::kSigmoid;
  const Comm* group = rc.ep.tokens;
  const int64_t T_mb = T * (group ? group->size() : 1);
  const int64_t row0 = rc.tp.sequence_parallel ? rc.tp.rank * T : 0;
  const auto lb = cfg_.moe_router_load_balancing_type;
  st.scores = nullptr;
  st.counts = nullptr;
  if (cfg_.moe_aux_loss_coeff > 0 && lb != RouterLoadBalancing::kNone) {
    const bool seq = lb == RouterLoadBalancing::kSeqAuxLoss;
    const int64_t nb = seq ? tl.B : 1;  // count vectors: one per sequence, or one
    st.scores = keep.alloc<float>(T * E);
    std::vector<double> counts(size_t(nb * E), 0.0), psum(size_t(nb * E), 0.0);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t b = seq ? (row0 + t) % tl.B : 0;
      aux_scores(st.logits + t * E, E, use_sigmoid, st.scores + t * E);
      for (int64_t e = 0; e < E; ++e) psum[size_t(b * E + e)] += st.scores[t * E + e];
      for (int64_t j = 0; j < k; ++j) counts[size_t(b * E + st.idx[t * k + j])] += 1;
    }
    parallel::sum_over_tokens(rc.ep, counts.data(), nb * E);
    st.counts = keep.alloc<float>(nb * E);
    const double T_seq = double(T_mb) / double(nb);  // tokens a count vector covers
    double loss = 0;
    for (int64_t i = 0; i < nb * E; ++i) {
      st.counts[i] = float(counts[size_t(i)]);
      loss += psum[size_t(i)] * counts[size_t(i)];
    }
    st.stats.load_balancing = loss * double(E) / (double(k) * T_seq * T_seq * double(nb));
  }
  if (cfg_.moe_z_loss_coeff > 0) {
    std::vector<float> p(static_cast<size_t>(E));
    double zsum = 0;
    for (int64_t t = 0; t < T; ++t) {
      const double lse = softmax(st.logits + t * E, E, p.data());
      zsum += lse * lse;
    }
    st.stats.z_loss = zsum / double(T_mb);
  }
  for (int64_t t = 0; t < T; ++t) {
    const int64_t token = token_index(rc, tl, T, t);
    for (int64_t j = 0; j < k; ++j)
      st.stats.routed_hash += pair_hash(layer_, token, st.idx[t * k + j]);
  }
  if (cfg_.moe_expert_capacity_factor > 0) apply_capacity(rc, tl, st, T);
}

void MoELayer::permute_and_run_experts(const RunCtx& rc,
                                       Stash& st,
                                       Arena& keep,
                                       Arena& scratch,
                                       const float* x,
                                       float* y,
                                       int64_t T) const {
  const int64_t E = E_, k = k_, h = h_;
  // Permute the kept pairs by expert (then token), dispatch, run the experts, combine.
  std::vector<int64_t> counts(size_t(E), 0);
  for (int64_t i = 0; i < T * k; ++i)
    if (st.row[i] >= 0) ++counts[size_t(st.idx[i])];
  std::vector<int64_t> next(size_t(E), 0);
  for (int64_t e = 1; e < E; ++e) next[size_t(e)] = next[size_t(e - 1)] + counts[size_t(e - 1)];
  const int64_t P = next[size_t(E - 1)] + counts[size_t(E - 1)];
  float* perm = scratch.alloc<float>(P * h);
  for (int64_t i = 0; i < T * k; ++i) {
    if (st.row[i] < 0) continue;
    st.row[i] = next[size_t(st.idx[i])]++;
    std::memcpy(perm + st.row[i] * h, x + (i / k) * h, sizeof(float) * size_t(h));
  }
  st.plan = parallel::DispatchPlan(rc.ep, counts.data(), E);
  const int64_t R = st.plan.expert_rows();
  float* ein = gemm_input_buffer(rc, keep, scratch, R * h);
  st.plan.to_experts(ein, perm, h, scratch);
  st.expert_in = as_gemm_input(rc, keep, ein, R * h);

  const int64_t w1 = cfg_.swiglu ? 2 * Fl_ : Fl_;
  st.fc1 = keep.alloc<float>(R * w1);
  for (int64_t e = 0; e < El_; ++e) {
    const int64_t b = st.plan.expert_begin(e), n = st.plan.expert_begin(e + 1) - b;
    if (n == 0) continue;
    linear_forward(rc, st.fc1 + b * w1, st.expert_in.at(b * h), experts_.weight(fc1_w_[e]), nullptr,
                   n, h, w1);
  }
  float* act = gemm_input_buffer(rc, keep, scratch, R * Fl_);
  if (cfg_.swiglu) {
    kernels::swiglu_forward(rc.k, act, st.fc1, R, Fl_);
  } else {
    kernels::gelu_forward(rc.k, act, st.fc1, R * Fl_);
  }
  st.act_in = as_gemm_input(rc, keep, act, R * Fl_);
  float* eout = scratch.alloc<float>(R * h);  // partial over ETP
  for (int64_t e = 0; e < El_; ++e) {
    const int64_t b = st.plan.expert_begin(e), n = st.plan.expert_begin(e + 1) - b;
    if (n == 0) continue;
    linear_forward(rc, eout + b * h, st.act_in.at(b * Fl_), experts_.weight(fc2_w_[e]), nullptr, n,
                   Fl_, h);
  }
  st.combined = keep.alloc<float>(P * h);
  st.plan.from_experts(st.combined, eout, h, scratch);

  MT_PROFILE("moe.combine");
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    float* yt = y + t * h;
    std::fill(yt, yt + h, 0.0f);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t r = st.row[t * k + j];
      if (r < 0) continue;
      const float w = st.weight[t * k + j];
      const float* o = st.combined + r * h;
      for (int64_t c = 0; c < h; ++c) yt[c] += w * o[c];
    }
  }
}

void MoELayer::backward(const RunCtx& rc,
                        const TokenLayout& tl,
                        const Stash& st,
                        Arena& scratch,
                        const float* dy,
                        float* dx) const {
  const int64_t T = rc.tp.sp_rows(tl.rows()), E = E_, k = k_, h = h_;
  const int64_t P = st.plan.local_rows(), R = st.plan.expert_rows();
  const bool use_sigmoid = cfg_.moe_router_score_function == RouterScore::kSigmoid;

  // Combine: y[t] = sum_j w_j combined[row_j].
  float* dcomb = scratch.alloc<float>(P * h);
  float* dw = scratch.alloc<float>(T * k);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    const float* g = dy + t * h;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t r = st.row[t * k + j];
      dw[t * k + j] = 0.0f;
      if (r < 0) continue;
      const float w = st.weight[t * k + j];
      const float* o = st.combined + r * h;
      float* d = dcomb + r * h;
      double dot = 0;
      for (int64_t c = 0; c < h; ++c) {
        d[c] = w * g[c];
        dot += double(g[c]) * o[c];
      }
      dw[t * k + j] = float(dot);
    }
  }

  // Experts.
  float* deout = scratch.alloc<float>(R * h);
  st.plan.to_experts(deout, dcomb, h, scratch);
  const int64_t w1 = cfg_.swiglu ? 2 * Fl_ : Fl_;
  float* dact = scratch.alloc<float>(R * Fl_);
  for (int64_t e = 0; e < El_; ++e) {
    const int64_t b = st.plan.expert_begin(e), n = st.plan.expert_begin(e + 1) - b;
    if (n == 0) continue;
    linear_backward(rc, scratch, dact + b * Fl_, experts_.grad(fc2_w_[e]), nullptr, deout + b * h,
                    st.act_in.at(b * Fl_), experts_.weight(fc2_w_[e]), n, Fl_, h);
  }
  float* dfc1 = scratch.alloc<float>(R * w1);
  if (cfg_.swiglu) {
    kernels::swiglu_backward(rc.k, dfc1, st.fc1, dact, R, Fl_);
  } else {
    kernels::gelu_backward(rc.k, dfc1, st.fc1, dact, R * Fl_);
  }
  float* dein = scratch.alloc<float>(R * h);  // partial over ETP
  for (int64_t e = 0; e < El_; ++e) {
    const int64_t b = st.plan.expert_begin(e), n = st.plan.expert_begin(e + 1) - b;
    if (n == 0) continue;
    linear_backward(rc, scratch, dein + b * h, experts_.grad(fc1_w_[e]), nullptr, dfc1 + b * w1,
                    st.expert_in.at(b * h), experts_.weight(fc1_w_[e]), n, h, w1);
  }
  float* dperm = scratch.alloc<float>(P * h);
  st.plan.from_experts(dperm, dein, h, scratch);

  // Router: routing weights, auxiliary losses and z-loss -> dlogits -> dW_r, dx.
  MT_PROFILE("moe.router_backward");
  const Comm* group = rc.ep.tokens;
  const int64_t T_mb = T * (group ? group->size() : 1);
  const int64_t row0 = rc.tp.sequence_parallel ? rc.tp.rank * T : 0;
  const bool seq = cfg_.moe_router_load_balancing_type == RouterLoadBalancing::kSeqAuxLoss;
  const int64_t nb = seq ? tl.B : 1;
  const double T_seq = double(T_mb) / double(nb);
  // d(aux)/d(score[t][i]) = coeff * E / (k T_seq^2 nb) * count[i], times the micro-batch weight.
  const double aux_g = tl.aux_weight * cfg_.moe_aux_loss_coeff * double(E) /
                       (double(k) * T_seq * T_seq * double(nb));
  const double z_g = tl.aux_weight * cfg_.moe_z_loss_coeff * 2.0 / double(T_mb);
  float* dlogits = scratch.alloc<float>(T * E);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    const float* l = st.logits + t * E;
    float* dl = dlogits + t * E;
    std::fill(dl, dl + E, 0.0f);
    const int32_t* idx = st.idx + t * k;
    const float* w = st.weight + t * k;
    const float* g = dw + t * k;
    double gw = 0;
    for (int64_t j = 0; j < k; ++j) gw += double(g[j]) * w[j];
    if (!use_sigmoid) {  // w = softmax over the chosen logits
      for (int64_t j = 0; j < k; ++j) dl[idx[j]] += w[j] * (g[j] - float(gw));
    } else {  // w = s / (sum s + eps) over the chosen s = sigmoid(l) (k > 1), or w = s
      double z = 0;
      for (int64_t j = 0; j < k; ++j) z += sigmoid(l[idx[j]]);
      for (int64_t j = 0; j < k; ++j) {
        const float s = sigmoid(l[idx[j]]);
        const double ds = k > 1 ? (g[j] - gw) / (z + 1e-20) : double(g[j]);
        dl[idx[j]] += float(ds) * s * (1.0f - s);
      }
    }
    if (st.scores) {
      const int64_t b = seq ? (row0 + t) % tl.B : 0;
      std::vector<float> ga(static_cast<size_t>(E));
      for (int64_t e = 0; e < E; ++e) ga[size_t(e)] = float(aux_g * st.counts[b * E + e]);
      aux_scores_backward(l, st.scores + t * E, ga.data(), E, use_sigmoid, dl);
    }
    if (z_g > 0) {
      std::vector<float> p(static_cast<size_t>(E));
      const float lse = softmax(l, E, p.data());
      for (int64_t e = 0; e < E; ++e) dl[e] += float(z_g * lse) * p[size_t(e)];
    }
  }
  // dx = the experts' input gradient (each token's kept pairs) + the router's.
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    float* d = dx + t * h;
    std::fill(d, d + h, 0.0f);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t r = st.row[t * k + j];
      if (r < 0) continue;
      const float* s = dperm + r * h;
      for (int64_t c = 0; c < h; ++c) d[c] += s[c];
    }
  }
  kernels::gemm(rc.k, Trans::kT, Trans::kN, E, h, T, 1.0f, dlogits, E, st.x, h, 1.0f,
                dense_.grad(router_w_), h);
  kernels::gemm(rc.k, Trans::kN, Trans::kN, T, h, E, 1.0f, dlogits, E, dense_.master(router_w_), h,
                1.0f, dx, h);
}

}  // namespace mtron::model
