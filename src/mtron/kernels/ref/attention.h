// The reference kernels of kernels/attention.h (ref_ops.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "mtron/kernels/ref/common.h"

namespace mtron::kernels::ref {

inline bool visible(const AttnMask& m, int64_t i, int64_t j) {
  return !m.causal || j <= i + m.offset;
}

// Softmax probabilities of query row (b, h, i) over all keys (0 where masked); false when
// every key is masked. Also returns lse.
template <typename T>
bool probs(std::vector<Acc<T>>& p,
           Acc<T>* lse,
           const T* q,
           const T* k,
           const AttnShape& s,
           const AttnMask& mask,
           int64_t b,
           int64_t h,
           int64_t i) {
  const int64_t g = h / (s.H / s.G);
  const T* qi = q + s.q_at(i, b, h);
  Acc<T> mx = -std::numeric_limits<Acc<T>>::infinity();
  p.assign(size_t(s.Sk), 0);
  bool any = false;
  for (int64_t j = 0; j < s.Sk; ++j) {
    if (!visible(mask, i, j)) continue;
    const T* kj = k + s.kv_at(j, b, g, s.D);
    Acc<T> dot = 0;
    for (int64_t d = 0; d < s.D; ++d) dot += Acc<T>(qi[d]) * kj[d];
    p[size_t(j)] = dot * s.scale;
    mx = std::max(mx, p[size_t(j)]);
    any = true;
  }
  if (!any) return false;
  Acc<T> sum = 0;
  for (int64_t j = 0; j < s.Sk; ++j)
    if (visible(mask, i, j)) sum += std::exp(p[size_t(j)] - mx);
  for (int64_t j = 0; j < s.Sk; ++j)
    p[size_t(j)] = visible(mask, i, j) ? std::exp(p[size_t(j)] - mx) / sum : 0;
  *lse = mx + std::log(sum);
  return true;
}

// The dropout multipliers of query row (b, h, i) over all keys (all 1 without dropout).
inline void dropout_row(
    std::vector<float>& z, const AttnShape& s, const AttnMask& m, int64_t b, int64_t h, int64_t i) {
  z.assign(size_t(s.Sk), 1.0f);
  const AttnDropout& d = m.dropout;
  if (d.p > 0) dropout_scales(z.data(), d.key, d.row_index(b, h, i), 1, s.Sk, d.p);
}

template <typename T>
void attention_forward(
    T* out, T* lse, const T* q, const T* k, const T* v, const AttnShape& s, AttnMask mask) {
  std::vector<Acc<T>> p;
  std::vector<float> z;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t i = 0; i < s.Sq; ++i) {
        const int64_t g = h / (s.H / s.G);
        dropout_row(z, s, mask, b, h, i);
        T* o = out + s.o_at(i, b, h);
        Acc<T> l = 0;
        if (!probs(p, &l, q, k, s, mask, b, h, i)) {
          for (int64_t d = 0; d < s.Dv; ++d) o[d] = 0;
          lse[(b * s.H + h) * s.Sq + i] = -std::numeric_limits<T>::infinity();
          continue;
        }
        for (int64_t d = 0; d < s.Dv; ++d) {
          Acc<T> acc = 0;
          for (int64_t j = 0; j < s.Sk; ++j)
            acc += p[size_t(j)] * z[size_t(j)] * v[s.kv_at(j, b, g, s.Dv) + d];
          o[d] = T(acc);
        }
        lse[(b * s.H + h) * s.Sq + i] = T(l);
      }
}

// With P the softmax row, z its dropout multipliers and dP_j = z_j dO . v_j:
// dS_j = P_j (dP_j - sum_j' P_j' dP_j'), dq += scale sum_j dS_j k_j,  dk_j += scale dS_j q,
// dv_j += P_j z_j dO.
template <typename T>
void attention_backward(T* dq,
                        T* dk,
                        T* dv,
                        const T* dout,
                        const T* q,
                        const T* k,
                        const T* v,
                        const AttnShape& s,
                        AttnMask mask) {
  std::vector<Acc<T>> p, dp;
  std::vector<float> z;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t i = 0; i < s.Sq; ++i) {
        const int64_t g = h / (s.H / s.G);
        Acc<T> l;
        if (!probs(p, &l, q, k, s, mask, b, h, i)) continue;
        dropout_row(z, s, mask, b, h, i);
        const int64_t qi = s.q_at(i, b, h), oi = s.o_at(i, b, h);
        dp.assign(size_t(s.Sk), 0);
        Acc<T> delta = 0;
        for (int64_t j = 0; j < s.Sk; ++j) {
          const int64_t vj = s.kv_at(j, b, g, s.Dv);
          for (int64_t d = 0; d < s.Dv; ++d) dp[size_t(j)] += Acc<T>(dout[oi + d]) * v[vj + d];
          dp[size_t(j)] *= z[size_t(j)];
          delta += p[size_t(j)] * dp[size_t(j)];
        }
        for (int64_t j = 0; j < s.Sk; ++j) {
          const int64_t kj = s.kv_at(j, b, g, s.D);
          const int64_t vj = s.kv_at(j, b, g, s.Dv);
          const Acc<T> ds = p[size_t(j)] * (dp[size_t(j)] - delta) * s.scale;
          for (int64_t d = 0; d < s.D; ++d) {
            dq[qi + d] = T(dq[qi + d] + ds * k[kj + d]);
            dk[kj + d] = T(dk[kj + d] + ds * q[qi + d]);
          }
          for (int64_t d = 0; d < s.Dv; ++d)
            dv[vj + d] = T(dv[vj + d] + p[size_t(j)] * z[size_t(j)] * dout[oi + d]);
        }
      }
}

// Per query row: lse' = log(e^lse + e^lse_blk), out = e^(lse - lse') out + e^(lse_blk - lse')
// out_blk, in Acc<T>; rows with both lse -inf untouched.
template <typename T>
void attention_merge(T* out, T* lse, const T* out_blk, const T* lse_blk, const AttnShape& s) {
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t i = 0; i < s.Sq; ++i) {
        const int64_t li = (b * s.H + h) * s.Sq + i;
        const Acc<T> l1 = lse[li], l2 = lse_blk[li], m = std::max(l1, l2);
        if (m == -std::numeric_limits<Acc<T>>::infinity()) continue;
        const Acc<T> l = m + std::log(std::exp(l1 - m) + std::exp(l2 - m));
        const Acc<T> w1 = std::exp(l1 - l), w2 = std::exp(l2 - l);
        T* o = out + s.o_at(i, b, h);
        const T* ob = out_blk + s.o_at(i, b, h);
        for (int64_t d = 0; d < s.Dv; ++d) o[d] = T(w1 * o[d] + w2 * ob[d]);
        lse[li] = T(l);
      }
}

}  // namespace mtron::kernels::ref
