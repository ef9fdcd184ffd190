// Context-parallel attention under mpirun: the world is the CP group. Every rank draws the same
// full q, k, v, dout; its two chunks (r and 2CP-1-r) go through context_attention_forward and
// backward with each --cp-comm-type (p2p, all_gather, a2a, and a2a+p2p over every split of the
// world into all-to-all groups and a ring), and its rows of out, dq, dk, dv (and, where its layout
// is the two chunks', lse) must equal full causal attention computed by the naive float64
// reference. a2a must also give the 1-process kernels' results bit for bit (it runs them on the
// whole sequence, per head). On inputs that hold bf16 values, the bf16 exchanges (bf16_values)
// must give the fp32 exchanges' results bit for bit in half the forward's bytes, and a2a over bf16
// tensors in QKV's fused layout the 1-process bf16 ops' results. Chunk lengths 1
// (sequence 2*CP), 2 and odd ones; GQA and MHA; batch 1 and 2. At one rank (CP = 1) the same code
// is plain causal attention: sequences 1, 2, 3.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "mpi_test_main.h"
#include "mtron/kernels/attention.h"
#include "mtron/kernels/ref/ref_ops.h"
#include "mtron/kernels/rope.h"
#include "mtron/parallel/context_parallel.h"

namespace mtron::parallel {
namespace {

std::vector<float> randn(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(size_t(n), 0.0f);
  for (auto& x : v) x = d(rng);
  return v;
}

void expect_close(const std::vector<float>& got,
                  const std::vector<double>& ref,
                  double atol,
                  double rtol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::abs(got[i] - ref[i]) <= atol + rtol * std::abs(ref[i])) continue;
    if (++bad <= 5)
      ADD_FAILURE() << what << ": index " << i << " got " << got[i] << " want " << ref[i];
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " differ";
}

// Rows of the full [S, B, X] tensor that this rank holds, in local order.
template <typename T>
std::vector<T> local_rows(
    const std::vector<T>& full, const ContextParallel& cp, int64_t S_local, int64_t B, int64_t X) {
  std::vector<T> out;
  for (int64_t s = 0; s < S_local; ++s) {
    const int64_t g = cp.position(s, S_local);
    out.insert(out.end(), full.begin() + g * B * X, full.begin() + (g + 1) * B * X);
  }
  return out;
}

std::vector<bf16> narrow(const std::vector<float>& x) {
  std::vector<bf16> y;
  for (float f : x) y.push_back(float_to_bf16(f));
  return y;
}
std::vector<float> wide(const std::vector<bf16>& x) {
  std::vector<float> y;
  for (bf16 v : x) y.push_back(bf16_to_float(v));
  return y;
}
std::vector<uint16_t> bits(const std::vector<bf16>& x) {
  std::vector<uint16_t> b;
  for (bf16 v : x) b.push_back(v.bits);
  return b;
}

std::vector<float> rounded(std::vector<float> x) {
  for (float& f : x) f = bf16_to_float(float_to_bf16(f));
  return x;
}

// Inputs that hold bf16 values (q, k, v, dout rounded) with bf16_values: what moves as bf16
// moves exactly, so out (rounded: a2a's exchange rounds it), lse, dq, dk and dv are the fp32
// exchanges' bit for bit; and the forward sends half the bytes.
void check_bf16_values(const ContextParallel& cp,
                       const std::vector<float>& q,
                       const std::vector<float>& k,
                       const std::vector<float>& v,
                       const std::vector<float>& dout,
                       const kernels::AttnShape& s,
                       const std::string& what) {
  const auto qb = rounded(q), kb = rounded(k), vb = rounded(v), doutb = rounded(dout);
  struct Result {
    std::vector<float> out, lse, dq, dk, dv;
    int64_t forward_bytes = 0;
  };
  auto run = [&](bool narrow) {
    Result r{std::vector<float>(dout.size()), std::vector<float>(size_t(s.B * s.H * s.Sq)),
             std::vector<float>(q.size(), 0.0f), std::vector<float>(k.size(), 0.0f),
             std::vector<float>(v.size(), 0.0f)};
    Arena scratch;
    const int64_t before = cp.size > 1 ? cp.comm->bytes_sent() : 0;
    context_attention_forward(kernels::Ctx{}, cp, 0, scratch, r.out.data(), r.lse.data(), qb.data(),
                              kb.data(), vb.data(), s, {}, narrow);
    if (cp.size > 1) r.forward_bytes = cp.comm->bytes_sent() - before;
    r.out = rounded(r.out);  // as the caller does
    context_attention_backward(kernels::Ctx{}, cp, 0, scratch, r.dq.data(), r.dk.data(),
                               r.dv.data(), doutb.data(), qb.data(), kb.data(), vb.data(),
                               r.out.data(), r.lse.data(), s, {}, narrow);
    return r;
  };
  const Result f = run(false), b = run(true);
  EXPECT_EQ(b.out, f.out) << "bf16 values: out " << what;
  EXPECT_EQ(b.lse, f.lse) << "bf16 values: lse " << what;
  EXPECT_EQ(b.dq, f.dq) << "bf16 values: dq " << what;
  EXPECT_EQ(b.dk, f.dk) << "bf16 values: dk " << what;
  EXPECT_EQ(b.dv, f.dv) << "bf16 values: dv " << what;
  EXPECT_EQ(2 * b.forward_bytes, f.forward_bytes) << "bf16 values: forward bytes " << what;
}

void run_case(const ContextParallel& cp,
              int64_t S,
              int64_t B,
              int64_t H,
              int64_t G,
              int64_t D,
              int64_t Dv,
              uint64_t seed) {
  const CpCommType type = cp.type(0);
  const std::string what = std::string(cp_comm_name(type)) + " S " + std::to_string(S) + " B " +
                           std::to_string(B) + " H " + std::to_string(H) + " G " +
                           std::to_string(G) + " CP " + std::to_string(cp.size) + " D " +
                           std::to_string(D) + " Dv " + std::to_string(Dv);
  const float scale = 1.0f / std::sqrt(float(D));
  const auto q = randn(S * B * H * D, seed), k = randn(S * B * G * D, seed + 1),
             v = randn(S * B * G * Dv, seed + 2), dout = randn(S * B * H * Dv, seed + 3);
  auto dbl = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
  const auto qd = dbl(q), kd = dbl(k), vd = dbl(v), doutd = dbl(dout);
  const kernels::AttnShape full{B, S, S, H, G, D, Dv, scale};
  std::vector<double> out_r(dout.size()), lse_r(size_t(B * H * S)), dq_r(q.size(), 0.0),
      dk_r(k.size(), 0.0), dv_r(v.size(), 0.0);
  kernels::ref::attention_forward(out_r.data(), lse_r.data(), qd.data(), kd.data(), vd.data(), full,
                                  kernels::AttnMask{});
  kernels::ref::attention_backward(dq_r.data(), dk_r.data(), dv_r.data(), doutd.data(), qd.data(),
                                   kd.data(), vd.data(), full, kernels::AttnMask{});

  const int64_t Sl = S / cp.size;
  const auto ql = local_rows(q, cp, Sl, B, H * D), kl = local_rows(k, cp, Sl, B, G * D),
             vl = local_rows(v, cp, Sl, B, G * Dv), doutl = local_rows(dout, cp, Sl, B, H * Dv);
  const kernels::AttnShape local{B, Sl, Sl, H, G, D, Dv, scale};
  std::vector<float> out(doutl.size()), lse(size_t(B * H * Sl)), dq(ql.size(), 0.0f),
      dk(kl.size(), 0.0f), dv(vl.size(), 0.0f);
  Arena scratch;
  context_attention_forward(kernels::Ctx{}, cp, 0, scratch, out.data(), lse.data(), ql.data(),
                            kl.data(), vl.data(), local);
  context_attention_backward(kernels::Ctx{}, cp, 0, scratch, dq.data(), dk.data(), dv.data(),
                             doutl.data(), ql.data(), kl.data(), vl.data(), out.data(), lse.data(),
                             local);
  if (type == CpCommType::kA2A) {
    // the 1-process kernels on the whole sequence: the same bits
    std::vector<float> out1(dout.size()), lse1(size_t(B * H * S)), dq1(q.size(), 0.0f),
        dk1(k.size(), 0.0f), dv1(v.size(), 0.0f);
    kernels::attention_forward(kernels::Ctx{}, out1.data(), lse1.data(), q.data(), k.data(),
                               v.data(), full, kernels::AttnMask{});
    kernels::attention_backward(kernels::Ctx{}, dq1.data(), dk1.data(), dv1.data(), dout.data(),
                                q.data(), k.data(), v.data(), out1.data(), lse1.data(), full,
                                kernels::AttnMask{});
    EXPECT_EQ(out, local_rows(out1, cp, Sl, B, H * Dv)) << "out " << what;
    EXPECT_EQ(dq, local_rows(dq1, cp, Sl, B, H * D)) << "dq " << what;
    EXPECT_EQ(dk, local_rows(dk1, cp, Sl, B, G * D)) << "dk " << what;
    EXPECT_EQ(dv, local_rows(dv1, cp, Sl, B, G * Dv)) << "dv " << what;
  }

  check_bf16_values(cp, ql, kl, vl, doutl, local, what);

  // lse: [B, H, S] globally; locally one [B, H, c] block per chunk (or [B, H, S] at CP 1).
  std::vector<double> lse_want;
  const int64_t halves = cp.size == 1 ? 1 : 2, c = Sl / halves;
  for (int64_t a = 0; a < halves; ++a)
    for (int64_t bh = 0; bh < B * H; ++bh)
      for (int64_t s = 0; s < c; ++s)
        lse_want.push_back(lse_r[size_t(bh * S + cp.position(a * c + s, Sl))]);
  const double atol = 2e-5 * std::sqrt(double(S));
  expect_close(out, local_rows(out_r, cp, Sl, B, H * Dv), 2e-5, 1e-4, "out " + what);
  // (a2a and a2a+p2p keep lse in the head-sharded layout their backward reads)
  if (type == CpCommType::kP2P || type == CpCommType::kAllGather)
    expect_close(lse, lse_want, 1e-5, 1e-5, "lse " + what);
  expect_close(dq, local_rows(dq_r, cp, Sl, B, H * D), atol, 1e-4, "dq " + what);
  expect_close(dk, local_rows(dk_r, cp, Sl, B, G * D), atol, 1e-4, "dk " + what);
  expect_close(dv, local_rows(dv_r, cp, Sl, B, G * Dv), atol, 1e-4, "dv " + what);
}

// Chunk lengths, batches and heads (H, G) for one communication type; the all-to-all splits the
// heads over a ranks.
void run_cases(const ContextParallel& cp, int64_t a, uint64_t seed) {
  const std::vector<int64_t> chunk_lens = {1, 2, 3, 7, 13};
  std::vector<std::pair<int64_t, int64_t>> heads = {{4, 2}, {2, 2}, {3, 1}};
  if (a > 1) heads = {{2 * a, a}, {a, a}};
  for (int64_t c : chunk_lens) {
    for (int64_t B : {1, 2}) {
      for (auto [H, G] : heads) {
        const int64_t S = cp.size == 1 ? c : 2 * cp.size * c;
        const int64_t D = c == 13 ? 64 : 16;
        run_case(cp, S, B, H, G, D, D, seed++);
        // multi-latent attention's value head dim differs from the query/key head dim
        if (B == 1) run_case(cp, S, B, H, G, D + 8, D / 2, seed++);
      }
    }
  }
}

ContextParallel world_cp(CpCommType t) {
  Comm& world = mpi_test_launch().world();
  ContextParallel cp(&world, world.rank(), world.size());
  cp.types = {t};
  return cp;
}

TEST(ContextAttention, RingEqualsFullCausalAttention) {
  run_cases(world_cp(CpCommType::kP2P), 1, 100);
}

TEST(ContextAttention, AllGatherEqualsFullCausalAttention) {
  run_cases(world_cp(CpCommType::kAllGather), 1, 200);
}

TEST(ContextAttention, AllToAllEqualsTheOneProcessKernels) {
  const ContextParallel cp = world_cp(CpCommType::kA2A);
  run_cases(cp, cp.size, 300);
}

// Calls f(cp, a) with a2a+p2p over every split of the world into all-to-all groups of a
// adjacent ranks and a ring of CP/a.
template <typename F>
void for_each_split(F f) {
  ContextParallel cp = world_cp(CpCommType::kA2AP2P);
  for (int a = 1; a <= cp.size; ++a) {
    if (cp.size % a != 0) continue;
    const int r = int(cp.rank);
    const auto level0 = cp.comm->split(r / a, r % a), level1 = cp.comm->split(r % a, r / a);
    cp.a2a_level = level0.get();
    cp.ring_level = level1.get();
    f(cp, int64_t(a));
  }
}

TEST(ContextAttention, HierarchicalEqualsFullCausalAttention) {
  if (world_cp(CpCommType::kA2AP2P).size == 1) GTEST_SKIP() << "a2a+p2p needs CP > 1";
  for_each_split(
      [](const ContextParallel& cp, int64_t a) { run_cases(cp, a, 400 + 100 * uint64_t(a)); });
}

// a2a over bf16 tensors in QKV's fused layout (fused_attention_forward/backward): out and dqkv
// are the 1-process bf16 ops' on the whole sequence, bit for bit; each pass sends
// (CP-1)/CP of this rank's qkv and output, in bf16. At CP 1 the same calls are those ops.
TEST(ContextAttention, FusedAllToAllEqualsTheOneProcessBf16Ops) {
  const ContextParallel cp = world_cp(CpCommType::kA2A);
  const int64_t a = cp.size;
  uint64_t seed = 700;
  for (int64_t c : {1, 3, 8}) {
    for (int64_t B : {1, 2}) {
      for (auto [H, G] : std::vector<std::pair<int64_t, int64_t>>{{2 * a, a}, {a, a}}) {
        const int64_t D = c == 8 ? 64 : 16, S = cp.size == 1 ? c : 2 * cp.size * c;
        const int64_t row = G * (H / G + 2) * D;
        const std::string what = "S " + std::to_string(S) + " B " + std::to_string(B) + " H " +
                                 std::to_string(H) + " G " + std::to_string(G);
        const auto qkv = narrow(randn(S * B * row, seed++));
        const auto dout = narrow(randn(S * B * H * D, seed++));
        kernels::AttnShape full{B, S, S, H, G, D, D, 1.0f / std::sqrt(float(D)), true, true};
        std::vector<bf16> out1(dout.size()), dqkv1(qkv.size());
        std::vector<float> lse1(size_t(B * H * S));
        const auto v1 = kernels::fused_qkv_views(qkv.data(), H, G, D);
        const auto d1 = kernels::fused_qkv_views(dqkv1.data(), H, G, D);
        kernels::attention_forward(kernels::Ctx{}, out1.data(), lse1.data(), v1.q, v1.k, v1.v, full,
                                   kernels::AttnMask{});
        kernels::attention_backward(kernels::Ctx{}, d1.q, d1.k, d1.v, dout.data(), v1.q, v1.k, v1.v,
                                    out1.data(), lse1.data(), full, kernels::AttnMask{});

        const int64_t Sl = S / cp.size;
        const auto qkvl = local_rows(qkv, cp, Sl, B, row),
                   doutl = local_rows(dout, cp, Sl, B, H * D);
        kernels::AttnShape local = full;
        local.Sq = local.Sk = Sl;
        std::vector<bf16> out(doutl.size()), dqkv(qkvl.size());
        std::vector<float> lse(size_t(B * H * Sl));
        Arena keep, scratch;
        const int64_t before = cp.size > 1 ? cp.comm->bytes_sent() : 0;
        const FusedHeads heads = fused_attention_forward(
            kernels::Ctx{}, cp, 0, keep, scratch, out.data(), lse.data(), qkvl.data(), local);
        const int64_t forward_bytes = cp.size > 1 ? cp.comm->bytes_sent() - before : 0;
        fused_attention_backward(kernels::Ctx{}, cp, 0, scratch, dqkv.data(), doutl.data(), heads,
                                 lse.data(), local);
        const int64_t backward_bytes =
            cp.size > 1 ? cp.comm->bytes_sent() - before - forward_bytes : 0;
        EXPECT_EQ(bits(out), bits(local_rows(out1, cp, Sl, B, H * D))) << "out " << what;
        EXPECT_EQ(bits(dqkv), bits(local_rows(dqkv1, cp, Sl, B, row))) << "dqkv " << what;
        const int64_t want = (a - 1) * int64_t(sizeof(bf16)) * (Sl * B * (row + H * D)) / a;
        EXPECT_EQ(forward_bytes, want) << "forward bytes " << what;
        EXPECT_EQ(backward_bytes, want) << "backward bytes " << what;
      }
    }
  }
}

// a2a+p2p over bf16 tensors in QKV's fused layout, over every split of the world: the all-to-all
// of the fused rows, the ring on the widened values, the output and the gradients rounded once:
// bit for bit what the generic path (context_attention_*, bf16 exchanges) gives on the same
// values once the caller has rounded them into QKV's layout.
TEST(ContextAttention, FusedHierarchicalEqualsTheGenericPath) {
  if (world_cp(CpCommType::kA2AP2P).size == 1) GTEST_SKIP() << "a2a+p2p needs CP > 1";
  uint64_t seed = 900;
  for_each_split([&](const ContextParallel& cp, int64_t a) {
    for (int64_t c : {1, 3}) {
      const int64_t H = 2 * a, G = a, D = 16, B = 2, Sl = 2 * c, hpg = H / G;
      const int64_t row = G * (hpg + 2) * D, N = Sl * B;
      const std::string what = "a " + std::to_string(a) + " c " + std::to_string(c);
      const auto qkv = narrow(randn(N * row, seed++));
      const auto dout = narrow(randn(N * H * D, seed++));
      kernels::AttnShape fused{B, Sl, Sl, H, G, D, D, 1.0f / std::sqrt(float(D)), true, true};
      std::vector<bf16> out(size_t(N * H * D)), dqkv(qkv.size());
      std::vector<float> lse(size_t(B * H * Sl));
      Arena keep, scratch;
      const FusedHeads heads = fused_attention_forward(kernels::Ctx{}, cp, 0, keep, scratch,
                                                       out.data(), lse.data(), qkv.data(), fused);
      fused_attention_backward(kernels::Ctx{}, cp, 0, scratch, dqkv.data(), dout.data(), heads,
                               lse.data(), fused);

      const auto qkvw = wide(qkv);
      std::vector<float> q(size_t(N * H * D)), k(size_t(N * G * D)), v(k.size());
      kernels::qkv_split(kernels::Ctx{}, q.data(), k.data(), v.data(), qkvw.data(), N, G, hpg, D);
      kernels::AttnShape packed = fused;
      packed.fused_qkv = false;
      std::vector<float> o(q.size()), l(lse.size()), dq(q.size(), 0.0f), dk(k.size(), 0.0f),
          dv(v.size(), 0.0f);
      context_attention_forward(kernels::Ctx{}, cp, 0, scratch, o.data(), l.data(), q.data(),
                                k.data(), v.data(), packed, {}, true);
      const auto o16 = narrow(o);
      const auto ow = wide(o16);
      context_attention_backward(kernels::Ctx{}, cp, 0, scratch, dq.data(), dk.data(), dv.data(),
                                 wide(dout).data(), q.data(), k.data(), v.data(), ow.data(),
                                 l.data(), packed, {}, true);
      std::vector<bf16> dqkv_generic(qkv.size());
      kernels::qkv_merge_grad(kernels::Ctx{}, dqkv_generic.data(), dq.data(), dk.data(), dv.data(),
                              N, G, hpg, D);
      EXPECT_EQ(bits(out), bits(o16)) << "out " << what;
      EXPECT_EQ(lse, l) << "lse " << what;
      EXPECT_EQ(bits(dqkv), bits(dqkv_generic)) << "dqkv " << what;
    }
  });
}

// Position map of the load-balanced split: every global position exactly once over the ranks.
TEST(ContextAttention, ChunkPositionsCoverTheSequence) {
  for (int64_t size : {1, 2, 3, 4}) {
    const int64_t c = 3, S = 2 * size * c;
    std::vector<int> seen(size_t(S), 0);
    for (int64_t r = 0; r < size; ++r) {
      const ContextParallel cp{nullptr, r, size};
      for (int64_t s = 0; s < S / size; ++s) ++seen[size_t(cp.position(s, S / size))];
    }
    for (int64_t g = 0; g < S; ++g) EXPECT_EQ(seen[size_t(g)], 1) << "CP " << size << " pos " << g;
  }
  const ContextParallel r1{nullptr, 1, 4};  // chunks 1 and 6 of 8, c = 2
  EXPECT_EQ(r1.position(0, 4), 2);
  EXPECT_EQ(r1.position(1, 4), 3);
  EXPECT_EQ(r1.position(2, 4), 12);
  EXPECT_EQ(r1.position(3, 4), 13);
}

}  // namespace
}  // namespace mtron::parallel
