// defines: moe_token::sigmoid, softmax_sum, logsumexp, route, aux_scores, router_backward
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

// idx[k]: the k largest logits (ties: lower expert first), best first; w[k]: their weights.
MT_HD void route(const float* l, int64_t E, int64_t k, bool use_sigmoid, int32_t* idx, float* w) {
  for (int64_t j = 0; j < k; ++j) {
    int32_t best = -1;
    for (int64_t e = 0; e < E; ++e) {
      bool taken = false;
      for (int64_t i = 0; i < j; ++i) taken |= idx[i] == e;
      if (!taken && (best < 0 || l[e] > l[best])) best = int32_t(e);
    }
    idx[j] = best;
  }
  double sum = 0;
  if (!use_sigmoid) {  // softmax over the chosen logits
    const float m = l[idx[0]];
    for (int64_t j = 0; j < k; ++j) sum += (w[j] = expf(l[idx[j]] - m));
    for (int64_t j = 0; j < k; ++j) w[j] = float(w[j] / sum);
  } else {  // sigmoids, normalised to sum 1 when k > 1
    for (int64_t j = 0; j < k; ++j) sum += (w[j] = sigmoid(l[idx[j]]));
    if (k > 1)
      for (int64_t j = 0; j < k; ++j) w[j] = float(w[j] / (sum + 1e-20));
  }
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
  double gw = 0;
  for (int64_t j = 0; j < k; ++j) gw += double(g[j]) * w[j];
  if (!use_sigmoid) {  // w = softmax over the chosen logits
    for (int64_t j = 0; j < k; ++j) dl[idx[j]] += w[j] * (g[j] - float(gw));
  } else {  // w = s / (sum s + eps) over the chosen s = sigmoid(l) (k > 1), or w = s
    double z = 0;
    for (int64_t j = 0; j < k; ++j) z += sigmoid(l[idx[j]]);
    for (int64_t j = 0; j < k; ++j) {
      const float sg = sigmoid(l[idx[j]]);
      const double ds = k > 1 ? (g[j] - gw) / (z + 1e-20) : double(g[j]);
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
