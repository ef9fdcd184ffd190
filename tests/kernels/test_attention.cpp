// Flash attention on the CPU against the naive reference (forward out/lse, backward with +=),
// over awkward sequence lengths, GQA ratios, head dims (also a value head dim other than the
// query/key one), causal/non-causal and offsets; fully
// masked rows; attention dropout (kernel against reference, the mask's rate and its global
// indexing); the merge of partial results against the attention over all keys; and the reference
// backward against float64 finite differences.
#include <omp.h>

#include <cmath>
#include <limits>

#include "kernel_test_util.h"
#include "mtron/kernels/attention.h"
#include "mtron/kernels/ref/ref_ops.h"

namespace mtron::kernels::test {
namespace {

void run_case(const AttnShape& s, AttnMask mask, uint64_t seed) {
  const int64_t nq = s.Sq * s.B * s.H * s.D, nk = s.Sk * s.B * s.G * s.D;
  const int64_t no = s.Sq * s.B * s.H * s.Dv, nv = s.Sk * s.B * s.G * s.Dv;
  auto q = randn(nq, seed), k = randn(nk, seed + 1), v = randn(nv, seed + 2);
  auto dout = randn(no, seed + 3);
  std::vector<float> out(static_cast<size_t>(no)), lse(size_t(s.B * s.H * s.Sq)), outr = out,
                                                                                  lser = lse;
  attention_forward(kCpu, out.data(), lse.data(), q.data(), k.data(), v.data(), s, mask);
  ref::attention_forward(outr.data(), lser.data(), q.data(), k.data(), v.data(), s, mask);
  const std::string what =
      str("B", s.B, " Sq", s.Sq, " Sk", s.Sk, " H", s.H, " G", s.G, " D", s.D, " Dv", s.Dv,
          mask.causal ? str(" causal offset ", mask.offset) : std::string(" full"));
  expect_close(out, outr, 2e-5, 1e-4, str("attention out ", what));
  expect_close(lse, lser, 1e-5, 1e-5, str("attention lse ", what));
  // backward accumulates: start from non-zero gradients
  auto dq = randn(nq, seed + 4), dk = randn(nk, seed + 5), dv = randn(nv, seed + 6);
  auto dqr = dq, dkr = dk, dvr = dv;
  attention_backward(kCpu, dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                     v.data(), out.data(), lse.data(), s, mask);
  ref::attention_backward(dqr.data(), dkr.data(), dvr.data(), dout.data(), q.data(), k.data(),
                          v.data(), s, mask);
  const double atol = 2e-5 * std::sqrt(double(std::max(s.Sq, s.Sk)));
  expect_close(dq, dqr, atol, 1e-4, str("attention dq ", what));
  expect_close(dk, dkr, atol, 1e-4, str("attention dk ", what));
  expect_close(dv, dvr, atol, 1e-4, str("attention dv ", what));
}

TEST(Attention, MatchesReferenceOverShapes) {
  const int64_t lens[] = {1, 31, 32, 33, 67, 130};
  uint64_t seed = 1;
  for (int64_t Sq : lens)
    for (int64_t Sk : lens)
      for (auto [H, G] : {std::pair<int64_t, int64_t>{1, 1}, {2, 1}, {4, 1}, {4, 2}})
        for (int64_t D : {16, 64}) {
          if ((D == 64) != ((Sq + Sk + H) % 2 == 0)) continue;  // half the sweep at each D
          const AttnShape s{1 + int64_t(seed % 2), Sq, Sk, H, G, D, D, 1.0f / std::sqrt(float(D))};
          run_case(s, {false, 0}, seed++);
          run_case(s, {true, 0}, seed++);
          run_case(s, {true, Sk - Sq}, seed++);  // queries at the end of the keys (decode, CP)
        }
}

TEST(Attention, OffsetsAndFullyMaskedRows) {
  uint64_t seed = 100;
  for (int64_t offset : {-40, -5, 3, 64, 200})
    for (int64_t D : {16, 33}) {
      const AttnShape s{2, 67, 33, 4, 4, D, D, 0.3f};
      run_case(s, {true, offset}, seed++);
    }
  // offset -5: rows 0..4 see no key: out 0, lse -inf, no gradient
  const AttnShape s{1, 8, 8, 1, 1, 16, 16, 0.25f};
  auto q = randn(8 * 16, 1), k = randn(8 * 16, 2), v = randn(8 * 16, 3);
  std::vector<float> out(8 * 16, 1.0f), lse(8);
  attention_forward(kCpu, out.data(), lse.data(), q.data(), k.data(), v.data(), s, {true, -5});
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(lse[size_t(i)], -std::numeric_limits<float>::infinity());
    for (int d = 0; d < 16; ++d) EXPECT_EQ(out[size_t(i * 16 + d)], 0.0f);
  }
  EXPECT_TRUE(std::isfinite(lse[5]));
  std::vector<float> dq(8 * 16, 0.0f), dk(8 * 16, 0.0f), dv(8 * 16, 0.0f);
  auto dout = randn(8 * 16, 4);
  attention_backward(kCpu, dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                     v.data(), out.data(), lse.data(), s, {true, -5});
  for (int i = 0; i < 5 * 16; ++i) EXPECT_EQ(dq[size_t(i)], 0.0f);
  for (float x : dq) EXPECT_TRUE(std::isfinite(x));
}

TEST(Attention, FewGroupsSplitTheBackwardOverHeads) {
  // B * G = 1 < threads: the backward runs one task per head with per-thread dK/dV copies.
  const int saved = omp_get_max_threads();
  omp_set_num_threads(std::max(2, saved));
  run_case({1, 200, 200, 4, 1, 64, 64, 0.125f}, {true, 0}, 7);
  run_case({1, 150, 180, 6, 2, 32, 32, 0.2f}, {true, 30}, 8);
  run_case({1, 150, 180, 6, 2, 48, 24, 0.2f}, {true, 30}, 9);
  omp_set_num_threads(saved);
}

// The reference backward against float64 finite differences of the reference forward.
void expect_reference_backward_fd(AttnMask mask, const std::string& what, int64_t Dv = 3) {
  const AttnShape s{2, 5, 7, 4, 2, 3, Dv, 0.6f};
  const int64_t nq = s.Sq * s.B * s.H * s.D, nk = s.Sk * s.B * s.G * s.D;
  const int64_t no = s.Sq * s.B * s.H * s.Dv, nv = s.Sk * s.B * s.G * s.Dv;
  auto q = to_double(randn(nq, 1)), k = to_double(randn(nk, 2)), v = to_double(randn(nv, 3));
  auto R = to_double(randn(no, 4));
  std::vector<double> dq(size_t(nq), 0.0), dk(size_t(nk), 0.0), dv(size_t(nv), 0.0);
  ref::attention_backward(dq.data(), dk.data(), dv.data(), R.data(), q.data(), k.data(), v.data(),
                          s, mask);
  auto loss = [&] {
    std::vector<double> out(static_cast<size_t>(no)), lse(size_t(s.B * s.H * s.Sq));
    ref::attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), s, mask);
    return project(out, R);
  };
  expect_fd(q, dq, loss, "attention q" + what);
  expect_fd(k, dk, loss, "attention k" + what);
  expect_fd(v, dv, loss, "attention v" + what);
}

TEST(Attention, ReferenceBackwardMatchesFiniteDifferences) {
  for (AttnMask mask : {AttnMask{false, 0}, AttnMask{true, 0}, AttnMask{true, 2}}) {
    expect_reference_backward_fd(mask, "");
    expect_reference_backward_fd(mask, " (Dv 5)", 5);
    expect_reference_backward_fd(mask, " (Dv 2)", 2);
  }
}

// Dropout of probability p on a (b, h) block that stands at global sample 3, head 1 of 6,
// query and key offsets q0, k0 of a sequence of S.
AttnMask with_dropout(AttnMask m, float p, int64_t S, int64_t q0 = 0, int64_t k0 = 0) {
  m.dropout = AttnDropout{
      .p = p, .key = rng_key(7, "test"), .b0 = 3, .h0 = 1, .H = 6, .q0 = q0, .k0 = k0, .S = S};
  return m;
}

TEST(Attention, DropoutMatchesReference) {
  uint64_t seed = 300;
  for (float p : {0.1f, 0.5f})
    for (int64_t S : {33, 130})
      for (auto [H, G] : {std::pair<int64_t, int64_t>{4, 2}, {2, 1}}) {
        const AttnShape s{2, S, S, H, G, 16, 16, 0.25f};
        run_case(s, with_dropout({true, 0}, p, S), seed++);
        run_case(s, with_dropout({false, 0}, p, S), seed++);
      }
  // a query chunk attending to an earlier key chunk (as ring attention calls it)
  run_case({2, 40, 40, 4, 2, 16, 16, 0.25f}, with_dropout({false, 0}, 0.2f, 160, 80, 40), 400);
  run_case({1, 70, 70, 4, 4, 32, 32, 0.2f}, with_dropout({true, 0}, 0.3f, 140, 70, 70), 401);
}

TEST(Attention, DropoutDropsAtTheRateAndByGlobalIndex) {
  const AttnShape s{2, 64, 64, 4, 4, 16, 16, 0.25f};
  const int64_t nq = s.Sq * s.B * s.H * s.D;
  auto q = randn(nq, 1), k = randn(nq, 2), v = randn(nq, 3);
  std::vector<float> out(static_cast<size_t>(nq)), lse(size_t(s.B * s.H * s.Sq)), out0 = out,
                                                                                  lse0 = lse;
  attention_forward(kCpu, out0.data(), lse0.data(), q.data(), k.data(), v.data(), s, {false, 0});
  attention_forward(kCpu, out.data(), lse.data(), q.data(), k.data(), v.data(), s,
                    with_dropout({false, 0}, 0.25f, 64));
  EXPECT_EQ(lse, lse0);  // the softmax statistics are the undropped ones
  EXPECT_NE(out, out0);
  // the multipliers: a quarter dropped, the rest 1/(1-p)
  std::vector<float> z(100000);
  dropout_scales(z.data(), rng_key(7, "test"), 12345, 1, int64_t(z.size()), 0.25f);
  int64_t dropped = 0;
  for (float x : z) {
    EXPECT_TRUE(x == 0.0f || x == 1.0f / 0.75f);
    dropped += x == 0.0f;
  }
  EXPECT_NEAR(double(dropped) / double(z.size()), 0.25, 0.01);
  // element e at stride 3 is element e of the stream
  std::vector<float> z3(1000);
  dropout_scales(z3.data(), rng_key(7, "test"), 12345, 3, 1000, 0.25f);
  for (size_t i = 0; i < z3.size(); ++i) EXPECT_EQ(z3[i], z[3 * i]);
}

TEST(Attention, ReferenceBackwardWithDropoutMatchesFiniteDifferences) {
  for (AttnMask mask : {AttnMask{false, 0}, AttnMask{true, 0}})
    expect_reference_backward_fd(with_dropout(mask, 0.3f, 12, 5, 2), " (dropout)");
}

TEST(Attention, ValueHeadDimDiffersFromQueryKeyHeadDim) {
  // multi-latent attention: D = qk_head_dim + qk_pos_emb_head_dim, Dv = v_head_dim
  uint64_t seed = 500;
  for (auto [D, Dv] : {std::pair<int64_t, int64_t>{24, 16}, {16, 40}, {192, 128}, {5, 3}})
    for (auto [H, G] : {std::pair<int64_t, int64_t>{4, 4}, {4, 2}}) {
      const AttnShape s{2, 67, 67, H, G, D, Dv, 1.0f / std::sqrt(float(D))};
      run_case(s, {true, 0}, seed++);
      run_case(s, {false, 0}, seed++);
      run_case(s, with_dropout({true, 0}, 0.2f, 67), seed++);
    }
}

// out and lse of q against the keys [0, Sk) of k, v, computed as the merge of the results
// against [0, split) and [split, Sk) (the second with the causal offset and the dropout's key
// offset moved by split). fwd(out, lse, q, k, v, s, mask) and merge(out, lse, ob, lb, s) are the
// backend's ops.
template <typename T, typename Fwd, typename Merge>
void forward_by_halves(std::vector<T>& out,
                       std::vector<T>& lse,
                       const std::vector<T>& q,
                       const std::vector<T>& k,
                       const std::vector<T>& v,
                       const AttnShape& s,
                       const AttnMask& mask,
                       int64_t split,
                       Fwd fwd,
                       Merge merge) {
  AttnShape s1 = s, s2 = s;
  s1.Sk = split;
  s2.Sk = s.Sk - split;
  AttnMask m2 = mask;
  m2.offset -= split;
  m2.dropout.k0 += split;
  std::vector<T> ob(out.size()), lb(lse.size());
  fwd(out.data(), lse.data(), q.data(), k.data(), v.data(), s1, mask);
  fwd(ob.data(), lb.data(), q.data(), k.data() + split * s.B * s.G * s.D,
      v.data() + split * s.B * s.G * s.Dv, s2, m2);
  merge(out.data(), lse.data(), ob.data(), lb.data(), s);
}

// Merging the results against two halves of the keys is attention against all of them: the
// CPU kernel (fp32 rounding) and the reference in double (to 1e-12); rows that see no key of the
// second half (causal offsets) or of either (offset -3: rows 0-2 keep out 0, lse -inf), dropout.
TEST(Attention, MergeOfKeyHalvesIsAttentionOverAllKeys) {
  const AttnShape s{2, 20, 30, 4, 2, 16, 8, 0.25f};
  const int64_t nq = s.Sq * s.B * s.H * s.D, nk = s.Sk * s.B * s.G * s.D;
  const int64_t no = s.Sq * s.B * s.H * s.Dv, nv = s.Sk * s.B * s.G * s.Dv, nl = s.B * s.H * s.Sq;
  const auto q = randn(nq, 1), k = randn(nk, 2), v = randn(nv, 3);
  const auto cpu_fwd = [](auto... a) { attention_forward(kCpu, a...); };
  const auto cpu_merge = [](auto... a) { attention_merge(kCpu, a...); };
  const auto ref_fwd = [](auto... a) { ref::attention_forward<double>(a...); };
  const auto ref_merge = [](auto... a) { ref::attention_merge<double>(a...); };
  for (AttnMask mask : {AttnMask{false, 0}, AttnMask{true, 10}, AttnMask{true, -3},
                        with_dropout({true, 10}, 0.2f, 30, 0, 0)})
    for (int64_t split : {12, 1, 29}) {
      const std::string what = str("split ", split, mask.causal ? " causal " : " full ",
                                   mask.offset, mask.dropout.p > 0 ? " dropout" : "");
      std::vector<float> out(static_cast<size_t>(no)), lse(static_cast<size_t>(nl)), want = out,
                                                                                     want_lse = lse;
      attention_forward(kCpu, want.data(), want_lse.data(), q.data(), k.data(), v.data(), s, mask);
      forward_by_halves(out, lse, q, k, v, s, mask, split, cpu_fwd, cpu_merge);
      expect_close(out, want, 1e-5, 1e-5, "merged out " + what);
      expect_close(lse, want_lse, 1e-5, 1e-5, "merged lse " + what);
      const auto qd = to_double(q), kd = to_double(k), vd = to_double(v);
      std::vector<double> outd(static_cast<size_t>(no)), lsed(static_cast<size_t>(nl)),
          wantd = outd, want_lsed = lsed;
      ref::attention_forward(wantd.data(), want_lsed.data(), qd.data(), kd.data(), vd.data(), s,
                             mask);
      forward_by_halves(outd, lsed, qd, kd, vd, s, mask, split, ref_fwd, ref_merge);
      for (size_t i = 0; i < outd.size(); ++i)
        ASSERT_NEAR(outd[i], wantd[i], 1e-12) << "reference merged out " << what << " at " << i;
      for (size_t i = 0; i < lsed.size(); ++i) {
        if (std::isinf(want_lsed[i])) {
          ASSERT_EQ(lsed[i], want_lsed[i]) << "reference merged lse " << what << " at " << i;
        } else {
          ASSERT_NEAR(lsed[i], want_lsed[i], 1e-12)
              << "reference merged lse " << what << " at " << i;
        }
      }
    }
}

TEST(Attention, GroupsMustDivideHeads) {
  std::vector<float> x(64);
  const AttnShape s{1, 1, 1, 3, 2, 16, 16, 1.0f};
  EXPECT_THROW(attention_forward(kCpu, x.data(), x.data(), x.data(), x.data(), x.data(), s, {}),
               Error);
}

}  // namespace
}  // namespace mtron::kernels::test
