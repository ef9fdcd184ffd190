// The op table's attention cases (op_table.h): attention_forward and attention_backward in fp32
// and with bf16 products, split and in the fused QKV layout, with masks, dropout, GQA and value
// head dims of their own; their bf16 ops; attention_merge.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "mtron/core/error.h"
#include "mtron/core/philox.h"
#include "mtron/kernels/ops.h"
#include "mtron/kernels/ref/ref_ops.h"
#include "op_checker.h"
#include "op_table_cases.h"

namespace mtron::kernels::test {
namespace {

struct Case {
  AttnShape s;
  AttnMask mask;
};

// The bf16 ops on q, k, v (qkv as qkv_spans lays them out) and dout rounded to bf16, against the
// reference of the rounded values widened: out, lse, and dq, dk, dv, which the backward writes
// (poison where it does not). The backward reads the reference's out and lse, out rounded. On one
// reference: by default, with AttnShape::own_kernels (CUDA: mtron's tensor-core kernels where
// cuDNN's fused attention takes the shape by default), and the backward with
// AttnShape::nondeterministic (cuDNN's graph with an fp32 dq accumulator).
void check_bf16_ops(Checker& ck,
                    const AttnShape& s,
                    const AttnMask& mask,
                    const std::vector<float>& qkv,
                    const std::vector<float>& dout) {
  const QkvSpans sp = qkv_spans(s);
  const int64_t no = s.Sq * s.B * s.H * s.Dv, nl = s.B * s.H * s.Sq;
  Pair<bf16> q16(narrow<bf16>(qkv)), do16(narrow<bf16>(dout));
  const std::vector<float> qw = widen(q16.host_result()), dw = widen(do16.host_result());
  std::vector<float> want_o(static_cast<size_t>(no)), want_l(static_cast<size_t>(nl));
  std::vector<float> want_d(static_cast<size_t>(sp.size), 0.0f);
  const float* q = qw.data();
  ref::attention_forward(want_o.data(), want_l.data(), q, q + sp.k_at, q + sp.v_at, s, mask);
  float* d = want_d.data();
  ref::attention_backward(d, d + sp.k_at, d + sp.v_at, dw.data(), q, q + sp.k_at, q + sp.v_at, s,
                          mask);
  const bf16* qd = q16.dev();
  for (int variant = 0; variant < 3; ++variant) {
    AttnShape so = s;
    so.own_kernels = variant == 1;
    so.nondeterministic = variant == 2;
    const std::string tag = variant == 1   ? ", own kernels"
                            : variant == 2 ? ", nondeterministic"
                                           : "";
    if (variant < 2) {  // the forward is the same graph either way
      Pair<bf16> o16(narrow<bf16>(poison(no)));
      Pair<float> lse(poison(nl));
      attention_forward(g_dev, o16.dev(), lse.dev(), qd, qd + sp.k_at, qd + sp.v_at, so, mask);
      ck.check("bf16 out" + tag, widen(o16.dev_result()), want_o, kTolBf16);
      ck.check("bf16 lse" + tag, lse.dev_result(), want_l, kTolBf16);
    }
    Pair<bf16> out16(narrow<bf16>(want_o)), dqkv(narrow<bf16>(poison(sp.size)));
    Pair<float> l2(want_l);
    bf16* g = dqkv.dev();
    attention_backward(g_dev, g, g + sp.k_at, g + sp.v_at, do16.dev(), qd, qd + sp.k_at,
                       qd + sp.v_at, out16.dev(), l2.dev(), so, mask);
    ck.check("bf16 dq, dk, dv (=)" + tag, widen(dqkv.dev_result()), want_d, kTolBf16);
  }
}

}  // namespace

void attention_cases(Checker& ck, bool small) {
  // Dv (the value head dim) defaults to D.
  auto shape = [](int64_t B, int64_t Sq, int64_t Sk, int64_t H, int64_t G, int64_t D,
                  int64_t Dv = 0) {
    return AttnShape{B, Sq, Sk, H, G, D, Dv ? Dv : D, 1.0f / std::sqrt(float(D))};
  };
  // Attention dropout p = 0.1 of local heads, samples and positions that are global ones
  // [h0, ..), [b0, ..), [q0, ..) and [k0, ..) of H heads and sequences of S (TP, DP, CP chunks).
  auto dropped = [](AttnMask m, int64_t b0, int64_t h0, int64_t H, int64_t q0, int64_t k0,
                    int64_t S) {
    m.dropout = {0.1f, rng_key(9, "op table attention dropout"), b0, h0, H, q0, k0, S};
    return m;
  };
  std::vector<Case> cases = {
      {shape(1, 1, 1, 1, 1, 8), {true, 0}},
      {shape(2, 33, 33, 4, 2, 24), {true, 0}},
      {shape(1, 17, 40, 4, 1, 64), {true, 23}},  // queries at the end of the keys
      {shape(1, 40, 17, 2, 2, 16), {false, 0}},  // no mask
      {shape(1, 20, 20, 2, 1, 40), {true, -7}},  // rows with no visible key
      {shape(2, 67, 33, 4, 4, 33), {true, 64}},
      {shape(2, 67, 33, 4, 4, 16), {true, -40}},
      {shape(1, 130, 130, 4, 1, 64), {true, 0}},  // several 64-row blocks, MQA
      {shape(2, 67, 130, 2, 1, 16), {false, 0}},
      {shape(2, 130, 67, 6, 3, 128), {true, 100}},  // the head dims of the 1.3B and larger models
      {shape(1, 200, 200, 2, 1, 128), {true, 0}},   // diagonal tiles of 128 queries by 32 keys
      {shape(1, 70, 70, 2, 2, 256), {true, 0}},
      // value head dim != query/key head dim (multi-latent attention: D = 128 + 64, Dv = 128)
      {shape(1, 70, 70, 2, 2, 24, 16), {true, 0}},
      {shape(2, 67, 33, 4, 2, 16, 40), {true, 64}},
      {shape(1, 20, 20, 2, 1, 40, 8), {true, -7}},
      {shape(2, 130, 67, 4, 4, 192, 128), {true, 100}},
      {shape(1, 67, 130, 2, 2, 100, 256), {false, 0}},
      {shape(2, 33, 33, 4, 2, 24), dropped({true, 0}, 0, 0, 4, 0, 0, 33)},
      {shape(1, 70, 70, 4, 1, 64), dropped({true, 0}, 3, 4, 8, 0, 0, 70)},  // MQA, TP rank 1
      // a context-parallel block: queries of chunk 3, keys of chunk 1 (offset 2 x 40)
      {shape(2, 40, 40, 6, 3, 32), dropped({true, 80}, 1, 0, 6, 120, 40, 160)},
      {shape(1, 40, 40, 2, 2, 16), dropped({true, 0}, 0, 2, 4, 40, 40, 80)},  // diagonal chunk
      {shape(1, 17, 40, 4, 2, 64), dropped({true, 23}, 0, 0, 4, 23, 0, 40)},
      {shape(2, 67, 130, 2, 1, 16), dropped({false, 0}, 5, 0, 2, 0, 0, 130)},
      {shape(1, 70, 70, 2, 2, 256), dropped({true, 0}, 0, 0, 2, 0, 0, 70)},
  };
  if (!small) {
    cases.push_back({shape(4, 1024, 1024, 12, 12, 64), {true, 0}});   // GPT-2 124M
    cases.push_back({shape(1, 2048, 2048, 16, 16, 128), {true, 0}});  // the 1.3B model
    cases.push_back({shape(1, 1024, 1024, 32, 8, 128), {true, 0}});   // Llama-style GQA
  }
  // Every case without dropout again with bf16 products (CUDA: the tensor-core kernels), to the
  // bf16 tolerance; not the one-key case, whose lse is its one score (the bf16 rounding's
  // relative error there has no bound: a score near 0).
  for (size_t n = cases.size(), i = 0; i < n; ++i) {
    if (cases[i].mask.dropout.p > 0 || cases[i].s.Sk == 1) continue;
    Case c = cases[i];
    c.s.bf16_products = true;
    cases.push_back(c);
  }
  // Every case with one sequence length and head dim again (with and without bf16 products) in
  // the fused QKV layout, as the QKV projection writes it.
  for (size_t n = cases.size(), i = 0; i < n; ++i) {
    if (cases[i].s.Sq != cases[i].s.Sk || cases[i].s.D != cases[i].s.Dv) continue;
    Case c = cases[i];
    c.s.fused_qkv = true;
    cases.push_back(c);
  }
  for (const Case& c : cases) {
    const AttnShape& s = c.s;
    const double tol = s.bf16_products ? kTolBf16 : kTolF32;
    const std::string name =
        str("B", s.B, " Sq", s.Sq, " Sk", s.Sk, " H", s.H, " G", s.G, " D", s.D,
            s.Dv != s.D ? str(" Dv", s.Dv) : std::string(),
            c.mask.causal ? str(" causal ", c.mask.offset) : std::string(" full"),
            c.mask.dropout.p > 0 ? str(" drop q0 ", c.mask.dropout.q0, " k0 ", c.mask.dropout.k0)
                                 : std::string(),
            s.bf16_products ? " bf16 products" : "", s.fused_qkv ? " fused QKV" : "");
    ck.run("attention", name, [&] {
      const int64_t nq = s.Sq * s.B * s.H * s.D, nk = s.Sk * s.B * s.G * s.D;
      const int64_t no = s.Sq * s.B * s.H * s.Dv;
      // q, k, v (dq, dk, dv) in one buffer: packed one after the other, or fused
      const QkvSpans sp = qkv_spans(s);
      const int64_t hpg = s.H / s.G, nqkv = sp.size, k_at = sp.k_at, v_at = sp.v_at;
      Pair<float> qkv(randn(nqkv)), out(poison(no)), lse(poison(s.B * s.H * s.Sq));
      const float *q = qkv.host(), *qd = qkv.dev();
      ref::attention_forward(out.host(), lse.host(), q, q + k_at, q + v_at, s, c.mask);
      attention_forward(g_dev, out.dev(), lse.dev(), qd, qd + k_at, qd + v_at, s, c.mask);
      ck.check("out", out, tol);
      ck.check("lse", lse, tol);
      // the device's backward from the reference's out and lse (the reference recomputes them)
      Pair<float> o2(out.host_result()), l2(lse.host_result()), dout(randn(no)), dqkv(randn(nqkv));
      float *dq = dqkv.host(), *dqd = dqkv.dev();
      const std::vector<float> dqkv0 = dqkv.host_result();
      ref::attention_backward(dq, dq + k_at, dq + v_at, dout.host(), q, q + k_at, q + v_at, s,
                              c.mask);
      attention_backward(g_dev, dqd, dqd + k_at, dqd + v_at, dout.dev(), qd, qd + k_at, qd + v_at,
                         o2.dev(), l2.dev(), s, c.mask);
      ck.check("dq, dk, dv (+=)", dqkv, tol);
      if ((s.bf16_products || c.mask.dropout.p > 0) && s.Sk > 1)
        check_bf16_ops(ck, c.s, c.mask, qkv.host_result(), dout.host_result());
      if (!s.fused_qkv) return;
      // The reference in the fused layout is the reference of the split tensors, bit for bit.
      AttnShape packed = s;
      packed.fused_qkv = false;
      const int64_t N = s.Sq * s.B;
      const auto len = [](int64_t n) { return static_cast<size_t>(n); };
      std::vector<float> p(len(nqkv)), po(len(no)), pl(len(s.B * s.H * s.Sq));
      std::vector<float> dp(len(nqkv)), merged(len(nqkv));
      ref::qkv_split(p.data(), p.data() + nq, p.data() + nq + nk, q, N, s.G, hpg, s.D);
      ref::qkv_split(dp.data(), dp.data() + nq, dp.data() + nq + nk, dqkv0.data(), N, s.G, hpg,
                     s.D);
      ref::attention_forward(po.data(), pl.data(), p.data(), p.data() + nq, p.data() + nq + nk,
                             packed, c.mask);
      ref::attention_backward(dp.data(), dp.data() + nq, dp.data() + nq + nk, dout.host(), p.data(),
                              p.data() + nq, p.data() + nq + nk, packed, c.mask);
      ref::qkv_merge_grad(merged.data(), dp.data(), dp.data() + nq, dp.data() + nq + nk, N, s.G,
                          hpg, s.D);
      ck.check("reference out: the packed layout's", o2.host_result(), po, 0.0);
      ck.check("reference dqkv: the packed layout's", dqkv.host_result(), merged, 0.0);
    });
  }
  // Merges of partial results (ring attention's blocks); lse of some rows -inf in one or both.
  for (const AttnShape& s : {shape(1, 1, 1, 1, 1, 8), shape(2, 33, 33, 4, 2, 24),
                             shape(2, 40, 40, 6, 3, 32, 16), shape(1, 70, 70, 2, 2, 256)}) {
    ck.run("attention_merge", str("B", s.B, " Sq", s.Sq, " H", s.H, " Dv", s.Dv), [&] {
      const int64_t no = s.Sq * s.B * s.H * s.Dv, nl = s.B * s.H * s.Sq;
      const float inf = std::numeric_limits<float>::infinity();
      std::vector<float> l1 = randn(nl, 3.0f), l2 = randn(nl, 3.0f);
      for (int64_t r = 0; r < nl; r += 3) (r % 2 ? l1 : l2)[size_t(r)] = -inf;
      for (int64_t r = 0; r < nl; r += 5) l1[size_t(r)] = l2[size_t(r)] = -inf;
      Pair<float> out(randn(no)), lse(l1), ob(randn(no)), lb(l2);
      ref::attention_merge(out.host(), lse.host(), ob.host(), lb.host(), s);
      attention_merge(g_dev, out.dev(), lse.dev(), ob.dev(), lb.dev(), s);
      ck.check("out", out, kTolF32);
      ck.check("lse", lse, kTolF32);
    });
  }
}

}  // namespace mtron::kernels::test
