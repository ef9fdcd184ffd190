// The MoE layer in one process against independent references: the forward against a naive
// float64 evaluation of Megatron's router (softmax / sigmoid top-k, capacity with both drop
// policies), experts and combine, and the auxiliary losses against Megatron's formulas
// (E * sum_i f_i P_i per micro-batch or per sequence, z = mean logsumexp^2); the backward
// (routing weights, experts, aux loss and z-loss terms) against central finite differences
// of L = sum(y * r) + w * (c_aux * aux + c_z * z).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "mtron/model/layer.h"
#include "mtron/model/moe.h"
#include "test_helpers.h"

namespace mtron::model {
namespace {

struct Case {
  bool swiglu = true;
  RouterScore score = RouterScore::kSoftmax;
  RouterLoadBalancing lb = RouterLoadBalancing::kAuxLoss;
  float capacity = 0;  // 0: dropless
  TokenDropPolicy policy = TokenDropPolicy::kProbs;
  int64_t k = 2;
  std::string name() const {
    return std::string(swiglu ? "swiglu" : "gelu") +
           (score == RouterScore::kSigmoid ? " sigmoid" : " softmax") +
           (lb == RouterLoadBalancing::kSeqAuxLoss ? " seq_aux"
            : lb == RouterLoadBalancing::kSinkhorn ? " sinkhorn"
                                                   : " aux") +
           " k" + std::to_string(k) +
           (capacity > 0 ? (policy == TokenDropPolicy::kProbs ? " cap/probs" : " cap/position")
                         : " dropless");
  }
};

constexpr int64_t kB = 2, kS = 7, kT = kB * kS, kH = 16, kE = 4, kF = 12;
constexpr float kAuxCoeff = 0.1f, kZCoeff = 0.05f, kAuxWeight = 0.5f;

ModelConfig config(const Case& c) {
  ModelConfig m = tests::model_shape(2, kH, 2, kS, 10);
  m.swiglu = c.swiglu;
  m.ffn_hidden_size = kF;
  m.num_experts = kE;
  m.moe_ffn_hidden_size = kF;
  m.moe_router_topk = c.k;
  m.moe_router_score_function = c.score;
  m.moe_router_load_balancing_type = c.lb;
  m.moe_aux_loss_coeff = c.lb == RouterLoadBalancing::kSinkhorn ? 0.0f : kAuxCoeff;
  m.moe_z_loss_coeff = kZCoeff;
  m.moe_expert_capacity_factor = c.capacity;
  m.moe_token_drop_policy = c.policy;
  m.add_bias_linear = false;
  m.finalize();
  return m;
}

struct Layer {
  ModelConfig cfg;
  ParamBuffer dense, experts;
  std::unique_ptr<MoELayer> moe;
  RunCtx rc;
  std::vector<int32_t> pos;
  TokenLayout tl;
  explicit Layer(const Case& c) : cfg(config(c)) {
    moe = std::make_unique<MoELayer>(cfg, 0, "decoder.layers.0.mlp.", rc.tp, rc.ep, dense, experts);
    dense.allocate(Precision::kFP32, 1);
    experts.allocate(Precision::kFP32, 1);
    dense.init(7);
    experts.init(8);
    // Large router weights: wide gaps between experts' logits, so the finite differences
    // rarely cross a routing decision (those coordinates are skipped anyway).
    for (int64_t i = 0; i < kE * kH; ++i) dense.master(0)[i] *= 30.0f;
    for (int64_t s = 0; s < kS; ++s)
      for (int64_t b = 0; b < kB; ++b) pos.push_back(int32_t(s));
    tl = TokenLayout{kB, kS, pos.data(), kAuxWeight};
  }
  // Forward; returns L = sum(y * r) + w * (c_aux * aux + c_z * z) and the routing decisions.
  double loss(const std::vector<float>& x,
              const std::vector<float>& r,
              std::vector<float>* y,
              std::vector<int64_t>* routing) {
    Arena keep, scratch;
    MoELayer::Stash st;
    y->assign(size_t(kT * kH), 0.0f);
    moe->forward(rc, tl, &st, keep, scratch, x.data(), y->data());
    double l = 0;
    for (size_t i = 0; i < y->size(); ++i) l += double((*y)[i]) * r[i];
    routing->clear();
    for (int64_t i = 0; i < kT * cfg.moe_router_topk; ++i) {
      routing->push_back(st.idx[i]);
      routing->push_back(st.row[i] < 0 ? -1 : 0);
    }
    stats = st.stats;
    return l + kAuxWeight * (kAuxCoeff * st.stats.load_balancing + kZCoeff * st.stats.z_loss);
  }
  MoEStats stats;
};

std::vector<float> randn(int64_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(g);
  return v;
}

double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

// Naive float64 forward of the same layer, with Megatron's formulas.
struct Reference {
  std::vector<double> y;
  double aux = 0, z = 0;
  int64_t dropped = 0;
};

// Megatron's sinkhorn(cost) of the logits [kT, kE], as written there: exp, then d0 and d1
// alternately until the mean change of d1 is at most 1e-4.
std::vector<double> megatron_sinkhorn(const std::vector<double>& logits) {
  std::vector<double> cost(logits.size()), d0(size_t(kT), 1.0), d1(size_t(kE), 1.0);
  for (size_t i = 0; i < logits.size(); ++i) cost[i] = std::exp(logits[i]);
  for (double error = 1e9; error > 1e-4;) {
    for (int64_t t = 0; t < kT; ++t) {
      double sum = 0;
      for (int64_t e = 0; e < kE; ++e) sum += d1[size_t(e)] * cost[size_t(t * kE + e)];
      d0[size_t(t)] = 1.0 / kT / (sum + 1e-8);
    }
    error = 0;
    for (int64_t e = 0; e < kE; ++e) {
      double sum = 0;
      for (int64_t t = 0; t < kT; ++t) sum += d0[size_t(t)] * cost[size_t(t * kE + e)];
      const double d = 1.0 / kE / (sum + 1e-8);
      error += std::abs(d - d1[size_t(e)]) / kE;
      d1[size_t(e)] = d;
    }
  }
  for (int64_t t = 0; t < kT; ++t)
    for (int64_t e = 0; e < kE; ++e) cost[size_t(t * kE + e)] *= d0[size_t(t)] * d1[size_t(e)];
  return cost;
}

Reference reference(const Case& c, Layer& s, const std::vector<float>& x) {
  const int64_t k = c.k;
  const float* W = s.dense.master(0);
  std::vector<double> logits(size_t(kT * kE)), scores(size_t(kT * kE));
  std::vector<std::vector<int>> chosen(static_cast<size_t>(kT));
  std::vector<std::vector<double>> weight(static_cast<size_t>(kT));
  Reference out;
  for (int64_t t = 0; t < kT; ++t)
    for (int64_t e = 0; e < kE; ++e) {
      double a = 0;
      for (int64_t i = 0; i < kH; ++i) a += double(W[e * kH + i]) * x[size_t(t * kH + i)];
      logits[size_t(t * kE + e)] = a;
    }
  const bool sinkhorn = c.lb == RouterLoadBalancing::kSinkhorn && s.tl.train;
  const std::vector<double> balanced = sinkhorn ? megatron_sinkhorn(logits) : logits;
  for (int64_t t = 0; t < kT; ++t) {
    const double* l = &logits[size_t(t * kE)];
    std::vector<double> sc(&balanced[size_t(t * kE)], &balanced[size_t(t * kE)] + kE);
    if (c.score == RouterScore::kSigmoid)
      for (auto& v : sc) v = sigmoid(v);
    std::vector<int> order(kE);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return sc[size_t(a)] > sc[size_t(b)]; });
    order.resize(size_t(k));
    chosen[size_t(t)] = order;
    std::vector<double> w;
    double sum = 0;
    const double m = *std::max_element(l, l + kE);
    for (int e : order) {
      const double v = c.score == RouterScore::kSigmoid ? sc[size_t(e)]
                       : c.lb == RouterLoadBalancing::kSinkhorn
                           ? (k == 1 ? sigmoid(l[e]) : std::exp(l[e] - m))
                           : std::exp(l[e] - l[order[0]]);
      w.push_back(v);
      sum += v;
    }
    if (c.lb == RouterLoadBalancing::kSinkhorn) {
      // Sinkhorn's weights: the sigmoid (k = 1), or the softmax over all experts (k > 1)
      double all = 0;
      for (int64_t e = 0; e < kE; ++e) all += std::exp(l[e] - m);
      for (auto& v : w) v /= k == 1 ? 1.0 : all;
    } else if (c.score == RouterScore::kSoftmax || k > 1) {
      for (auto& v : w) v /= (sum + (c.score == RouterScore::kSigmoid ? 1e-20 : 0.0));
    }
    weight[size_t(t)] = w;
    // aux scores: softmax of all logits, or sigmoids normalised
    double se = 0, ss = 0;
    for (int64_t e = 0; e < kE; ++e) se += std::exp(l[e] - m);
    for (int64_t e = 0; e < kE; ++e) ss += sigmoid(l[e]);
    for (int64_t e = 0; e < kE; ++e)
      scores[size_t(t * kE + e)] =
          c.score == RouterScore::kSoftmax ? std::exp(l[e] - m) / se : sigmoid(l[e]) / (ss + 1e-20);
    const double lse = m + std::log(se);
    out.z += lse * lse / double(kT);
  }
  // Megatron's aux loss E * sum_i f_i P_i, over the micro-batch or per sequence (averaged).
  // (Sinkhorn routing: none.)
  const bool seq = c.lb == RouterLoadBalancing::kSeqAuxLoss;
  const int64_t vectors = c.lb == RouterLoadBalancing::kSinkhorn ? 0 : seq ? kB : 1;
  for (int64_t b = 0; b < vectors; ++b) {
    std::vector<double> f(kE, 0.0), P(kE, 0.0);
    int64_t n = 0;
    for (int64_t t = 0; t < kT; ++t) {
      if (seq && t % kB != b) continue;  // rows are s * B + b
      ++n;
      for (int e : chosen[size_t(t)]) f[size_t(e)] += 1;
      for (int64_t e = 0; e < kE; ++e) P[size_t(e)] += scores[size_t(t * kE + e)];
    }
    double a = 0;
    for (int64_t e = 0; e < kE; ++e)
      a += (f[size_t(e)] / double(n * k)) * (P[size_t(e)] / double(n));
    out.aux += double(kE) * a / (seq ? double(kB) : 1.0);
  }
  // Capacity: per expert keep the first ceil(T k / E cf) pairs by weight or by position.
  std::vector<std::vector<bool>> kept(size_t(kT), std::vector<bool>(size_t(k), true));
  if (c.capacity > 0) {
    const int64_t cap = int64_t(std::ceil(double(kT * k) / double(kE) * c.capacity));
    for (int e = 0; e < kE && cap <= kT; ++e) {
      std::vector<std::pair<int64_t, int64_t>> pairs;  // (t, slot)
      for (int64_t t = 0; t < kT; ++t)
        for (int64_t j = 0; j < k; ++j)
          if (chosen[size_t(t)][size_t(j)] == e) pairs.push_back({t, j});
      std::stable_sort(pairs.begin(), pairs.end(), [&](auto a, auto b) {
        if (c.policy == TokenDropPolicy::kPosition) return a.first < b.first;
        return weight[size_t(a.first)][size_t(a.second)] >
               weight[size_t(b.first)][size_t(b.second)];
      });
      for (size_t i = size_t(cap); i < pairs.size(); ++i) {
        kept[size_t(pairs[i].first)][size_t(pairs[i].second)] = false;
        ++out.dropped;
      }
    }
  }
  // Experts and combine.
  out.y.assign(size_t(kT * kH), 0.0);
  for (int64_t t = 0; t < kT; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      if (!kept[size_t(t)][size_t(j)]) continue;
      const int e = chosen[size_t(t)][size_t(j)];
      const float* w1 = s.experts.master(2 * e);
      const float* w2 = s.experts.master(2 * e + 1);
      std::vector<double> act(static_cast<size_t>(kF));
      for (int64_t f = 0; f < kF; ++f) {
        double g = 0, u = 0;
        for (int64_t i = 0; i < kH; ++i) {
          g += double(w1[f * kH + i]) * x[size_t(t * kH + i)];
          if (c.swiglu) u += double(w1[(kF + f) * kH + i]) * x[size_t(t * kH + i)];
        }
        act[size_t(f)] =
            c.swiglu ? g * sigmoid(g) * u
                     : 0.5 * g * (1 + std::tanh(std::sqrt(2 / M_PI) * (g + 0.044715 * g * g * g)));
      }
      for (int64_t o = 0; o < kH; ++o) {
        double v = 0;
        for (int64_t f = 0; f < kF; ++f) v += double(w2[o * kF + f]) * act[size_t(f)];
        out.y[size_t(t * kH + o)] += weight[size_t(t)][size_t(j)] * v;
      }
    }
  }
  return out;
}

class MoE : public ::testing::TestWithParam<Case> {};

TEST_P(MoE, ForwardMatchesReferenceAndBackwardMatchesFiniteDifferences) {
  const Case c = GetParam();
  Layer s(c);
  const auto x = randn(kT * kH, 11), r = randn(kT * kH, 12);
  std::vector<float> y;
  std::vector<int64_t> routing;
  s.loss(x, r, &y, &routing);

  const Reference ref = reference(c, s, x);
  for (size_t i = 0; i < y.size(); ++i)
    EXPECT_NEAR(y[i], ref.y[i], 1e-5 + 1e-4 * std::abs(ref.y[i])) << c.name() << " y[" << i << "]";
  EXPECT_NEAR(s.stats.load_balancing, ref.aux, 1e-5 * ref.aux) << c.name();
  EXPECT_NEAR(s.stats.z_loss, ref.z, 1e-5 * ref.z) << c.name();
  EXPECT_EQ(int64_t(s.stats.dropped), ref.dropped) << c.name();
  if (c.lb == RouterLoadBalancing::kSinkhorn) {
    // An evaluation forward chooses the plain top-k, with the same weights; the balancing of
    // the training forward chose otherwise for some tokens.
    s.tl.train = false;
    std::vector<float> ye;
    std::vector<int64_t> plain;
    s.loss(x, r, &ye, &plain);
    const Reference eval = reference(c, s, x);
    s.tl.train = true;
    for (size_t i = 0; i < ye.size(); ++i)
      EXPECT_NEAR(ye[i], eval.y[i], 1e-5 + 1e-4 * std::abs(eval.y[i])) << c.name() << " eval y";
    EXPECT_NE(plain, routing) << c.name() << ": the balancing changed no choice";
  }
  if (c.capacity > 0) {
    EXPECT_GT(ref.dropped, 0) << c.name() << ": the case should drop pairs";
  }

  // Backward, twice: with a random output gradient r (every term), and with r = 0, where L is
  // the weighted aux loss and z-loss alone (small terms, checked with a tight tolerance).
  const std::vector<float> zero(r.size(), 0.0f);
  for (const auto* rr : {&r, &zero}) {
    const bool aux_only = rr == &zero;
    Arena keep, scratch;
    MoELayer::Stash st;
    std::vector<float> y2(y.size()), dx(x.size());
    s.dense.zero_grad();
    s.experts.zero_grad();
    s.moe->forward(s.rc, s.tl, &st, keep, scratch, x.data(), y2.data());
    s.moe->backward(s.rc, s.tl, st, scratch, rr->data(), dx.data());

    // Central differences on each coordinate (in place); skipped where the routing changes.
    int64_t checked = 0, skipped = 0;
    std::vector<float> xv = x;
    auto check = [&](float* v, float analytic, const std::string& what) {
      const float h = 1e-2f * std::max(1.0f, std::abs(*v));
      const float v0 = *v;
      std::vector<float> yy;
      std::vector<int64_t> rp, rm;
      *v = v0 + h;
      const double lp = s.loss(xv, *rr, &yy, &rp);
      *v = v0 - h;
      const double lm = s.loss(xv, *rr, &yy, &rm);
      *v = v0;
      if (rp != routing || rm != routing) {
        ++skipped;
        return;
      }
      const double fd = (lp - lm) / (2.0 * h);
      ++checked;
      const double tol = aux_only ? 2e-6 + 1e-2 * std::abs(fd) : 2e-3 + 2e-2 * std::abs(fd);
      EXPECT_NEAR(analytic, fd, tol) << c.name() << (aux_only ? " (aux, z only) " : " ") << what;
    };
    for (int64_t i = 0; i < kE * kH; ++i)
      check(s.dense.master(0) + i, s.dense.grad(0)[i], "router weight " + std::to_string(i));
    for (int e = 0; e < kE && !aux_only; ++e)
      for (int p = 0; p < 2; ++p) {
        const int hnd = 2 * e + p;
        const int64_t n = s.experts.spec(hnd).numel();
        for (int64_t i = 0; i < n; i += 7)
          check(s.experts.master(hnd) + i, s.experts.grad(hnd)[i],
                "expert " + std::to_string(e) + (p ? " fc2 " : " fc1 ") + std::to_string(i));
      }
    for (int64_t i = 0; i < kT * kH; i += 3)
      check(xv.data() + i, dx[size_t(i)], "x " + std::to_string(i));
    EXPECT_GT(checked, 10 * skipped) << c.name() << ": too many coordinates change the routing";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases,
    MoE,
    ::testing::Values(Case{},
                      Case{.swiglu = false},
                      Case{.score = RouterScore::kSigmoid},
                      Case{.score = RouterScore::kSigmoid, .k = 1},
                      Case{.lb = RouterLoadBalancing::kSeqAuxLoss},
                      Case{.lb = RouterLoadBalancing::kSinkhorn, .k = 1},
                      Case{.swiglu = false, .lb = RouterLoadBalancing::kSinkhorn},
                      Case{.capacity = 0.5f},
                      Case{.capacity = 0.75f, .policy = TokenDropPolicy::kPosition},
                      Case{.score = RouterScore::kSigmoid,
                           .lb = RouterLoadBalancing::kSeqAuxLoss,
                           .capacity = 0.5f,
                           .k = 3}),
    [](const ::testing::TestParamInfo<Case>& info) {
      std::string n = info.param.name();
      for (char& ch : n)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n;
    });

}  // namespace
}  // namespace mtron::model
