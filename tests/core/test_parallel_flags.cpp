// The shared parallel and precision flags: what parallel_flag_args writes parses back to the
// same layout through add_parallel_flags (the emitted scripts and `mtron train` cannot drift).
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <algorithm>

#include "mtron/core/parallel_flags.h"
#include "test_helpers.h"

namespace mtron {
namespace {

ParallelConfig parse(std::vector<std::string> args) {
  CLI::App app;
  ParallelConfig p;
  add_parallel_flags(app, p, ParallelFlags::kAll, "Parallelism");
  std::reverse(args.begin(), args.end());
  app.parse(args);
  return p;
}

ModelConfig model(int64_t experts) {
  ModelConfig m = tests::model_shape(8, 64, 4, 32, 100);
  m.num_experts = experts;
  m.add_bias_linear = experts == 0;
  m.finalize();
  return m;
}

TEST(ParallelFlags, RoundTrip) {
  const ModelConfig moe = model(4);
  ParallelConfig p = tests::layout(
      {.world = 16, .tp = 2, .pp = 2, .cp = 2, .ep = 4, .etp = 1, .vpp = 2, .mbs = 2, .gbs = 16});
  p.sequence_parallel = p.use_distributed_optimizer = p.overlap_grad_reduce = true;
  p.overlap_param_gather = p.use_tp_pp_dp_mapping = true;
  p.finalize(moe);
  ParallelConfig q = parse(parallel_flag_args(p, true));
  q.world_size = 16;
  q.finalize(moe);
  EXPECT_EQ(q.summary(), p.summary());
  EXPECT_EQ(q.order(), p.order());
  EXPECT_EQ(q.etp(), 1);
  EXPECT_TRUE(q.overlap_param_gather);
  EXPECT_EQ(parallel_flag_args(q, true), parallel_flag_args(p, true));
}

// The pipeline split flags: the embedding and loss counted as layers, and the layout string
// (whose '|' and '*' pass through as one argument).
TEST(ParallelFlags, PipelineSplitsRoundTrip) {
  const ModelConfig dense = model(0);
  for (const bool layout : {false, true}) {
    ParallelConfig p = tests::layout({.world = 2, .pp = 2, .mbs = 1, .gbs = 4});
    if (layout) {
      p.pipeline_model_parallel_layout = "Et|t*3|t*2|ttL";
    } else {
      p.account_for_embedding_in_pipeline_split = p.account_for_loss_in_pipeline_split = true;
    }
    p.finalize(dense);
    ParallelConfig q = parse(parallel_flag_args(p, false));
    q.world_size = 2;
    q.finalize(dense);
    EXPECT_EQ(parallel_flag_args(q, false), parallel_flag_args(p, false));
    for (int64_t vs = 0; vs < p.pp() * p.vpp(); ++vs) {
      EXPECT_EQ(q.virtual_stage_layers(vs).first_layer, p.virtual_stage_layers(vs).first_layer);
      EXPECT_EQ(q.virtual_stage_layers(vs).num_layers, p.virtual_stage_layers(vs).num_layers);
    }
    EXPECT_EQ(q.vpp(), layout ? 2 : 1);
    EXPECT_EQ(q.uneven_stages(), layout);  // 8 layers + 2 over PP 2: 4 and 4
  }
}

// The CP communication types and hierarchical sizes, written only where they are not the default.
TEST(ParallelFlags, CpCommRoundTrip) {
  const ModelConfig dense = model(0);
  ParallelConfig p = tests::layout({.world = 4, .cp = 4, .mbs = 1});
  p.finalize(dense);
  const std::vector<std::string> plain = parallel_flag_args(p, false);
  EXPECT_EQ(std::find(plain.begin(), plain.end(), "--cp-comm-type"), plain.end());
  p.cp_comm_type = {"a2a+p2p"};
  p.hierarchical_context_parallel_sizes = {2, 2};
  p.finalize(dense);
  ParallelConfig q = parse(parallel_flag_args(p, false));
  q.world_size = 4;
  q.finalize(dense);
  EXPECT_EQ(q.cp_comms(), p.cp_comms());
  EXPECT_EQ(q.summary(), p.summary());
  EXPECT_EQ(parallel_flag_args(q, false), parallel_flag_args(p, false));
  // Megatron's test harness passes the sizes as one argument
  ParallelConfig r = parse({"--context-parallel-size", "4", "--cp-comm-type", "a2a+p2p",
                            "--hierarchical-context-parallel-sizes", "2 2"});
  EXPECT_EQ(r.hierarchical_context_parallel_sizes, (std::vector<int64_t>{2, 2}));
}

TEST(ParallelFlags, DenseOmitsExpertSizesAndTheLastValueWins) {
  ParallelConfig p = tests::layout({.world = 4, .tp = 2, .mbs = 1});
  p.finalize(model(0));
  const std::vector<std::string> a = parallel_flag_args(p, false);
  EXPECT_EQ(std::find(a.begin(), a.end(), "--expert-tensor-parallel-size"), a.end());
  std::vector<std::string> b = a;
  b.insert(b.end(), {"--tensor-model-parallel-size", "4"});
  EXPECT_EQ(parse(b).tensor_model_parallel_size, 4);
}

TEST(PrecisionFlags, RoundTripAndBf16Reduction) {
  CLI::App app;
  PrecisionFlags f;
  add_precision_flags(app, f, "Training");
  std::vector<std::string> args = precision_flag_args({Precision::kBF16, true});
  EXPECT_EQ(args, (std::vector<std::string>{"--bf16", "--grad-reduce-in-bf16"}));
  std::reverse(args.begin(), args.end());
  app.parse(args);
  EXPECT_TRUE(f.compute == Precision::kBF16 && f.grad_reduce_in_bf16);
  EXPECT_TRUE(
      precision_flag_args({Precision::kFP32, true}).empty());  // bf16 reduction needs --bf16
}

}  // namespace
}  // namespace mtron
