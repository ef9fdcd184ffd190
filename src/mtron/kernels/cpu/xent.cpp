// CPU cross-entropy building blocks over a logits chunk (see xent.h).
//
// Stats walk each row once in chunks of kChunk columns: the chunk's max (from memory), a rescale
// of the running sum when the max grows, then the chunk's sum of exp from L1. One exp per
// element, and the exp work overlaps the prefetching of the next chunk. Padded columns (global id
// >= vocab_valid) are never read by the stats and are written as 0 by the backward.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "mtron/kernels/cpu/xent.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// clang-format off
#include <hwy/highway.h>
#include "mtron/kernels/cpu/simd-inl.h"
// clang-format on

#include <cmath>
#include <limits>

#include "mtron/kernels/cpu/cpu_ops.h"
#include "mtron/kernels/cpu/parallel.h"

HWY_BEFORE_NAMESPACE();
namespace mtron::kernels::cpu::HWY_NAMESPACE {
namespace {

constexpr int64_t kChunk = 2048;  // 8 KB: stays in L1 between the two looks
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Number of columns of the chunk that are real vocabulary entries.
int64_t valid_cols(int64_t Vl, int64_t col_start, int64_t vocab_valid) {
  return std::clamp<int64_t>(vocab_valid - col_start, 0, Vl);
}

// xent_stats of fp32 or bf16 logits (T), each read widened.
template <typename T>
void stats_rows(MT_PARAMS_OF(xent_stats, T)) {
  const DF d;
  const int64_t nv = valid_cols(Vl, col_start, vocab_valid), L = int64_t(hn::Lanes(d));
  const size_t full = hn::Lanes(d);
  parallel_rows(n, threads_for(n * nv * int64_t(sizeof(T))), [&](int64_t r) {
    const T* x = logits + r * Vl;
    float mx = kNegInf, se = 0;
    for (int64_t c0 = 0; c0 < nv; c0 += kChunk) {
      const int64_t c1 = std::min(nv, c0 + kChunk);
      VF m0 = hn::Set(d, kNegInf), m1 = m0;
      int64_t c = c0;
      for (; c + 2 * L <= c1; c += 2 * L) {
        m0 = hn::Max(m0, load_f32(d, x + c, full));
        m1 = hn::Max(m1, load_f32(d, x + c + L, full));
      }
      for_lanes(d, c, c1,
                [&](int64_t j, size_t k) { m0 = hn::Max(m0, load_f32(d, x + j, k, kNegInf)); });
      const float cm = hmax(d, hn::Max(m0, m1));
      if (cm == kNegInf) continue;  // every logit of the chunk is -inf: adds nothing
      if (cm > mx) {
        se = mx == kNegInf ? 0.0f : se * std::exp(mx - cm);
        mx = cm;
      }
      const VF vm = hn::Set(d, mx);
      VF s0 = hn::Zero(d), s1 = hn::Zero(d);
      for (c = c0; c + 2 * L <= c1; c += 2 * L) {
        s0 = hn::Add(s0, exp(d, hn::Sub(load_f32(d, x + c, full), vm)));
        s1 = hn::Add(s1, exp(d, hn::Sub(load_f32(d, x + c + L, full), vm)));
      }
      // missing lanes of a partial tail load as -inf: exp(-inf - mx) = 0
      for_lanes(d, c, c1, [&](int64_t j, size_t k) {
        s0 = hn::Add(s0, exp(d, hn::Sub(load_f32(d, x + j, k, kNegInf), vm)));
      });
      se += hsum(d, hn::Add(s0, s1));
    }
    row_max[r] = mx;
    row_sumexp[r] = se;
    const int64_t t = int64_t(targets[r]) - col_start;
    target_logit[r] = (t >= 0 && t < Vl) ? hn::GetLane(load_f32(d, x + t, 1)) : 0.0f;
  });
}

}  // namespace

void xent_stats(MT_PARAMS(xent_stats)) {
  stats_rows(row_max, row_sumexp, target_logit, logits, targets, n, Vl, col_start, vocab_valid);
}

void xent_stats_bf16(MT_PARAMS(xent_stats_bf16)) {
  stats_rows(row_max, row_sumexp, target_logit, logits, targets, n, Vl, col_start, vocab_valid);
}

void xent_rescale(MT_PARAMS(xent_rescale)) {
  for (int64_t r = 0; r < n; ++r) {
    row_sumexp[r] = xent_rescaled_sumexp(row_sumexp[r], row_max[r], global_max[r]);
    row_max[r] = global_max[r];
  }
}

void xent_loss_sum(MT_PARAMS(xent_loss_sum)) {
  double s = 0;
  for (int64_t r = 0; r < n; ++r) {
    if (!row_mask || row_mask[r] != 0.0f)
      s += xent_row_loss(row_max[r], row_sumexp[r], target_logit[r]);
  }
  *loss_sum += s;
}

namespace {

// k lanes of fp32 values to a float or bf16 row.
void store_lanes(VF v, float* p, size_t k) {
  store(DF(), v, p, k);
}
void store_lanes(VF v, bf16* p, size_t k) {
  store(DU16(), to_bf16(DF(), v), bits(p), k);
}

// xent_backward to a float or bf16 dlogits (each vector of fp32 gradients rounded once, the
// target's lane with its -scale already in) from fp32 or bf16 logits (L).
template <typename T, typename L>
void xent_grad_rows(MT_PARAMS_EXPAND(MT_PARAMS_xent_backward_in(T, L))) {
  const DF d;
  const hn::RebindToSigned<DF> di;
  const int64_t nv = valid_cols(Vl, col_start, vocab_valid);
  parallel_rows(n, threads_for(n * Vl * int64_t(sizeof(L) + sizeof(T))), [&](int64_t r) {
    const L* x = logits + r * Vl;
    T* g = dlogits + r * Vl;
    const float scale = row_scale ? row_scale[r] : 1.0f;
    const bool empty = row_max[r] == kNegInf || !(row_sumexp[r] > 0);
    const VF vm = hn::Set(d, empty ? 0.0f : row_max[r]);
    const VF vs = hn::Set(d, empty ? 0.0f : scale / row_sumexp[r]);
    const int64_t t = int64_t(targets[r]) - col_start;
    for_lanes(d, 0, nv, [&](int64_t c, size_t k) {
      VF v = hn::Mul(exp(d, hn::Sub(load_f32(d, x + c, k), vm)), vs);
      if (t >= c && t < c + int64_t(k)) {
        const auto at_t = hn::Eq(hn::Iota(di, int32_t(c)), hn::Set(di, int32_t(t)));
        v = hn::Sub(v, hn::IfThenElseZero(hn::RebindMask(d, at_t), hn::Set(d, scale)));
      }
      store_lanes(v, g + c, k);
    });
    for_lanes(d, nv, Vl, [&](int64_t c, size_t k) { store_lanes(hn::Zero(d), g + c, k); });
  });
}

}  // namespace

void xent_backward(MT_PARAMS(xent_backward)) {
  xent_grad_rows(dlogits, logits, targets, row_max, row_sumexp, row_scale, n, Vl, col_start,
                 vocab_valid);
}

void xent_backward_bf16(MT_PARAMS(xent_backward_bf16)) {
  xent_grad_rows(dlogits, logits, targets, row_max, row_sumexp, row_scale, n, Vl, col_start,
                 vocab_valid);
}

void xent_backward_bf16_logits(MT_PARAMS(xent_backward_bf16_logits)) {
  xent_grad_rows(dlogits, logits, targets, row_max, row_sumexp, row_scale, n, Vl, col_start,
                 vocab_valid);
}

}  // namespace mtron::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mtron::kernels::cpu {
MTRON_XENT_OPS(MT_CPU_EXPORT)
}  // namespace mtron::kernels::cpu
#endif  // HWY_ONCE
