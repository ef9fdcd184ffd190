// The optimizer around the AdamW kernel: the gradient norm over the ranges it counts, clipping
// by it, skipping a step whose norm is not finite, and the ranges without weight decay; and the
// parameter registry's weight-decay flags (none on biases and norm weights, as Megatron).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "mtron/comm/single.h"
#include "mtron/model/gpt.h"
#include "mtron/optim/optimizer.h"
#include "mtron/parallel/parallel_state.h"
#include "mtron/train/ddp.h"
#include "test_helpers.h"

namespace mtron::optim {
namespace {

// Two ranges over 8 elements: [0, 5) decayed, [5, 8) not decayed and not counted in the norm.
struct Fixture {
  std::vector<float> master = {0.5f, -1.0f, 2.0f, 0.25f, -0.75f, 1.5f, -2.0f, 0.1f};
  std::vector<float> grad = {3.0f, -4.0f, 1.0f, 2.0f, -2.0f, 10.0f, -10.0f, 5.0f};
  OptimBuffer buffer() {
    OptimBuffer b;
    b.master = master.data();
    b.grad = grad.data();
    b.size = 8;
    b.ranges = {{0, 5, true, true}, {5, 8, false, false}};
    b.shards = {{0, 8}};
    return b;
  }
};

// torch.optim.AdamW's first step on one element, in double.
double adamw_first_step(double p, double g, double lr, double wd, const AdamWConfig& c) {
  p *= 1 - lr * wd;
  const double m = (1 - c.beta1) * g, v = (1 - c.beta2) * g * g;
  const double mh = m / (1 - c.beta1), vh = std::sqrt(v) / std::sqrt(1 - c.beta2);
  return p - lr * mh / (vh + c.eps);
}

TEST(Optimizer, GradNormCountsOnlyTheCountedRanges) {
  Fixture f;
  Optimizer opt({f.buffer()}, AdamWConfig{});
  const auto world = make_single_comm();
  EXPECT_NEAR(opt.grad_norm(*world), std::sqrt(9.0 + 16 + 1 + 4 + 4), 1e-12);
}

TEST(Optimizer, ClipsByTheGlobalNorm) {
  const AdamWConfig c{.eps = 0.5f, .weight_decay = 0.0f, .clip_grad = 1.0f};
  Fixture f;
  const std::vector<float> g0 = f.grad, p0 = f.master;
  Optimizer opt({f.buffer()}, c);
  const double norm = 8.0;  // as if the global norm (other ranks included) were 8
  ASSERT_TRUE(opt.step(1e-2, norm));
  const double coeff = 1.0 / (norm + 1e-6);  // max_norm / (norm + 1e-6), as torch
  for (size_t i = 0; i < 8; ++i) {
    // eps = 0.5 makes the update depend on the gradient's scale: clipped before the moments.
    EXPECT_NEAR(f.master[i], adamw_first_step(p0[i], g0[i] * float(coeff), 1e-2, 0, c), 1e-6) << i;
  }
  EXPECT_EQ(f.grad, g0);  // the factor is applied as the step reads them
  EXPECT_EQ(opt.steps(), 1);
}

TEST(Optimizer, NoClippingBelowTheThresholdOrWhenOff) {
  for (const float clip : {100.0f, 0.0f}) {
    const AdamWConfig c{.eps = 0.5f, .weight_decay = 0.0f, .clip_grad = clip};
    Fixture f;
    const std::vector<float> g0 = f.grad, p0 = f.master;
    Optimizer opt({f.buffer()}, c);
    ASSERT_TRUE(opt.step(1e-2, 8.0));
    for (size_t i = 0; i < 8; ++i)
      EXPECT_NEAR(f.master[i], adamw_first_step(p0[i], g0[i], 1e-2, 0, c), 1e-6)
          << clip << " " << i;
    EXPECT_EQ(f.grad, g0) << clip;
  }
}

TEST(Optimizer, SkipsAStepWhoseNormIsNotFinite) {
  for (const double norm :
       {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    Fixture f;
    const std::vector<float> g0 = f.grad, p0 = f.master;
    Optimizer opt({f.buffer()}, AdamWConfig{});
    EXPECT_FALSE(opt.step(1e-2, norm));
    EXPECT_EQ(f.master, p0);
    EXPECT_EQ(f.grad, g0);
    EXPECT_EQ(opt.steps(), 0);
    for (int64_t i = 0; i < 8; ++i) {
      EXPECT_EQ(*opt.exp_avg(0).at(i), 0.0f);
      EXPECT_EQ(*opt.exp_avg_sq(0).at(i), 0.0f);
    }
    // The next finite step is the first: bias corrections of step 1.
    ASSERT_TRUE(opt.step(1e-2, 1.0));
    EXPECT_EQ(opt.steps(), 1);
  }
}

TEST(Optimizer, WeightDecayOnlyOnDecayedRanges) {
  const AdamWConfig c{.weight_decay = 0.1f, .clip_grad = 0.0f};
  Fixture f;
  std::fill(f.grad.begin(), f.grad.end(), 0.0f);  // the Adam update is 0: only decay moves p
  const std::vector<float> p0 = f.master;
  Optimizer opt({f.buffer()}, c);
  ASSERT_TRUE(opt.step(0.5, 0.0));
  for (size_t i = 0; i < 5; ++i) EXPECT_FLOAT_EQ(f.master[i], p0[i] * (1 - 0.5f * 0.1f)) << i;
  for (size_t i = 5; i < 8; ++i) EXPECT_EQ(f.master[i], p0[i]) << i;
}

// The specs a 2-layer GPT-2 (llama false) or Llama with MoE and a shared expert registers (dense
// and expert buffers), one by one.
template <typename F>
void for_each_spec(bool llama, F&& f) {
  ModelConfig m = tests::model_shape(2, 32, 4, 8, 50);
  if (llama) {
    tests::set_llama_architecture(m);
    m.untie_embeddings_and_output_weights = true;
    m.num_experts = 4;
    m.moe_shared_expert_intermediate_size = 16;
  }
  m.finalize();
  model::GPTChunk c(m, {0, 2, true, true}, parallel::TensorParallel{}, {});
  for (const model::ParamBuffer* p : {&c.params(), &c.expert_params()})
    for (const model::ParamSpec& s : p->specs()) f(s);
}

// Megatron decays every weight matrix and embedding, never a bias or a norm weight.
TEST(Optimizer, RegistryExcludesBiasesAndNormWeightsFromDecay) {
  for (const bool llama : {false, true}) {
    int decayed = 0, excluded = 0;
    for_each_spec(llama, [&](const model::ParamSpec& s) {
      const bool bias = s.name.ends_with(".bias");
      const bool norm = s.name.find("layernorm") != std::string::npos;
      EXPECT_EQ(s.weight_decay, !bias && !norm) << s.name;
      (s.weight_decay ? decayed : excluded) += 1;
    });
    EXPECT_GT(decayed, 0);
    EXPECT_GT(excluded, 0);
  }
}

// --apply-wd-to-qk-layernorm (Megatron's "q_layernorm." / "k_layernorm." names): the q and k
// norms' weights take weight decay; the other norms and the biases still do not.
TEST(Optimizer, ApplyWdToQkLayernorm) {
  ModelConfig m = tests::model_shape(2, 32, 4, 8, 50);
  tests::set_llama_architecture(m);
  m.qk_layernorm = true;
  m.finalize();
  ParallelConfig cfg;
  cfg.micro_batch_size = 1;
  cfg.finalize(m);
  const auto world = make_single_comm();
  const ParallelState ps(cfg, *world);
  model::GPTChunk c(m, {0, 2, true, true}, parallel::TensorParallel{}, {});
  for (const bool on : {false, true}) {
    train::DdpOptions o;
    o.wd_qk_layernorm = on;
    const std::vector<OptimRange> r = train::optim_ranges(c.params(), ps, false, o);
    int qk = 0;
    for (size_t i = 0; i < r.size(); ++i) {
      const model::ParamSpec& s = c.params().spec(int(i));
      const bool qk_norm = s.name.find("q_layernorm.") != std::string::npos ||
                           s.name.find("k_layernorm.") != std::string::npos;
      qk += qk_norm;
      EXPECT_EQ(r[i].weight_decay, s.weight_decay || (on && qk_norm)) << s.name;
      if (qk_norm) {
        EXPECT_FALSE(s.weight_decay) << s.name;
      }
    }
    EXPECT_EQ(qk, 4);  // two layers' q and k norm weights
  }
}

// Megatron's schedules: a set's list cycled (quintic), or its last entry repeated (polar_express);
// cubic5 is five steps exactly.
TEST(Muon, NewtonSchulzCoefficientSchedules) {
  const auto quintic = ns_coefficients("quintic", 7);
  ASSERT_EQ(quintic.size(), 7u);
  EXPECT_EQ(quintic[0][0], 4.0848f);
  EXPECT_EQ(quintic[5], quintic[0]);
  EXPECT_EQ(quintic[6], quintic[1]);
  const auto polar = ns_coefficients("polar_express", 10);
  ASSERT_EQ(polar.size(), 10u);
  EXPECT_EQ(polar[0][2], 16.4607f);
  EXPECT_EQ(polar[8], polar[7]);
  EXPECT_EQ(polar[9], polar[7]);
  EXPECT_EQ(ns_coefficients("cubic5", 5).size(), 5u);
  EXPECT_TRUE(ns_coefficients("cubic5", 6).empty());
  EXPECT_TRUE(ns_coefficients("custom", 5).empty());
}

// The ranges marked muon are Muon's alone: their exp_avg is the momentum (1 - mu) g after one
// step, their exp_avg_sq stays zero; the other ranges take AdamW's step.
TEST(Muon, MarkedRangesAreNotSteppedByAdamW) {
  Fixture f;
  const std::vector<float> g0 = f.grad, p0 = f.master;
  OptimBuffer b = f.buffer();
  b.ranges = {{0, 4, true, true, false, true}, {4, 8, false, true}};
  MuonMatrix mm;
  mm.global = mm.local = {2, 2};
  b.muon = {mm};
  const AdamWConfig c{.weight_decay = 0.0f, .clip_grad = 0.0f};
  MuonConfig mc;
  mc.bf16 = false;
  Optimizer opt({b}, c, {}, 0, mc);
  ASSERT_TRUE(opt.step(1e-2, 1.0));
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(*opt.exp_avg(0).at(i), (1 - mc.momentum) * g0[size_t(i)]) << i;
    EXPECT_EQ(*opt.exp_avg_sq(0).at(i), 0.0f) << i;
    EXPECT_NE(f.master[size_t(i)], p0[size_t(i)]) << i;
  }
  for (size_t i = 4; i < 8; ++i)
    EXPECT_NEAR(f.master[i], adamw_first_step(p0[i], g0[i], 1e-2, 0, c), 1e-6) << i;
}

// Megatron's choice of Muon's parameters: every weight that is a matrix (SwiGLU's fc1, the
// router, each expert's, the learned position embeddings), not the word embeddings, the output
// layer, a norm or a bias.
TEST(Muon, StepsTheMatricesMegatronDoes) {
  for (const bool llama : {false, true}) {
    int muon = 0;
    for_each_spec(llama, [&](const model::ParamSpec& s) {
      const bool matrix =
          s.name.ends_with("linear_qkv.weight") || s.name.ends_with("linear_proj.weight") ||
          s.name.ends_with("linear_fc1.weight") || s.name.ends_with("linear_fc2.weight") ||
          s.name.ends_with("router.weight") || s.name == "embedding.position_embeddings.weight";
      EXPECT_EQ(train::muon_steps(s), matrix) << s.name;
      muon += matrix;
    });
    EXPECT_GT(muon, llama ? 12 : 8);
  }
}

}  // namespace
}  // namespace mtron::optim
