// CPU LayerNorm and RMSNorm, forward and backward.
//
// One row (C channels) per iteration, statistics in fp32 with a two-pass variance (the row is in
// L1 for the second pass). Backward computes dinp row by row and the weight/bias gradients as
// partial sums over fixed blocks of kRowBlock rows, added in block order afterwards: the result
// does not depend on the thread count.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "mtron/kernels/cpu/norm.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// clang-format off
#include <hwy/highway.h>
#include "mtron/kernels/cpu/simd-inl.h"
// clang-format on

#include <cmath>
#include <vector>

#include "mtron/kernels/cpu/cpu_ops.h"
#include "mtron/kernels/cpu/parallel.h"

HWY_BEFORE_NAMESPACE();
namespace mtron::kernels::cpu::HWY_NAMESPACE {
namespace {

constexpr int64_t kRowBlock = 64;

// sum (x - mu)^2 over the row, or sum x when `square` is false (two accumulators)
template <bool kSquare>
float row_reduce(DF d, const float* x, float mu, int64_t C) {
  const VF vm = hn::Set(d, mu);
  VF s0 = hn::Zero(d), s1 = hn::Zero(d);
  const int64_t L = int64_t(hn::Lanes(d));
  auto term = [&](VF v) { return kSquare ? hn::Sub(v, vm) : v; };
  auto acc = [&](VF t, VF s) { return kSquare ? hn::MulAdd(t, t, s) : hn::Add(s, t); };
  int64_t c = 0;
  for (; c + 2 * L <= C; c += 2 * L) {
    s0 = acc(term(hn::LoadU(d, x + c)), s0);
    s1 = acc(term(hn::LoadU(d, x + c + L)), s1);
  }
  // the partial tail's missing lanes load as mu: they add (mu - mu)^2 = 0, or 0 to a plain sum
  for_lanes(d, c, C, [&](int64_t j, size_t k) {
    s0 = acc(term(load(d, x + j, k, kSquare ? mu : 0.0f)), s0);
  });
  return hsum(d, hn::Add(s0, s1));
}

// Adds the per-block partials part[nblocks][C] (block order) into grad[C]; threads split C.
void reduce_blocks(DF d, float* grad, const float* part, int64_t nblocks, int64_t C) {
  parallel_ranges(C, threads_for(nblocks * C * 4), kLine, [&](int64_t c0, int64_t c1) {
    for_lanes(d, c0, c1, [&](int64_t c, size_t k) {
      VF s = hn::Zero(d);
      for (int64_t b = 0; b < nblocks; ++b) s = hn::Add(s, load(d, part + b * C + c, k));
      store(d, hn::Add(load(d, grad + c, k), s), grad + c, k);
    });
  });
}

}  // namespace

// Stores the lanes v of row element i..: out fp32, or bf16 (convert's rounding).
void store_out(VF v, float* out, int64_t i, size_t k) {
  store(DF(), v, out + i, k);
}
void store_out(VF v, bf16* out, int64_t i, size_t k) {
  store(DU16(), to_bf16(DF(), v), bits(out + i), k);
}

template <typename T>
void layernorm_rows(T* out,
                    float* mean,
                    float* rstd,
                    const float* inp,
                    const float* weight,
                    const float* bias,
                    int64_t N,
                    int64_t C,
                    float eps) {
  const DF d;
  parallel_rows(N, threads_for(N * C * 8), [&](int64_t r) {
    const float* x = inp + r * C;
    T* o = out + r * C;
    const float mu = row_reduce<false>(d, x, 0.0f, C) / float(C);
    const float rs = 1.0f / std::sqrt(row_reduce<true>(d, x, mu, C) / float(C) + eps);
    mean[r] = mu;
    rstd[r] = rs;
    const VF vm = hn::Set(d, mu), vr = hn::Set(d, rs);
    for_lanes(d, 0, C, [&](int64_t c, size_t k) {
      const VF n = hn::Mul(hn::Sub(load(d, x + c, k), vm), vr);
      store_out(hn::MulAdd(n, load(d, weight + c, k), load(d, bias + c, k)), o, c, k);
    });
  });
}

void layernorm_forward(MT_PARAMS(layernorm_forward)) {
  layernorm_rows(out, mean, rstd, inp, weight, bias, N, C, eps);
}
void layernorm_forward_bf16(MT_PARAMS(layernorm_forward_bf16)) {
  layernorm_rows(out, mean, rstd, inp, weight, bias, N, C, eps);
}

void layernorm_backward(MT_PARAMS(layernorm_backward)) {
  const DF d;
  const int64_t nblocks = (N + kRowBlock - 1) / kRowBlock;
  std::vector<float> part(size_t(2 * nblocks * C));  // [2][nblocks][C]: dweight, dbias
  float* pw = part.data();
  float* pb = part.data() + nblocks * C;
  parallel_rows(nblocks, threads_for(N * C * 16), [&](int64_t blk) {
    float* bw = pw + blk * C;
    float* bb = pb + blk * C;
    for (int64_t c = 0; c < C; ++c) bw[c] = bb[c] = 0;
    for (int64_t r = blk * kRowBlock; r < std::min(N, (blk + 1) * kRowBlock); ++r) {
      const float* x = inp + r * C;
      const float* dy = dout + r * C;
      float* dx = dinp + r * C;
      const VF vm = hn::Set(d, mean[r]), vr = hn::Set(d, rstd[r]);
      // pass 1: the two row means, and the weight/bias partials
      VF sd = hn::Zero(d), sdn = hn::Zero(d);
      for_lanes(d, 0, C, [&](int64_t c, size_t k) {
        const VF g = load(d, dy + c, k);
        const VF n = hn::Mul(hn::Sub(load(d, x + c, k), vm), vr);
        const VF dn = hn::Mul(g, load(d, weight + c, k));
        sd = hn::Add(sd, dn);
        sdn = hn::MulAdd(dn, n, sdn);
        store(d, hn::Add(load(d, bb + c, k), g), bb + c, k);
        store(d, hn::MulAdd(g, n, load(d, bw + c, k)), bw + c, k);
      });
      const VF mdn = hn::Set(d, hsum(d, sd) / float(C));
      const VF mdnn = hn::Set(d, hsum(d, sdn) / float(C));
      // pass 2: dx += rstd (dnorm - mean(dnorm) - norm mean(dnorm norm))
      for_lanes(d, 0, C, [&](int64_t c, size_t k) {
        const VF n = hn::Mul(hn::Sub(load(d, x + c, k), vm), vr);
        const VF dn = hn::Mul(load(d, dy + c, k), load(d, weight + c, k));
        const VF t = hn::NegMulAdd(n, mdnn, hn::Sub(dn, mdn));
        store(d, hn::MulAdd(vr, t, load(d, dx + c, k)), dx + c, k);
      });
    }
  });
  reduce_blocks(d, dweight, pw, nblocks, C);
  reduce_blocks(d, dbias, pb, nblocks, C);
}

template <typename T>
void rmsnorm_rows(
    T* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C, float eps) {
  const DF d;
  parallel_rows(N, threads_for(N * C * 8), [&](int64_t r) {
    const float* x = inp + r * C;
    T* o = out + r * C;
    const float rs = 1.0f / std::sqrt(row_reduce<true>(d, x, 0.0f, C) / float(C) + eps);
    rstd[r] = rs;
    const VF vr = hn::Set(d, rs);
    for_lanes(d, 0, C, [&](int64_t c, size_t k) {
      store_out(hn::Mul(hn::Mul(load(d, x + c, k), vr), load(d, weight + c, k)), o, c, k);
    });
  });
}

void rmsnorm_forward(MT_PARAMS(rmsnorm_forward)) {
  rmsnorm_rows(out, rstd, inp, weight, N, C, eps);
}
void rmsnorm_forward_bf16(MT_PARAMS(rmsnorm_forward_bf16)) {
  rmsnorm_rows(out, rstd, inp, weight, N, C, eps);
}

void rmsnorm_backward(MT_PARAMS(rmsnorm_backward)) {
  const DF d;
  const int64_t nblocks = (N + kRowBlock - 1) / kRowBlock;
  std::vector<float> part(size_t(nblocks * C));
  parallel_rows(nblocks, threads_for(N * C * 16), [&](int64_t blk) {
    float* bw = part.data() + blk * C;
    for (int64_t c = 0; c < C; ++c) bw[c] = 0;
    for (int64_t r = blk * kRowBlock; r < std::min(N, (blk + 1) * kRowBlock); ++r) {
      const float* x = inp + r * C;
      const float* dy = dout + r * C;
      float* dx = dinp + r * C;
      const VF vr = hn::Set(d, rstd[r]);
      VF sdn = hn::Zero(d);
      for_lanes(d, 0, C, [&](int64_t c, size_t k) {
        const VF g = load(d, dy + c, k);
        const VF n = hn::Mul(load(d, x + c, k), vr);
        sdn = hn::MulAdd(hn::Mul(g, load(d, weight + c, k)), n, sdn);
        store(d, hn::MulAdd(g, n, load(d, bw + c, k)), bw + c, k);
      });
      const VF mdnn = hn::Set(d, hsum(d, sdn) / float(C));
      for_lanes(d, 0, C, [&](int64_t c, size_t k) {
        const VF n = hn::Mul(load(d, x + c, k), vr);
        const VF dn = hn::Mul(load(d, dy + c, k), load(d, weight + c, k));
        const VF t = hn::NegMulAdd(n, mdnn, dn);
        store(d, hn::MulAdd(vr, t, load(d, dx + c, k)), dx + c, k);
      });
    }
  });
  reduce_blocks(d, dweight, part.data(), nblocks, C);
}

}  // namespace mtron::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mtron::kernels::cpu {
MTRON_NORM_OPS(MT_CPU_EXPORT)
}  // namespace mtron::kernels::cpu
#endif  // HWY_ONCE
