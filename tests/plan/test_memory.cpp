// The planner's memory model: parameter counts per stage, MoE experts over EP, the acceptance
// points (Mixtral expert weights fall 4x from EP1 to EP4; Llama-2 70B at TP4 PP4 with the
// distributed optimizer fits 80 GB) and equality with Megatron's formulas where both model the
// same thing.
#include <gtest/gtest.h>

#include "mtron/plan/memory_model.h"
#include "util.h"

namespace mtron::plan {
namespace {

Layout make(const ModelConfig& m,
            int64_t world,
            int64_t tp,
            int64_t pp,
            int64_t mbs,
            int64_t gbs,
            int64_t ep = 1,
            int64_t vpp = 0) {
  return test::layout(
      m, {.world = world, .tp = tp, .pp = pp, .ep = ep, .vpp = vpp, .mbs = mbs, .gbs = gbs});
}

// Llama 3 8B at 128K over CP8: this rank's 16384 tokens' K and V (8 groups x 128 each) are
// 64 MiB in bf16, q and the output (32 heads x 128 each) 256 MiB.
TEST(Memory, ContextParallelBuffers) {
  const ModelConfig m =
      test::model("llama3-8b", {"--seq-length", "131072", "--max-position-embeddings", "131072"});
  auto bytes = [&](std::vector<std::string> type, std::vector<int64_t> hcp = {}) {
    ParallelConfig p = tests::layout({.world = 8, .cp = 8, .mbs = 1, .gbs = 1});
    p.cp_comm_type = std::move(type);
    p.hierarchical_context_parallel_sizes = std::move(hcp);
    p.finalize(m);
    return cp_transient_bytes(m, p, 16384, 2) / double(1 << 20);
  };
  EXPECT_DOUBLE_EQ(bytes({"p2p"}), 4 * 64);             // 2 K/V blocks and 2 dK/dV partials
  EXPECT_DOUBLE_EQ(bytes({"all_gather"}), 2 * 8 * 64);  // the sequence's K, V and dK, dV
  EXPECT_DOUBLE_EQ(bytes({"a2a"}), 64 + 256);           // q, k, v and the output
  EXPECT_DOUBLE_EQ(bytes({"a2a+p2p"}, {2, 4}), 64 + 256 + 4 * 64);
  std::vector<std::string> mixed(31, "p2p");
  mixed.push_back("all_gather");
  EXPECT_DOUBLE_EQ(bytes(mixed), 2 * 8 * 64);  // per layer: the largest
}

TEST(Memory, StageParametersAddUpToTheModel) {
  for (const char* name : {"gpt2-124m", "llama2-7b", "mixtral-8x7b", "gpt3-1.3b", "deepseek-v3"}) {
    const ModelConfig m = test::model(name);
    const Layout l = make(m, 1, 1, 1, 1, 1);
    EXPECT_EQ(stage_parameters(m, l.parallel, 0).total(), double(m.num_parameters(1))) << name;
  }
  // Split over TP and PP: TP-sharded parts times TP, plus replicated ones, over all stages
  // (tied embeddings add the last stage's copy of the word embeddings).
  const ModelConfig m = test::model("gpt3-1.3b");
  const Layout l = make(m, 8, 2, 4, 1, 4);
  double total = 0;
  for (int64_t s = 0; s < 4; ++s) {
    const StageParams sp = stage_parameters(m, l.parallel, s);
    total += sp.tp_sharded * 2 + sp.replicated;
  }
  const double copy = double(m.padded_vocab_size(2)) * double(m.hidden_size);
  const double full = double(m.num_parameters(2));
  EXPECT_DOUBLE_EQ(total, full + copy);
}

// --add-qkv-bias (Qwen2): one bias of the QKV projection's width per layer, in the model's count
// and the planner's alike.
TEST(Memory, QkvBiasAloneAddsOneBiasPerLayer) {
  ModelConfig m = test::model("llama2-7b");
  const int64_t base = m.num_parameters(1);
  m.add_qkv_bias = true;
  EXPECT_EQ(m.num_parameters(1) - base, m.num_layers * (m.q_size() + 2 * m.kv_size()));
  EXPECT_EQ(stage_parameters(m, make(m, 1, 1, 1, 1, 1).parallel, 0).total(),
            double(m.num_parameters(1)));
}

// An MTP depth on the last stage: a layer's parameters (as one of the decoder's), three norms,
// eh_proj [h, 2h] split over TP and, with untied embeddings under PP, the word embeddings'
// replica; the first stage is unchanged, and the last stage's memory and step time grow.
TEST(Memory, MtpDepthsSitOnTheLastStage) {
  const ModelConfig m = test::model("llama3-8b");
  const ModelConfig d = test::model("llama3-8b", {"--mtp-num-layers", "1"});
  const Layout l = make(m, 16, 2, 4, 1, 64), ld = make(d, 16, 2, 4, 1, 64);
  const double h = double(m.hidden_size), t = 2;
  const StageParams first = stage_parameters(m, l.parallel, 0),
                    first_d = stage_parameters(d, ld.parallel, 0);
  EXPECT_DOUBLE_EQ(first_d.total(), first.total());
  // A middle stage's 8 layers give one layer's parameters.
  const StageParams mid = stage_parameters(m, l.parallel, 1);
  const double layer_tp = (mid.tp_sharded) / 8, layer_rep = mid.replicated / 8;
  const StageParams last = stage_parameters(m, l.parallel, 3),
                    last_d = stage_parameters(d, ld.parallel, 3);
  const double vocab = double(m.padded_vocab_size(2)) * h / t;
  EXPECT_DOUBLE_EQ(last_d.tp_sharded - last.tp_sharded, layer_tp + 2 * h * h / t + vocab);
  EXPECT_DOUBLE_EQ(last_d.replicated - last.replicated, layer_rep + 3 * h);
  const Cluster c = test::gpus("h100-sxm", 16);
  EXPECT_GT(estimate_memory(d, ld, c).total(), estimate_memory(m, l, c).total());
}

TEST(Memory, MixtralExpertWeightsFallFourFoldFromEP1ToEP4) {
  const ModelConfig m = test::model("mixtral-8x7b");
  const Layout ep1 = make(m, 8, 1, 1, 1, 8, 1), ep4 = make(m, 8, 1, 1, 1, 8, 4);
  const StageParams a = stage_parameters(m, ep1.parallel, 0),
                    b = stage_parameters(m, ep4.parallel, 0);
  EXPECT_DOUBLE_EQ(a.expert / b.expert, 4.0);
  EXPECT_DOUBLE_EQ(a.tp_sharded, b.tp_sharded);  // attention and embeddings unchanged
  // 8 experts x 3 matrices of 4096 x 14336 x 32 layers = 45.1 B expert parameters.
  EXPECT_DOUBLE_EQ(a.expert, 8.0 * 3 * 4096 * 14336 * 32);
  // In bytes (bf16 weights): the expert share of the weights falls 4x as well.
  const Cluster c = test::gpus("h100-sxm", 8);
  const MemoryBreakdown ma = estimate_memory(m, ep1, c), mb = estimate_memory(m, ep4, c);
  const double dense_weights = 2 * (a.tp_sharded + a.replicated);
  EXPECT_DOUBLE_EQ((ma.weights - dense_weights) / (mb.weights - dense_weights), 4.0);
}

TEST(Memory, Llama2_70B_TP4_PP4_DistributedOptimizerFits80GB) {
  const ModelConfig m = test::model("llama2-70b");
  Layout l = make(m, 64, 4, 4, 1, 1024);
  l.parallel.use_distributed_optimizer = true;
  l.recompute = RecomputeGranularity::kSelective;
  const Cluster c = test::gpus("h100-sxm", 64);
  const MemoryBreakdown b = estimate_memory(m, l, c);
  std::printf("%s", format_memory(b).c_str());
  EXPECT_LT(b.total(), 80e9);  // 80 GB
  EXPECT_TRUE(b.fits(0.10));   // with the planner's default 10% margin of the 79.6 GiB
  // Weights, gradients and optimizer state: 6 + 12/4 = 9 bytes per parameter on the most
  // loaded stage (4.3 B parameters).
  EXPECT_NEAR(b.model_state() / b.parameters, 9.0, 1e-9);
  // Without the distributed optimizer it does not fit with the margin (18 bytes per parameter).
  Layout plain = l;
  plain.parallel.use_distributed_optimizer = false;
  EXPECT_FALSE(estimate_memory(m, plain, c).fits(0.10));
}

TEST(Memory, WeightsAndOptimizerEqualMegatronsFormula) {
  // Bias-free RoPE Llama: both count the same parameters; Megatron puts the final norm into
  // every stage's 1/pp share, mtron on the last stage only (a few KB of 39 GB).
  const ModelConfig m = test::model("llama2-70b");
  Layout l = make(m, 64, 4, 4, 1, 1024);
  l.parallel.use_distributed_optimizer = true;
  const Cluster c = test::gpus("h100-sxm", 64);
  const double megatron =
      megatron_theoretical_memory(m, l.parallel, RecomputeGranularity::kSelective)
          .weight_and_optimizer;
  const StageParams first = stage_parameters(m, l.parallel, 0);
  const StateBytes sb = state_bytes_per_parameter(Precision::kBF16, true, 4);
  EXPECT_NEAR(first.total() * sb.total() / megatron, 1.0, 1e-6);
  EXPECT_NEAR(megatron / 39101220864.0, 1.0, 1e-12);  // tests/plan/megatron_memory_reference.py
  (void)c;
}

TEST(Memory, ActivationsEqualKorthikantiAndMegatronWhereTheyOverlap) {
  // GPT-style layer (LayerNorm, GeLU 4h, MHA, dropout), scores materialised, bf16: the
  // planner's layer equals Korthikanti's Table 2 in every configuration.
  const ModelConfig m =
      test::model("gpt3-13b", {"--hidden-dropout", "0.1", "--attention-dropout", "0.1"});
  const int64_t s = m.seq_length, h = m.hidden_size, a = m.num_attention_heads;
  using R = RecomputeGranularity;
  for (int64_t tp : {1, 2, 4, 8}) {
    for (int64_t mbs : {1, 3}) {
      for (R rc : {R::kNone, R::kSelective, R::kFull}) {
        for (bool sp : {false, true}) {
          if (sp && tp == 1) continue;
          Layout l = make(m, tp, tp, 1, mbs, mbs);
          l.parallel.sequence_parallel = sp;
          l.recompute = rc;
          const double got = layer_activation_bytes(m, l, /*fused_attention=*/false, false);
          const double want = korthikanti_activation_bytes_per_layer(s, mbs, h, a, tp, sp, rc);
          // (full recompute with SP: the saved layer input is split, 2sbh/t, an extension of
          // Korthikanti's 2sbh that korthikanti_activation_bytes_per_layer makes too)
          EXPECT_DOUBLE_EQ(got, want) << "tp " << tp << " sp " << sp;
        }
      }
    }
  }
  // Megatron's code (SP + selective): sbh (18 + 4F/h) per layer / t, on L layers on the first
  // stage (p micro-batches x L/p layers), x (1 + (p-1)/(p v)) interleaved.
  for (int64_t vpp : {0, 2, 5}) {
    Layout l = make(m, 32, 4, 4, 1, 64, 1, vpp);
    l.recompute = R::kSelective;
    const Cluster c = test::gpus("h100-sxm", 32);
    const MemoryBreakdown b = estimate_memory(m, l, c);
    const double per_layer = double(s) * h * (18 + 4.0 * m.ffn() / h) / 4;
    EXPECT_DOUBLE_EQ(layer_activation_bytes(m, l, false, false), per_layer);
    const double p = 4, v = double(l.parallel.vpp());
    const double factor = v > 1 ? 1 + (p - 1) / (p * v) : 1.0;
    EXPECT_NEAR(b.in_flight, m.num_layers * factor, 1e-9) << "vpp " << vpp;
  }
}

TEST(Memory, FusedAttentionDropsTheScoresAndCpSplitsTheSequence) {
  const ModelConfig m = test::model("llama2-7b");
  Layout l = make(m, 8, 1, 1, 1, 8);
  Layout cp = l;
  cp.parallel.context_parallel_size = 2;
  cp.parallel.finalize(m);
  const double full = layer_activation_bytes(m, l, true, false);
  EXPECT_NEAR(layer_activation_bytes(m, cp, true, false) / full, 0.5, 1e-12);
  EXPECT_GT(layer_activation_bytes(m, l, false, false), 2 * full);  // 32 x 4096^2 scores
  const Cluster c = test::gpus("h100-sxm", 8);
  EXPECT_LT(estimate_memory(m, cp, c).activations, estimate_memory(m, l, c).activations);
}

}  // namespace
}  // namespace mtron::plan
