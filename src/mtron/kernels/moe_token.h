// defines: moe_token::sigmoid, softmax_sum, logsumexp, weights, route, aux_scores,
//          router_backward
//
// The router's arithmetic for one token over its E logits (kernels/moe.h), written once for the
// CPU kernels (cpu/moe.cpp) and the CUDA ones (cuda/moe.cu, host and device functions), so both
// backends compute the same operations in the same order. Sums run in double; a softmax is
// exp(l - max) in fp32, summed in double, divided in double and rounded to fp32.
#pragma once

#include <cmath>
#include <cstdint>

#include "mtron/kernels/moe.h"

#if defined(__CUDACC__)
#define MT_HD __host__ __device__ inline
#else
#define MT_HD inline
#endif

namespace mtron::kernels::moe_token {

MT_HD float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

// The max of l[E] and the sum of exp(l - max).
MT_HD double softmax_sum(const float* l, int64_t E, float* max) {
  float m = l[0];
  for (int64_t e = 1; e < E; ++e) m = m < l[e] ? l[e] : m;
  double sum = 0;
  for (int64_t e = 0; e < E; ++e) sum += expf(l[e] - m);
  *max = m;
  return sum;
}

MT_HD float logsumexp(const float* l, int64_t E) {
  float m;
  const double sum = softmax_sum(l, E, &m);
  return m + float(log(sum));
}

// The selection score of expert e (kernels/moe.h, moe_route).
MT_HD float select_score(const float* l, const MoeRouting& r, int64_t e) {
  const bool on_logits = !r.bias && r.group_topk == 0;
  if (on_logits || !r.sigmoid) return l[e];
  return sigmoid(l[e]) + (r.bias ? r.bias[e] : 0.0f);
}

// Is (va, a) before (vb, b) in the order of the choice: larger score first, then lower index?
MT_HD bool before(float va, int64_t a, float vb, int64_t b) {
  return va > vb || (va == vb && a < b);
}

// The best expert of [lo, hi) after `prev` in that order (prev < 0: the best), among those whose
// group is one of the n groups in `groups` (n 0: any); -1 when none is left.
MT_HD int64_t next_best(const float* l,
                        const MoeRouting& r,
                        int64_t lo,
                        int64_t hi,
                        int64_t prev,
                        const float* groups,
                        int64_t n) {
  const float pv = prev >= 0 ? select_score(l, r, prev) : 0.0f;
  const int64_t per_group = n > 0 ? r.E / r.groups : 1;
  int64_t best = -1;
  float bv = 0.0f;
  for (int64_t e = lo; e < hi; ++e) {
    bool allowed = n == 0;
    for (int64_t i = 0; i < n; ++i) allowed |= int64_t(groups[i]) == e / per_group;
    if (!allowed) continue;
    const float v = select_score(l, r, e);
    if (prev >= 0 && !before(pv, prev, v, e)) continue;
    if (best < 0 || before(v, e, bv, best)) {
      best = e;
      bv = v;
    }
  }
  return best;
}

// w[k]: the weights of the chosen experts idx[k] (kernels/moe.h, moe_route).
MT_HD void weights(const float* l, const MoeRouting& r, const int32_t* idx, float* w) {
  const int64_t E = r.E, k = r.k;
  double sum = 0;
  if (!r.sigmoid && r.pre_softmax) {  // the softmax over all E at the chosen experts
    float mx;
    sum = softmax_sum(l, E, &mx);
    for (int64_t j = 0; j < k; ++j) w[j] = float(expf(l[idx[j]] - mx) / sum);
  } else if (!r.sigmoid) {  // softmax over the chosen logits
    const float mx = l[idx[0]];
    for (int64_t j = 0; j < k; ++j) sum += (w[j] = expf(l[idx[j]] - mx));
    for (int64_t j = 0; j < k; ++j) w[j] = float(w[j] / sum);
  } else {  // sigmoids, normalised to sum 1 when k > 1
    for (int64_t j = 0; j < k; ++j) sum += (w[j] = sigmoid(l[idx[j]]));
    if (k > 1)
      for (int64_t j = 0; j < k; ++j) w[j] = float(w[j] / (sum + 1e-20));
  }
  if (r.scale > 0)
    for (int64_t j = 0; j < k; ++j) w[j] *= r.scale;
}

// idx[k]: the chosen experts, best first; w[k]: their weights (kernels/moe.h, moe_route). With
// groups, w holds the chosen groups while the experts are chosen.
MT_HD void route(const float* l, const MoeRouting& r, int32_t* idx, float* w) {
  const int64_t E = r.E, k = r.k;
  int64_t ng = 0;
  if (r.group_topk > 0) {  // the groups, by the sums of their k / group_topk best scores
    const int64_t per_group = E / r.groups, m = k / r.group_topk;
    for (int64_t j = 0; j < r.group_topk; ++j) {
      int64_t best = -1;
      float bv = 0.0f;
      for (int64_t g = 0; g < r.groups; ++g) {
        bool taken = false;
        for (int64_t i = 0; i < j; ++i) taken |= int64_t(w[i]) == g;
        if (taken) continue;
        float sum = 0.0f;
        for (int64_t i = 0, e = -1; i < m; ++i) {
          e = next_best(l, r, g * per_group, (g + 1) * per_group, e, nullptr, 0);
          sum += select_score(l, r, e);
        }
        if (best < 0 || sum > bv) {
          best = g;
          bv = sum;
        }
      }
      w[j] = float(best);
    }
    ng = r.group_topk;
  }
  for (int64_t j = 0, e = -1; j < k; ++j) {
    e = next_best(l, r, 0, E, e, w, ng);
    idx[j] = int32_t(e);
  }
  weights(l, r, idx, w);
}

// s[E]: softmax of the logits, or their sigmoids normalised to sum 1.
MT_HD void aux_scores(const float* l, int64_t E, bool use_sigmoid, float* s) {
  double z = 0;
  if (!use_sigmoid) {
    float m;
    z = softmax_sum(l, E, &m);
    for (int64_t e = 0; e < E; ++e) s[e] = float(expf(l[e] - m) / z);
    return;
  }
  for (int64_t e = 0; e < E; ++e) z += (s[e] = sigmoid(l[e]));
  for (int64_t e = 0; e < E; ++e) s[e] = float(s[e] / (z + 1e-20));
}

// Token t's dlogits [E] (written): the gradient through its routing weights (whose gradient is
// dweight), plus loss's auxiliary and z-loss terms (kernels/moe.h).
MT_HD void router_backward(int64_t t,
                           const float* logits,
                           const int32_t* idx_all,
                           const float* weight,
                           const float* dweight,
                           const MoeRouting& r,
                           const MoeRouterLoss& loss,
                           float* dlogits) {
  const int64_t E = r.E, k = r.k;
  const bool use_sigmoid = r.sigmoid;
  const float* l = logits + t * E;
  const int32_t* idx = idx_all + t * k;
  const float* w = weight + t * k;
  const float* g = dweight + t * k;
  const float* s = loss.scores ? loss.scores + t * E : nullptr;
  const float* count = loss.counts ? loss.counts + (loss.row0 + t) % loss.nb * E : nullptr;
  const double aux_grad = loss.aux_grad, z_grad = loss.z_grad;
  float* dl = dlogits + t * E;
  for (int64_t e = 0; e < E; ++e) dl[e] = 0.0f;
  // w = c p with c = r.scale (1 without), p the normalised scores: with gw = sum_j g_j w_j / c,
  // softmax: dl_j = w_j (g_j - gw); sigmoid: ds_j = c (g_j - gw) / (sum s + eps) (k > 1).
  const double c = r.scale > 0 ? double(r.scale) : 1.0;
  double gw = 0;
  for (int64_t j = 0; j < k; ++j) gw += double(g[j]) * w[j];
  gw /= c;
  if (!use_sigmoid && r.pre_softmax) {  // p = softmax over all E: dl_e = c p_e (g_e - gw)
    float mx;
    const double sum = softmax_sum(l, E, &mx);
    for (int64_t e = 0; e < E; ++e) dl[e] -= float(c * gw * (expf(l[e] - mx) / sum));
    for (int64_t j = 0; j < k; ++j) dl[idx[j]] += w[j] * g[j];
  } else if (!use_sigmoid) {  // p = softmax over the chosen logits
    for (int64_t j = 0; j < k; ++j) dl[idx[j]] += w[j] * (g[j] - float(gw));
  } else {  // p = s / (sum s + eps) over the chosen s = sigmoid(l) (k > 1), or p = s
    double z = 0;
    for (int64_t j = 0; j < k; ++j) z += sigmoid(l[idx[j]]);
    for (int64_t j = 0; j < k; ++j) {
      const float sg = sigmoid(l[idx[j]]);
      const double ds = k > 1 ? c * (g[j] - gw) / (z + 1e-20) : c * double(g[j]);
      dl[idx[j]] += float(ds) * sg * (1.0f - sg);
    }
  }
  if (s) {  // the adjoint of aux_scores, with gradient a[e] = aux_grad * count[e] per score
    double gs = 0;
    for (int64_t e = 0; e < E; ++e) gs += double(float(aux_grad * count[e])) * s[e];
    if (!use_sigmoid) {
      for (int64_t e = 0; e < E; ++e) dl[e] += s[e] * (float(aux_grad * count[e]) - float(gs));
    } else {
      double z = 0;
      for (int64_t e = 0; e < E; ++e) z += sigmoid(l[e]);
      z += 1e-20;
      for (int64_t e = 0; e < E; ++e) {
        const float sg = sigmoid(l[e]);
        dl[e] += float((float(aux_grad * count[e]) - gs) / z) * sg * (1.0f - sg);
      }
    }
  }
  if (z_grad > 0) {  // d(lse^2 / 2)/dl = lse softmax(l)
    float m;
    const double sum = softmax_sum(l, E, &m);
    const float lse = m + float(log(sum));
    for (int64_t e = 0; e < E; ++e) dl[e] += float(z_grad * lse) * float(expf(l[e] - m) / sum);
  }
}

}  // namespace mtron::kernels::moe_token

#undef MT_HD
