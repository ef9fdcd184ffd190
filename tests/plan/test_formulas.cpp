// Megatron's formulas in core: bytes per parameter, the "Theoretical memory footprints" of
// theoretical_memory_usage.py (against numbers from Megatron's own code), Korthikanti's table,
// the model flags, and ParallelConfig's pipeline splits: uneven stages, the embedding and loss
// counted as layers, and the layout string, against Megatron's layer offsets and rules.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include "mtron/core/formulas.h"
#include "mtron/core/model_flags.h"
#include "util.h"

namespace mtron {
namespace {

using tests::error_of;

ParallelConfig layout(int64_t world, int64_t tp, int64_t pp, int64_t mbs, int64_t gbs) {
  return tests::layout({.world = world, .tp = tp, .pp = pp, .mbs = mbs, .gbs = gbs});
}

TEST(Formulas, BytesPerParameterMatchMegatronsTable) {
  // docs/.../dist_optimizer.md: 18 / 6 + 12/d (bf16), 16 / 8 + 8/d (fp32); mtron's fp16 (fp32
  // gradients) as bf16.
  for (int64_t d : {1, 2, 8, 64}) {
    EXPECT_DOUBLE_EQ(state_bytes_per_parameter(Precision::kBF16, false, d).total(), 18);
    EXPECT_DOUBLE_EQ(state_bytes_per_parameter(Precision::kBF16, true, d).total(), 6 + 12.0 / d);
    EXPECT_DOUBLE_EQ(state_bytes_per_parameter(Precision::kFP16, false, d).total(), 18);
    EXPECT_DOUBLE_EQ(state_bytes_per_parameter(Precision::kFP16, true, d).total(), 6 + 12.0 / d);
    EXPECT_DOUBLE_EQ(state_bytes_per_parameter(Precision::kFP32, false, d).total(), 16);
    EXPECT_DOUBLE_EQ(state_bytes_per_parameter(Precision::kFP32, true, d).total(), 8 + 8.0 / d);
    EXPECT_DOUBLE_EQ(state_bytes_per_parameter(Precision::kBF16, true, d, false).total(),
                     4 + 12.0 / d);
  }
}

// Expected values printed by tests/plan/megatron_memory_reference.py, which runs Megatron-LM's
// theoretical_memory_usage.py (HEAD d98e8a6) on the same configurations.
struct MegatronCase {
  const char* model;
  ParallelConfig parallel;
  RecomputeGranularity recompute;
  double weight_and_optimizer, activation;
};

TEST(Formulas, TheoreticalMemoryEqualsMegatronsCode) {
  ParallelConfig llama = layout(64, 4, 4, 1, 1024);
  llama.use_distributed_optimizer = true;
  llama.sequence_parallel = true;
  ParallelConfig gpt3 = layout(512, 8, 8, 1, 1536);
  gpt3.num_virtual_stages_per_pipeline_rank = 2;
  gpt3.sequence_parallel = true;
  ParallelConfig mixtral = layout(8, 2, 1, 1, 32);
  mixtral.expert_model_parallel_size = 4;
  mixtral.use_distributed_optimizer = true;
  mixtral.sequence_parallel = true;  // MoE with TP > 1 needs it
  const ParallelConfig gpt2 = layout(2, 1, 2, 2, 8);
  ParallelConfig deepseek = layout(128, 2, 1, 1, 8192);
  deepseek.expert_model_parallel_size = 64;
  deepseek.expert_tensor_parallel_size = 1;
  deepseek.use_distributed_optimizer = true;
  deepseek.sequence_parallel = true;
  const MegatronCase cases[] = {
      {"llama2-70b", llama, RecomputeGranularity::kSelective, 39101220864.0, 21508423680.0},
      {"gpt3-175b", gpt3, RecomputeGranularity::kSelective, 50348611584.0, 14795955200.0},
      {"mixtral-8x7b", mixtral, RecomputeGranularity::kNone, 108699881472.0, 12592226304.0},
      {"gpt2-124m", gpt2, RecomputeGranularity::kNone, 1460160000.0, 677152358.4},
      // multi-latent attention, 3 dense + 58 MoE layers, one MoE MTP depth
      {"deepseek-v3", deepseek, RecomputeGranularity::kSelective, 178738054848.0, 26461880320.0},
  };
  for (MegatronCase c : cases) {
    const ModelConfig m = plan::test::model(c.model);
    c.parallel.finalize(m);
    const TheoreticalMemory t = megatron_theoretical_memory(m, c.parallel, c.recompute);
    EXPECT_NEAR(t.weight_and_optimizer / c.weight_and_optimizer, 1.0, 1e-12) << c.model;
    EXPECT_NEAR(t.activation / c.activation, 1.0, 1e-12) << c.model;
  }
}

TEST(Formulas, TheoreticalMemoryLineIsMegatrons) {
  TheoreticalMemory t{1024.0 * 1024 * 1.5, 1024.0 * 1024 * 2.25};
  EXPECT_EQ(format_theoretical_memory(t),
            "Theoretical memory footprints: weight and optimizer=1.50 MB, activation=2.25 MB, "
            "total=3.75 MB");
}

TEST(Formulas, KorthikantiTable) {
  const int64_t s = 2048, b = 3, h = 1024, a = 16;
  const double sbh = double(s) * b * h, sc = 5.0 * a * s / h;
  using R = RecomputeGranularity;
  EXPECT_DOUBLE_EQ(korthikanti_activation_bytes_per_layer(s, b, h, a, 1, false, R::kNone),
                   sbh * (34 + sc));
  for (int64_t t : {2, 4, 8}) {
    EXPECT_DOUBLE_EQ(korthikanti_activation_bytes_per_layer(s, b, h, a, t, false, R::kNone),
                     sbh * (10 + 24.0 / t + sc / t));
    EXPECT_DOUBLE_EQ(korthikanti_activation_bytes_per_layer(s, b, h, a, t, true, R::kNone),
                     sbh / t * (34 + sc));
    EXPECT_DOUBLE_EQ(korthikanti_activation_bytes_per_layer(s, b, h, a, t, false, R::kSelective),
                     sbh * (10 + 24.0 / t));
    EXPECT_DOUBLE_EQ(korthikanti_activation_bytes_per_layer(s, b, h, a, t, true, R::kSelective),
                     34 * sbh / t);
    EXPECT_DOUBLE_EQ(korthikanti_activation_bytes_per_layer(s, b, h, a, t, false, R::kFull),
                     2 * sbh);
  }
}

TEST(ModelFlags, MegatronDefaultsAndRoundTrip) {
  CLI::App app;
  ModelConfig m;
  add_model_flags(app, m);
  EXPECT_FLOAT_EQ(m.hidden_dropout, 0.1f);  // Megatron's
  EXPECT_FLOAT_EQ(m.attention_dropout, 0.1f);
  EXPECT_EQ(m.make_vocab_size_divisible_by, 128);
  EXPECT_EQ(m.moe_router_topk, 2);
  for (const char* name : {"llama2-70b", "mixtral-8x7b", "gpt2-124m", "deepseek-v3"}) {
    const ModelConfig want = plan::test::model(name);
    CLI::App again;
    ModelConfig got;
    add_model_flags(again, got);
    again.add_option("--vocab-size", got.vocab_size);
    std::vector<std::string> args = model_flag_args(want);
    std::reverse(args.begin(), args.end());
    again.parse(args);
    got.finalize();
    EXPECT_EQ(model_flag_args(got), model_flag_args(want)) << name;
    EXPECT_EQ(got.num_parameters(1), want.num_parameters(1)) << name;
  }
}

TEST(ModelFlags, LaterFlagsOverrideEarlierOnes) {
  const ModelConfig m =
      plan::test::model("llama2-7b", {"--seq-length", "2048", "--num-layers", "2"});
  EXPECT_EQ(m.seq_length, 2048);
  EXPECT_EQ(m.num_layers, 2);
  EXPECT_EQ(m.max_position_embeddings, 4096);  // from the catalog
}

TEST(ModelFlags, BadChoiceNamesTheAllowedValues) {
  CLI::App app;
  ModelConfig m;
  add_model_flags(app, m);
  std::vector<std::string> args = {"--normalization", "BatchNorm"};
  std::reverse(args.begin(), args.end());
  try {
    app.parse(args);
    FAIL() << "accepted --normalization BatchNorm";
  } catch (const CLI::ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("RMSNorm"), std::string::npos) << e.what();
  }
}

TEST(ParallelConfig, UnevenPipelineRules) {
  const ModelConfig m = plan::test::model("llama3.1-405b");
  ParallelConfig p = layout(128, 8, 8, 1, 64);
  EXPECT_NE(error_of([&] {
              ParallelConfig x = p;
              x.finalize(m);
            }).find("divisible"),
            std::string::npos);  // 126 layers over 8 stages
  p.decoder_first_pipeline_num_layers = 15;
  p.decoder_last_pipeline_num_layers = 15;
  p.context_parallel_size = 2;
  p.global_batch_size = 64;
  ParallelConfig ok = p;
  ok.finalize(m);
  EXPECT_EQ(ok.num_layers_in_stage(0), 15);
  EXPECT_EQ(ok.num_layers_in_stage(3), 16);
  EXPECT_EQ(ok.num_layers_in_stage(7), 15);
  int64_t total = 0;
  for (int64_t s = 0; s < ok.pp(); ++s) total += ok.num_layers_in_stage(s);
  EXPECT_EQ(total, 126);
  ParallelConfig bad = p;
  bad.decoder_first_pipeline_num_layers = 14;  // 98 middle layers over 6 stages
  bad.decoder_last_pipeline_num_layers = 14;
  EXPECT_NE(error_of([&] { bad.finalize(m); }).find("middle stage: 98"), std::string::npos);
  ParallelConfig vpp = p;
  vpp.num_virtual_stages_per_pipeline_rank = 2;  // 15 is odd
  EXPECT_NE(error_of([&] { vpp.finalize(m); }).find("virtual pipeline parallel degree 2"),
            std::string::npos);
  ParallelConfig lpvs = p;
  lpvs.num_layers_per_virtual_pipeline_stage = 1;
  EXPECT_NE(error_of([&] { lpvs.finalize(m); }).find("--num-virtual-stages-per-pipeline-rank"),
            std::string::npos);
}

TEST(ParallelConfig, InterleavingGroupsMicroBatches) {
  const ModelConfig m = plan::test::model("gpt2-124m");
  ParallelConfig p = layout(4, 1, 4, 1, 6);  // 6 micro-batches, PP 4
  p.num_virtual_stages_per_pipeline_rank = 3;
  EXPECT_NE(error_of([&] {
              ParallelConfig x = p;
              x.finalize(m);
            }).find("but it is 2 (M = 6, N = 4)"),
            std::string::npos);  // groups of PP: a last group of 2
  ParallelConfig six = p;
  six.microbatch_group_size_per_vp_stage = 6;  // one group of all 6
  six.finalize(m);
  EXPECT_EQ(six.microbatch_group(), 6);
  ParallelConfig seven = p;
  seven.microbatch_group_size_per_vp_stage = 7;
  EXPECT_NE(error_of([&] { seven.finalize(m); }).find("should range in [PP=4 , M=6]"),
            std::string::npos);
  p.global_batch_size = 8;
  p.finalize(m);
  EXPECT_EQ(p.vpp(), 3);
  EXPECT_EQ(p.microbatch_group(), 4);
}

// Each virtual stage's layers as [first, count) pairs, in virtual-stage order.
std::vector<std::pair<int64_t, int64_t>> stages(const ParallelConfig& p) {
  std::vector<std::pair<int64_t, int64_t>> v;
  for (int64_t vs = 0; vs < p.pp() * p.vpp(); ++vs) {
    const ParallelConfig::StageLayers l = p.virtual_stage_layers(vs);
    v.emplace_back(l.first_layer, l.num_layers);
  }
  return v;
}

using Stages = std::vector<std::pair<int64_t, int64_t>>;

TEST(ParallelConfig, PipelineSplitsFollowMegatronsLayerOffsets) {
  ModelConfig m = plan::test::model("gpt2-124m");  // 12 layers
  // Uneven with VPP 2 (Megatron's functional test tp1_pp4_vp1_uneven_pipeline, with VPP): per
  // round of virtual stages first/2 = 1, the middle 8 layers / 2 ranks / 2 = 2, last/2 = 1.
  ParallelConfig u = layout(4, 1, 4, 1, 8);
  u.decoder_first_pipeline_num_layers = 2;
  u.decoder_last_pipeline_num_layers = 2;
  u.num_virtual_stages_per_pipeline_rank = 2;
  u.finalize(m);
  EXPECT_EQ(stages(u), (Stages{{0, 1}, {1, 2}, {3, 2}, {5, 1}, {6, 1}, {7, 2}, {9, 2}, {11, 1}}));
  EXPECT_EQ(u.num_layers_in_stage(0), 2);
  EXPECT_EQ(u.num_layers_in_stage(1), 4);
  EXPECT_TRUE(u.uneven_stages());
  ParallelConfig over = layout(2, 1, 2, 1, 8);  // 30 + 31 layers of a 12-layer model
  over.decoder_first_pipeline_num_layers = 30;
  over.decoder_last_pipeline_num_layers = 31;
  EXPECT_NE(error_of([&] { over.finalize(m); }).find("Mismatch: -49 middle layers"),
            std::string::npos);
  // The embedding and the loss counted as layers (Megatron's tp1_pp4_vp2
  // account_for_embedding_loss_in_pipeline_split: 6 layers, PP 4, VPP 2): 8 units, one per
  // virtual stage, so the first holds the embedding alone and the last the loss alone;
  // get_transformer_layer_offset gives 0, 0, 1, 2, 3, 4, 5, 6.
  m.num_layers = 6;
  ParallelConfig a = layout(4, 1, 4, 1, 8);
  a.num_virtual_stages_per_pipeline_rank = 2;
  a.account_for_embedding_in_pipeline_split = true;
  a.account_for_loss_in_pipeline_split = true;
  a.finalize(m);
  EXPECT_EQ(stages(a), (Stages{{0, 0}, {0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 0}}));
  // The layout string of Megatron's selective_recompute_experimental test shape, with an MTP
  // stage: "Ettt|tt|tt|mL".
  m.num_layers = 7;
  m.mtp_num_layers = 1;
  ParallelConfig l = layout(4, 1, 4, 1, 8);
  l.pipeline_model_parallel_layout = "Et*3|(tt|)*2mL";
  l.finalize(m);
  EXPECT_EQ(l.vpp(), 1);
  EXPECT_EQ(stages(l), (Stages{{0, 3}, {3, 2}, {5, 2}, {7, 0}}));
  // Even: no flags, the old split.
  m.mtp_num_layers = 0;
  m.num_layers = 8;
  ParallelConfig e = layout(4, 1, 4, 1, 8);
  e.finalize(m);
  EXPECT_EQ(stages(e), (Stages{{0, 2}, {2, 2}, {4, 2}, {6, 2}}));
  EXPECT_FALSE(e.uneven_stages());
}

TEST(ParallelConfig, PipelineLayoutRules) {
  ModelConfig m = plan::test::model("gpt2-124m");
  m.num_layers = 4;
  // The error finalize gives for `layout` at PP 2, after `more` has set other flags.
  auto error = [&](const std::string& layout, auto&& more) {
    ParallelConfig p = tests::layout({.world = 2, .pp = 2, .mbs = 1, .gbs = 4});
    p.pipeline_model_parallel_layout = layout;
    more(p);
    return error_of([&] { p.finalize(m); });
  };
  auto none = [](ParallelConfig&) {};
  auto has = [](const std::string& e, const char* what) {
    return e.find(what) != std::string::npos;
  };
  EXPECT_EQ(error("Ett|ttL", none), "");
  EXPECT_EQ(error("E|t|ttt|L", none), "");  // VPP 2, stages of the embedding / loss alone
  EXPECT_TRUE(has(error("Ett|t|tL", none), "divisible by pipeline_model_parallel_size (3 stages"));
  EXPECT_TRUE(has(error("Ett|tXL", none), "invalid layer character 'X' in stage 1"));
  EXPECT_TRUE(has(error("tEt|ttL", none), "the first layer must be embedding"));
  EXPECT_TRUE(has(error("Ett|tLt", none), "the last layer must be loss"));
  EXPECT_TRUE(has(error("Ett|EttL", none), "embedding must be specified exactly once"));
  EXPECT_TRUE(has(error("Ett|tttL", none), "number of decoder layers 5 must match num_layers 4"));
  EXPECT_TRUE(has(error("Ett|tLtL", none), "loss must be specified exactly once"));
  EXPECT_TRUE(has(error("Ett|tmL", none), "number of decoder layers 3"));
  m.mtp_num_layers = 1;
  EXPECT_TRUE(has(error("Ett|ttL", none), "number of mtp layers 0 must match --mtp-num-layers 1"));
  EXPECT_TRUE(has(error("Ett|tmtL", none), "decoder layers must be placed before MTP layers"));
  EXPECT_TRUE(has(error("Etttt|m|L|", none), "and the loss (L) in the last"));
  EXPECT_TRUE(has(error("|Etttt|m|L", none), "the embedding (E) must be in the first stage"));
  EXPECT_TRUE(has(error("Etttt|m||L", none), "MTP layers must be in the last stage"));
  EXPECT_EQ(error("Ettt|tmL", none), "");
  m.mtp_num_layers = 0;
  EXPECT_TRUE(
      has(error("Ett|ttL", [](ParallelConfig& p) { p.account_for_loss_in_pipeline_split = true; }),
          "cannot be set with other pipeline layout arguments"));
  EXPECT_TRUE(
      has(error("Ett|ttL", [](ParallelConfig& p) { p.num_virtual_stages_per_pipeline_rank = 2; }),
          "No more than one of the following arguments"));
  EXPECT_TRUE(has(error("",
                        [](ParallelConfig& p) {
                          p.decoder_first_pipeline_num_layers = 1;
                          p.account_for_embedding_in_pipeline_split = true;
                        }),
                  "cannot be set at the same time with --account-for"));
  EXPECT_TRUE(has(error("", [](ParallelConfig& p) { p.account_for_loss_in_pipeline_split = true; }),
                  "Number of layers (4 + 1 accounted for the embedding and loss) should be "
                  "divisible"));
}

}  // namespace
}  // namespace mtron
