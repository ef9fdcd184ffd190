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
