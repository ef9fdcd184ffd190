// The layout search: the seed's reference table as tests, the product of sizes, constraints,
// the reasons and the alternatives, and the errors.
#include <gtest/gtest.h>

#include "mtron/plan/report.h"
#include "util.h"

namespace mtron::plan {
namespace {

using test::error_of;

// Every plan's sizes multiply to the GPU count (TP x CP x DP x PP, and ETP x EP x EDP x PP).
void expect_products(const SearchResult& r, int64_t gpus) {
  for (const auto* list : {&r.plans, &r.too_big}) {
    for (const Candidate& c : *list) {
      const ParallelConfig& p = c.layout.parallel;
      EXPECT_EQ(p.tp() * p.cp() * p.dp() * p.pp(), gpus) << layout_name(c.layout);
      EXPECT_EQ(p.etp() * p.ep() * p.edp() * p.pp(), gpus) << layout_name(c.layout);
      EXPECT_EQ(p.world_size, gpus);
    }
  }
}

struct Expect {
  int64_t tp, pp, cp, dp;
};

void expect_best(const SearchResult& r, Expect e, const char* what) {
  ASSERT_FALSE(r.plans.empty()) << what;
  const ParallelConfig& p = r.plans[0].layout.parallel;
  std::printf("%s -> %s (%.1f%% MFU, %.1f GiB)\n", what, layout_name(r.plans[0].layout).c_str(),
              100 * r.plans[0].time.mfu, r.plans[0].memory.total() / (1024.0 * 1024 * 1024));
  EXPECT_EQ(p.tp(), e.tp) << what << ": " << layout_name(r.plans[0].layout);
  EXPECT_EQ(p.pp(), e.pp) << what << ": " << layout_name(r.plans[0].layout);
  EXPECT_EQ(p.cp(), e.cp) << what << ": " << layout_name(r.plans[0].layout);
  EXPECT_EQ(p.dp(), e.dp) << what << ": " << layout_name(r.plans[0].layout);
  for (const Candidate& c : r.plans) EXPECT_TRUE(c.fits);
  EXPECT_FALSE(r.plans[0].reasons.empty());
}

TEST(Search, Llama2_7B_On8H100IsPureDataParallel) {
  SearchOptions o;
  o.global_batch_size = 1024;
  const SearchResult r = test::plan(test::model("llama2-7b"), test::gpus("h100-sxm", 8), o);
  expect_best(r, {1, 1, 1, 8}, "7B on 8 H100");
  expect_products(r, 8);
}

TEST(Search, Llama2_13B_On8H100IsTP2DP4) {
  SearchOptions o;
  o.global_batch_size = 1024;
  const SearchResult r = test::plan(test::model("llama2-13b"), test::gpus("h100-sxm", 8), o);
  expect_best(r, {2, 1, 1, 4}, "13B on 8 H100");
  expect_products(r, 8);
  // Pure data parallelism does not fit: 13 B x (6 + 12/8) bytes of model state alone.
  bool said = false;
  for (const auto& a : r.alternatives)
    said |= a.find("pure data parallelism") != std::string::npos &&
            a.find("does not fit") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(Search, Llama2_70B_On64H100IsTP4PP4DP4) {
  SearchOptions o;
  o.global_batch_size = 1024;
  const SearchResult r = test::plan(test::model("llama2-70b"), test::gpus("h100-sxm", 64), o);
  expect_best(r, {4, 4, 1, 4}, "70B on 64 H100");
  expect_products(r, 64);
}

TEST(Search, AlternativesSayWhyTheyLose) {
  SearchOptions o;
  o.global_batch_size = 1536;
  const SearchResult r = test::plan(test::model("gpt3-175b"), test::gpus("h100-sxm", 128), o);
  ASSERT_FALSE(r.plans.empty());
  EXPECT_LE(r.plans[0].layout.parallel.tp(), 8);
  std::string all;
  for (const auto& a : r.alternatives) all += a + "\n";
  std::printf("%s", all.c_str());
  EXPECT_NE(all.find("TP=16 crosses nodes"), std::string::npos) << all;
  EXPECT_NE(all.find("pure data parallelism (TP1 PP1): does not fit"), std::string::npos) << all;
  EXPECT_NE(all.find("without the distributed optimizer: does not fit"), std::string::npos) << all;
  for (size_t i = 1; i < r.plans.size() && i < 5; ++i)
    EXPECT_NE(r.plans[i].reasons.back().find("slower than #1"), std::string::npos);
}

TEST(Search, Llama31_405B_On128H100LongSequencesIsTP8PP8CP2) {
  // 32K-token sequences, Llama 3's 16M-token batch. At TP8 x PP8 the model state alone needs
  // 6.4 B parameters x (4 + 12/2) bytes with bf16 gradient buffers: the fp32 ones (6 + 12/2)
  // do not fit any layout of 128 x 80 GB, as the error below says.
  const ModelConfig m = test::model("llama3.1-405b", {"--seq-length", "32768"});
  SearchOptions o;
  o.global_batch_size = 512;
  o.grads_fp32 = false;
  const SearchResult r = test::plan(m, test::gpus("h100-sxm", 128), o);
  expect_best(r, {8, 8, 2, 1}, "405B on 128 H100, seq 32768");
  expect_products(r, 128);
  EXPECT_EQ(r.plans[0].layout.parallel.decoder_first_pipeline_num_layers, 15);  // 15+6x16+15
  EXPECT_EQ(r.plans[0].layout.parallel.decoder_last_pipeline_num_layers, 15);
  o.grads_fp32 = true;
  EXPECT_TRUE(test::plan(m, test::gpus("h100-sxm", 128), o).plans.empty());
}

TEST(Search, MixtralUsesExpertParallelism) {
  SearchOptions o;
  o.global_batch_size = 256;
  const SearchResult r = test::plan(test::model("mixtral-8x7b"), test::gpus("h100-sxm", 64), o);
  ASSERT_FALSE(r.plans.empty());
  std::printf("Mixtral 8x7B on 64 H100 -> %s\n", layout_name(r.plans[0].layout).c_str());
  EXPECT_GT(r.plans[0].layout.parallel.ep(), 1);
  expect_products(r, 64);
}

TEST(Search, ConstraintsAreRespected) {
  SearchOptions o;
  o.global_batch_size = 64;
  o.tp = 2;
  o.pp = 2;
  o.micro_batch_size = 2;
  o.recompute = RecomputeGranularity::kFull;
  const SearchResult r = test::plan(test::model("llama2-7b"), test::gpus("h100-sxm", 16), o);
  ASSERT_FALSE(r.plans.empty());
  for (const Candidate& c : r.plans) {
    EXPECT_EQ(c.layout.parallel.tp(), 2);
    EXPECT_EQ(c.layout.parallel.pp(), 2);
    EXPECT_EQ(c.layout.parallel.micro_batch_size, 2);
    EXPECT_EQ(c.layout.recompute, RecomputeGranularity::kFull);
  }
  expect_products(r, 16);
}

TEST(Search, UnevenSplits) {
  int64_t first = 0, last = 0;
  EXPECT_TRUE(split_pipeline_layers(126, 8, 1, &first, &last));
  EXPECT_EQ(first, 15);
  EXPECT_EQ(last, 15);
  EXPECT_TRUE(split_pipeline_layers(32, 4, 2, &first, &last));
  EXPECT_EQ(first, 0);  // even
  EXPECT_TRUE(split_pipeline_layers(61, 2, 1, &first, &last));
  EXPECT_EQ(first + last, 61);
  EXPECT_FALSE(split_pipeline_layers(126, 16, 2, &first, &last));  // 7 and 8 per stage
}

// Where no uneven split exists, a layout string: the embedding, the MTP depths and the loss count
// as layers, the stages get equal counts, runs of equal stages are written with Megatron's
// repetition; mtron's ParallelConfig takes the strings.
TEST(Search, BalancedPipelineLayouts) {
  const ModelConfig ds = test::model("deepseek-v3");               // 61 layers, 1 MTP depth
  EXPECT_EQ(balanced_pipeline_layout(ds, 8, 4), "Et|(tt|)*30mL");  // Megatron-Bridge's H100 split
  EXPECT_EQ(balanced_pipeline_layout(ds, 8, 1), "Ettttttt|(tttttttt|)*6ttttttmL");
  // One unit each: the MTP depth would sit apart from the loss.
  EXPECT_EQ(balanced_pipeline_layout(ds, 8, 8), "");
  const ModelConfig l405 = test::model("llama3.1-405b");             // 126 layers
  EXPECT_EQ(balanced_pipeline_layout(l405, 8, 8), "Et|(tt|)*62tL");  // Megatron-Bridge's 405B
  EXPECT_EQ(balanced_pipeline_layout(l405, 16, 7), "");              // 128 units over 112 stages
  for (const auto& [m, pp, vpp] :
       {std::tuple{ds, 8, 4}, std::tuple{ds, 8, 1}, std::tuple{l405, 8, 8}}) {
    ParallelConfig p = tests::layout({.world = pp, .pp = pp, .mbs = 1, .gbs = 8 * pp});
    p.pipeline_model_parallel_layout = balanced_pipeline_layout(m, pp, vpp);
    p.finalize(m);
    EXPECT_EQ(p.vpp(), vpp) << p.pipeline_model_parallel_layout;
  }
}

// --cp-comm-type for the search: a2a+p2p without sizes takes the largest all-to-all group that
// divides the query groups per TP rank inside the NVLink domain; a2a beyond Llama 3's 8 query
// groups is refused by name; with CP the alternatives price the all-to-all.
TEST(Search, ContextParallelCommunication) {
  const ModelConfig m =
      test::model("llama3-8b", {"--seq-length", "65536", "--max-position-embeddings", "65536"});
  SearchOptions o;
  o.global_batch_size = 16;
  o.cp = 16;
  o.cp_comm_type = {"a2a+p2p"};
  const SearchResult r = test::plan(m, test::gpus("h100-sxm", 32), o);
  ASSERT_FALSE(r.plans.empty());
  for (const Candidate& cand : r.plans) {
    const ParallelConfig& p = cand.layout.parallel;
    ASSERT_EQ(p.hierarchical_context_parallel_sizes.size(), 2u);
    const int64_t a = p.hierarchical_context_parallel_sizes[0];
    EXPECT_EQ(a * p.hierarchical_context_parallel_sizes[1], 16);
    EXPECT_EQ(a, 8 / p.tp()) << layout_name(cand.layout);
    EXPECT_NE(layout_name(cand.layout).find("CP16(a2a+p2p "), std::string::npos);
  }
  o.cp_comm_type = {"a2a"};
  const SearchResult bad = test::plan(m, test::gpus("h100-sxm", 32), o);
  EXPECT_TRUE(bad.plans.empty());
  EXPECT_NE(bad.first_invalid_reason.find("splits the attention heads over 16 ranks"),
            std::string::npos)
      << bad.first_invalid_reason;
  o.cp = 4;
  o.cp_comm_type = {"p2p"};
  const SearchResult ring = test::plan(m, test::gpus("h100-sxm", 32), o);
  const auto alt =
      std::find_if(ring.alternatives.begin(), ring.alternatives.end(),
                   [](const std::string& s) { return s.find("--cp-comm-type a2a") == 0; });
  ASSERT_NE(alt, ring.alternatives.end());
  // The ring over CP16 at TP1 leaves the NVLink domain: the hierarchy is priced as an alternative,
  // the all-to-all over the node's 8 ranks.
  o.tp = 1;
  o.cp = 16;
  const SearchResult wide = test::plan(m, test::gpus("h100-sxm", 32), o);
  ASSERT_FALSE(wide.plans.empty());
  EXPECT_NE(std::find_if(wide.alternatives.begin(), wide.alternatives.end(),
                         [](const std::string& s) {
                           return s.find(
                                      "--cp-comm-type a2a+p2p "
                                      "--hierarchical-context-parallel-sizes 8 2") == 0;
                         }),
            wide.alternatives.end());
}

TEST(Search, NothingValidOrNothingFits) {
  SearchOptions o;
  o.global_batch_size = 64;
  // 405B on 8 GPUs: nothing fits; the result keeps the smallest layouts for the message.
  const SearchResult r = test::plan(test::model("llama3.1-405b"), test::gpus("h100-sxm", 8), o);
  EXPECT_TRUE(r.plans.empty());
  ASSERT_FALSE(r.too_big.empty());
  EXPECT_GT(r.too_big[0].memory.total(), 80e9);
  expect_products(r, 8);
  EXPECT_NE(error_of([] { find_model("llama9-1t"); }).find("llama2-7b"), std::string::npos);
}

// The JSON report: memory in GiB (the parameter count apart), and the MFU denominator with
// both peaks, as in the table.
TEST(Search, ReportStatesUnitsAndPeaks) {
  const ModelConfig m = test::model("llama2-13b");
  const Cluster c = test::gpus("h100-sxm", 8);
  SearchOptions o;
  o.global_batch_size = 64;
  o.precision = Precision::kFP8;
  const SearchResult r = test::plan(m, c, o);
  ASSERT_FALSE(r.plans.empty());
  const nlohmann::json j = plans_json(m, c, o, r);
  const nlohmann::json& plan = j["plans"][0];
  EXPECT_FALSE(plan["memory_gib"].contains("parameters"));
  double parts = 0;
  for (const char* k : {"weights", "gradients", "optimizer", "fp8_weights", "fp8_state",
                        "activations", "transient", "overhead"})
    parts += plan["memory_gib"][k].get<double>();
  EXPECT_NEAR(parts, plan["memory_gib"]["total"].get<double>(), 1e-6);
  EXPECT_LT(plan["memory_gib"]["total"].get<double>(),
            plan["memory_gib"]["capacity"].get<double>());
  EXPECT_GT(plan["parameters_per_gpu"].get<double>(), 1e9);  // a count: 13B over TP x PP
  EXPECT_DOUBLE_EQ(j["cluster"]["mfu_peak_tflops"].get<double>(), 989.4);
  EXPECT_DOUBLE_EQ(j["cluster"]["peak_tflops"]["fp8"].get<double>(), 1978.9);
  const std::string table = format_plans(m, c, o, r);
  EXPECT_NE(table.find("bf16 dense peak 989.4"), std::string::npos);
  EXPECT_NE(table.find("fp8 dense peak 1979"), std::string::npos);
}

}  // namespace
}  // namespace mtron::plan
