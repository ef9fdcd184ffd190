// The reference kernels of kernels/moe.h (ref_ops.h): written from the definitions, in T with
// Acc<T> sums.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "mtron/kernels/ref/common.h"

namespace mtron::kernels::ref {

template <typename T>
T moe_sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// Softmax of l[E], or (sigmoid) the sigmoids normalised to sum 1.
template <typename T>
std::vector<Acc<T>> moe_scores(const T* l, int64_t E, bool sigmoid) {
  std::vector<Acc<T>> s(static_cast<size_t>(E));
  const Acc<T> m = *std::max_element(l, l + E);
  for (int64_t e = 0; e < E; ++e)
    s[size_t(e)] = sigmoid ? moe_sigmoid<Acc<T>>(l[e]) : std::exp(Acc<T>(l[e]) - m);
  const Acc<T> z = std::accumulate(s.begin(), s.end(), Acc<T>(0)) + (sigmoid ? 1e-20 : 0);
  for (auto& x : s) x /= z;
  return s;
}

// Megatron's topk_routing_with_score_function (kernels/moe.h): the choice on the logits, or
// with a bias or groups on the selection scores (softmax: the logits; sigmoid: sigmoid + bias).
template <typename T>
void moe_route(int32_t* idx, T* weight, const T* logits, const MoeRouting& r) {
  const int64_t E = r.E, k = r.k;
  const bool sigmoid = r.sigmoid, plain = !r.bias && r.group_topk == 0;
  for (int64_t t = 0; t < r.T; ++t) {
    const T* l = logits + t * E;
    std::vector<T> sel(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e)
      sel[size_t(e)] =
          plain || !sigmoid ? l[e] : T(moe_sigmoid<T>(l[e]) + (r.bias ? r.bias[e] : 0));
    auto by_score = [&](std::vector<int32_t>& v) {
      std::stable_sort(v.begin(), v.end(), [&](int32_t a, int32_t b) { return sel[a] > sel[b]; });
    };
    std::vector<int32_t> order;
    if (r.group_topk > 0) {  // groups by the sum of their top k / group_topk scores
      const int64_t per = E / r.groups, m = k / r.group_topk;
      std::vector<T> gscore(static_cast<size_t>(r.groups));
      for (int64_t g = 0; g < r.groups; ++g) {
        std::vector<int32_t> in(static_cast<size_t>(per));
        std::iota(in.begin(), in.end(), int32_t(g * per));
        by_score(in);
        T sum = 0;
        for (int64_t i = 0; i < m; ++i) sum += sel[size_t(in[size_t(i)])];
        gscore[size_t(g)] = sum;
      }
      std::vector<int32_t> groups(static_cast<size_t>(r.groups));
      std::iota(groups.begin(), groups.end(), 0);
      std::stable_sort(groups.begin(), groups.end(),
                       [&](int32_t a, int32_t b) { return gscore[a] > gscore[b]; });
      for (int64_t j = 0; j < r.group_topk; ++j)
        for (int64_t i = 0; i < per; ++i) order.push_back(int32_t(groups[size_t(j)] * per + i));
    } else {
      order.resize(static_cast<size_t>(E));
      std::iota(order.begin(), order.end(), 0);
    }
    std::sort(order.begin(), order.end());
    by_score(order);
    std::vector<T> chosen(static_cast<size_t>(k));
    for (int64_t j = 0; j < k; ++j) {
      idx[t * k + j] = order[size_t(j)];
      chosen[size_t(j)] = l[order[size_t(j)]];
    }
    std::vector<Acc<T>> w = sigmoid && k == 1 ? std::vector<Acc<T>>{moe_sigmoid<Acc<T>>(chosen[0])}
                                              : moe_scores(chosen.data(), k, sigmoid);
    if (!sigmoid && r.pre_softmax) {  // the softmax over all E at the chosen experts
      const std::vector<Acc<T>> p = moe_scores(l, E, false);
      for (int64_t j = 0; j < k; ++j) w[size_t(j)] = p[size_t(order[size_t(j)])];
    }
    const Acc<T> c = r.scale > 0 ? Acc<T>(r.scale) : Acc<T>(1);
    for (int64_t j = 0; j < k; ++j) weight[t * k + j] = T(w[size_t(j)] * c);
  }
}

template <typename T>
void moe_aux_scores(T* scores, const T* logits, const MoeRouting& r) {
  const int64_t E = r.E;
  for (int64_t t = 0; t < r.T; ++t) {
    const std::vector<Acc<T>> s = moe_scores(logits + t * E, E, r.sigmoid);
    for (int64_t e = 0; e < E; ++e) scores[t * E + e] = T(s[size_t(e)]);
  }
}

template <typename T>
void moe_aux_sums(double* psum,
                  double* counts,
                  const T* scores,
                  const int32_t* idx,
                  const MoeRouting& r,
                  int64_t nb,
                  int64_t row0) {
  const int64_t T_ = r.T, E = r.E, k = r.k;
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t e = 0; e < E; ++e) {
      Acc<T> p = 0;
      int64_t c = 0;
      for (int64_t t = 0; t < T_; ++t) {
        if ((row0 + t) % nb != b) continue;
        p += scores[t * E + e];
        for (int64_t j = 0; j < k; ++j) c += idx[t * k + j] == e;
      }
      psum[b * E + e] = double(p);
      counts[b * E + e] = double(c);
    }
}

template <typename T>
void moe_logsumexp(T* lse, const T* logits, const MoeRouting& r) {
  for (int64_t t = 0; t < r.T; ++t) {
    Acc<T> s = 0;
    for (int64_t e = 0; e < r.E; ++e) s += std::exp(Acc<T>(logits[t * r.E + e]));
    lse[t] = T(std::log(s));
  }
}

template <typename T>
void moe_permute(T* rows, const T* x, const int64_t* row, const MoeRouting& r, int64_t h) {
  for (int64_t i = 0; i < r.T * r.k; ++i)
    if (row[i] >= 0)
      for (int64_t c = 0; c < h; ++c) rows[row[i] * h + c] = x[(i / r.k) * h + c];
}

// y[t] = sum over t's kept pairs of (weight ? weight : 1) * rows[row].
template <typename T>
void moe_sum_pairs(
    T* y, const T* rows, const int64_t* row, const T* weight, const MoeRouting& r, int64_t h) {
  for (int64_t t = 0; t < r.T; ++t)
    for (int64_t c = 0; c < h; ++c) {
      Acc<T> s = 0;
      for (int64_t i = t * r.k; i < (t + 1) * r.k; ++i)
        if (row[i] >= 0) s += Acc<T>(weight ? weight[i] : T(1)) * rows[row[i] * h + c];
      y[t * h + c] = T(s);
    }
}

template <typename T>
void moe_permute_backward(
    T* dx, const T* drows, const int64_t* row, const MoeRouting& r, int64_t h) {
  moe_sum_pairs<T>(dx, drows, row, nullptr, r, h);
}

template <typename T>
void moe_combine(
    T* y, const T* rows, const int64_t* row, const T* weight, const MoeRouting& r, int64_t h) {
  moe_sum_pairs(y, rows, row, weight, r, h);
}

template <typename T>
void moe_combine_backward(T* drows,
                          T* dweight,
                          const T* dy,
                          const T* rows,
                          const int64_t* row,
                          const T* weight,
                          const MoeRouting& r,
                          int64_t h) {
  for (int64_t i = 0; i < r.T * r.k; ++i) {
    const int64_t p = row[i], t = i / r.k;
    Acc<T> dot = 0;
    for (int64_t c = 0; c < h && p >= 0; ++c) {
      drows[p * h + c] = weight[i] * dy[t * h + c];
      dot += Acc<T>(dy[t * h + c]) * rows[p * h + c];
    }
    dweight[i] = T(dot);
  }
}

// The Jacobian-vector products, from the definitions: d/dl of sum_j g_j w_j(l) with the weights
// of moe_route, of sum_e a_e s_e(l) with the scores of moe_aux_scores, and of z lse(l)^2 / 2.
template <typename T>
void moe_router_backward(T* dlogits,
                         const T* logits,
                         const int32_t* idx,
                         const T* weight,
                         const T* dweight,
                         const MoeRouting& r,
                         const MoeRouterLoss& loss) {
  const int64_t T_ = r.T, E = r.E, k = r.k, nb = loss.nb, row0 = loss.row0;
  const bool sigmoid = r.sigmoid;
  const float *scores = loss.scores, *counts = loss.counts;
  const double aux_grad = loss.aux_grad, z_grad = loss.z_grad;
  for (int64_t t = 0; t < T_; ++t) {
    const T* l = logits + t * E;
    std::vector<Acc<T>> dl(static_cast<size_t>(E), 0);
    // weight = c p (c the scaling factor): p's gradient is c dweight.
    const Acc<T> c = r.scale > 0 ? Acc<T>(r.scale) : Acc<T>(1);
    Acc<T> gw = 0;
    for (int64_t j = 0; j < k; ++j) gw += Acc<T>(dweight[t * k + j]) * weight[t * k + j];
    if (!sigmoid && r.pre_softmax) {  // weight_j = c p_j, p the softmax over all E
      const std::vector<Acc<T>> p = moe_scores(l, E, false);
      for (int64_t e = 0; e < E; ++e) dl[size_t(e)] -= p[size_t(e)] * gw;
      for (int64_t j = 0; j < k; ++j)
        dl[size_t(idx[t * k + j])] += Acc<T>(weight[t * k + j]) * dweight[t * k + j];
    } else {
      for (int64_t j = 0; j < k; ++j) {
        const int32_t e = idx[t * k + j];
        const Acc<T> g = c * Acc<T>(dweight[t * k + j]), w = weight[t * k + j] / c;
        if (!sigmoid) {
          dl[size_t(e)] += w * (g - gw);
        } else {
          const Acc<T> s = moe_sigmoid<Acc<T>>(l[e]);
          Acc<T> z = 0;
          for (int64_t i = 0; i < k; ++i) z += moe_sigmoid<Acc<T>>(l[idx[t * k + i]]);
          dl[size_t(e)] += (k > 1 ? (g - gw) / z : g) * s * (1 - s);
        }
      }
    }
    if (scores) {
      const std::vector<Acc<T>> s = moe_scores(l, E, sigmoid);
      const int64_t b = (row0 + t) % nb;
      Acc<T> as = 0;
      for (int64_t e = 0; e < E; ++e) as += aux_grad * counts[b * E + e] * s[size_t(e)];
      Acc<T> z = 0;
      for (int64_t e = 0; e < E; ++e) z += moe_sigmoid<Acc<T>>(l[e]);
      for (int64_t e = 0; e < E; ++e) {
        const Acc<T> a = aux_grad * counts[b * E + e], se = s[size_t(e)];
        if (!sigmoid) {
          dl[size_t(e)] += se * (a - as);
        } else {
          const Acc<T> sg = moe_sigmoid<Acc<T>>(l[e]);
          dl[size_t(e)] += (a - as) / z * sg * (1 - sg);
        }
      }
    }
    if (z_grad > 0) {
      const std::vector<Acc<T>> p = moe_scores(l, E, false);
      Acc<T> lse = 0;
      for (int64_t e = 0; e < E; ++e) lse += std::exp(Acc<T>(l[e]));
      lse = std::log(lse);
      for (int64_t e = 0; e < E; ++e) dl[size_t(e)] += z_grad * lse * p[size_t(e)];
    }
    for (int64_t e = 0; e < E; ++e) dlogits[t * E + e] = T(dl[size_t(e)]);
  }
}

}  // namespace mtron::kernels::ref
