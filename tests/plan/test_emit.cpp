// Launch scripts: every flag, parseable model flags, scripts bash accepts, and no script (but the
// reason) for a plan `mtron train` cannot run. (That every emitted argv parses in `mtron train`
// is checked end to end by emit_roundtrip.sh.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "mtron/core/error.h"
#include "mtron/plan/emit.h"
#include "util.h"

namespace mtron::plan {
namespace {

bool has(const std::vector<std::string>& a, const std::string& flag, const std::string& value) {
  for (size_t i = 0; i + 1 < a.size(); ++i)
    if (a[i] == flag && a[i + 1] == value) return true;
  return false;
}

bool has(const std::vector<std::string>& a, const std::string& flag) {
  return std::find(a.begin(), a.end(), flag) != a.end();
}

// bash -n: the script parses.
bool bash_accepts(const std::string& script) {
  const auto path = std::filesystem::temp_directory_path() / "mtron_emit_test.sh";
  std::ofstream(path) << script;
  const int rc = std::system(("bash -n " + path.string()).c_str());
  std::filesystem::remove(path);
  return rc == 0;
}

TEST(Emit, TrainArgsCarryTheWholePlan) {
  const ModelConfig m = test::model("llama2-70b");
  SearchOptions o;
  o.global_batch_size = 1024;
  o.cp = 1;  // as `mtron plan` searches for GPUs without --context-parallel-size
  const Cluster c = test::gpus("h100-sxm", 64);
  const SearchResult r = test::plan(m, c, o);
  ASSERT_FALSE(r.plans.empty());
  const Layout& l = r.plans[0].layout;
  TrainingArgs t;
  t.data_args = {"--data-path",     "/data/corpus_text_document", "--tokenizer-type",
                 "Llama2Tokenizer", "--tokenizer-model",          "/data/tokenizer.model"};
  const std::vector<std::string> a = train_args(m, l, c, t);
  EXPECT_TRUE(has(a, "--num-layers", "80"));
  EXPECT_TRUE(has(a, "--num-query-groups", "8"));
  EXPECT_TRUE(has(a, "--normalization", "RMSNorm"));
  EXPECT_TRUE(has(a, "--tensor-model-parallel-size", std::to_string(l.parallel.tp())));
  EXPECT_TRUE(has(a, "--pipeline-model-parallel-size", std::to_string(l.parallel.pp())));
  EXPECT_TRUE(has(a, "--context-parallel-size", "1"));
  EXPECT_TRUE(has(a, "--micro-batch-size", std::to_string(l.parallel.micro_batch_size)));
  EXPECT_TRUE(has(a, "--global-batch-size", "1024"));
  EXPECT_TRUE(has(a, "--use-distributed-optimizer"));
  EXPECT_TRUE(has(a, "--sequence-parallel"));
  EXPECT_TRUE(has(a, "--overlap-grad-reduce"));
  EXPECT_TRUE(has(a, "--bf16"));
  EXPECT_TRUE(has(a, "--device", "cuda"));
  EXPECT_TRUE(has(a, "--data-path", "/data/corpus_text_document"));
  EXPECT_FALSE(has(a, "--mock-data"));
  if (l.parallel.vpp() > 1) {
    EXPECT_TRUE(has(a, "--num-virtual-stages-per-pipeline-rank", std::to_string(l.parallel.vpp())));
  }

  JobOptions job;
  job.comment = "test plan\nsecond line";
  const std::string sbatch = emit_script(Launcher::kSbatch, c, l, a, job);
  EXPECT_NE(sbatch.find("#SBATCH --nodes=8"), std::string::npos);
  EXPECT_NE(sbatch.find("#SBATCH --ntasks-per-node=8"), std::string::npos);
  EXPECT_NE(sbatch.find("#SBATCH --gpus-per-node=8"), std::string::npos);
  EXPECT_NE(sbatch.find("# second line"), std::string::npos);
  EXPECT_NE(sbatch.find("CUDA_DEVICE_MAX_CONNECTIONS=1"), std::string::npos);
  EXPECT_TRUE(bash_accepts(sbatch));
  const std::string srun = emit_script(Launcher::kSrun, c, l, a, job);
  EXPECT_NE(srun.find("srun --mpi=pmix --nodes=8 --ntasks-per-node=8 --gpus-per-node=8"),
            std::string::npos);
  EXPECT_NE(sbatch.find("srun --mpi=pmix --kill-on-bad-exit=1"), std::string::npos);
  EXPECT_TRUE(bash_accepts(srun));
  const std::string mpirun = emit_script(Launcher::kMpirun, c, l, a, job);
  EXPECT_NE(mpirun.find("mpirun -np 64"), std::string::npos);
  EXPECT_NE(mpirun.find("--hostfile"), std::string::npos);
  EXPECT_TRUE(bash_accepts(mpirun));
}

TEST(Emit, CpuMpirunScriptRunsHere) {
  const ModelConfig m = test::model("gpt2-124m", {"--num-layers", "2", "--seq-length", "128"});
  Cluster c;
  c.hardware = find_hardware("local-cpu");
  c.num_devices = 4;
  c.devices_per_node = 4;
  SearchOptions o;
  o.global_batch_size = 8;
  o.precision = Precision::kFP32;
  const SearchResult r = test::plan(m, c, o);
  ASSERT_FALSE(r.plans.empty());
  const Layout& l = r.plans[0].layout;
  EXPECT_FALSE(l.tp_comm_overlap);  // not on a CPU
  EXPECT_FALSE(l.parallel.overlap_grad_reduce);
  const std::vector<std::string> a = train_args(m, l, c, TrainingArgs{});
  EXPECT_TRUE(has(a, "--mock-data"));
  EXPECT_TRUE(has(a, "--tokenizer-type", "NullTokenizer"));
  EXPECT_TRUE(has(a, "--vocab-size", "50257"));
  EXPECT_FALSE(has(a, "--bf16"));
  EXPECT_TRUE(has(a, "--log-interval", "1"));
  JobOptions job;
  job.mtron = "/opt/mtron with space/mtron";
  const std::string s = emit_script(Launcher::kMpirun, c, l, a, job);
  EXPECT_NE(s.find("mpirun -np 4"), std::string::npos);
  EXPECT_NE(s.find("--allow-run-as-root"), std::string::npos);
  EXPECT_NE(s.find("OMP_NUM_THREADS"), std::string::npos);
  EXPECT_NE(s.find("'/opt/mtron with space/mtron'"), std::string::npos);
  if (c.hardware.gpus_per_node < 4) {
    EXPECT_NE(s.find("--oversubscribe"), std::string::npos);
  }
  EXPECT_EQ(s.find("--hostfile"), std::string::npos);
  EXPECT_TRUE(bash_accepts(s));
}

// Checkpoints are emitted for GPUs, uneven pipeline stages are carried, and MoE plans with expert
// parallelism get their script.
TEST(Emit, CarriesWhatMtronTrainRuns) {
  const Cluster c = test::gpus("h100-sxm", 64);
  SearchOptions o;
  o.global_batch_size = 1024;
  o.cp = 1;
  const ModelConfig dense = test::model("llama2-70b");
  const Layout l = test::plan(dense, c, o).plans.at(0).layout;
  TrainingArgs t;
  t.save = "/ckpt";
  auto message = [&](const ModelConfig& m, const Layout& lay, const TrainingArgs& args) {
    try {
      train_args(m, lay, c, args);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(message(dense, l, t), "(no error)");
  const std::vector<std::string> saved = train_args(dense, l, c, t);
  EXPECT_NE(std::find(saved.begin(), saved.end(), "--save"), saved.end());
  // Uneven stages run as planned: the script carries the split.
  Layout uneven = l;
  uneven.parallel.decoder_first_pipeline_num_layers = 19;
  const std::vector<std::string> split = train_args(dense, uneven, c, {});
  const auto first = std::find(split.begin(), split.end(), "--decoder-first-pipeline-num-layers");
  ASSERT_NE(first, split.end());
  EXPECT_EQ(*(first + 1), "19");
  const ModelConfig moe = test::model("mixtral-8x7b");
  o.global_batch_size = 256;
  const SearchResult r = test::plan(moe, c, o);
  ASSERT_FALSE(r.plans.empty());
  // Expert parallelism runs on --device cuda: Mixtral's best plan gets its script.
  EXPECT_EQ(message(moe, r.plans[0].layout, {}), "(no error)");
  const std::vector<std::string> moe_args = train_args(moe, r.plans[0].layout, c, {});
  EXPECT_NE(std::find(moe_args.begin(), moe_args.end(), "--expert-model-parallel-size"),
            moe_args.end());
}

// FP8 plans: --bf16 and Megatron's delayed-scaling flags with the plan's format and amax
// history; --fp8-param-gather beside the distributed optimizer only, and no FP8 with multi-latent
// attention (mtron train refuses both).
TEST(Emit, Fp8PlansRunDelayedScaling) {
  const Cluster c = test::gpus("h100-sxm", 64);
  SearchOptions o;
  o.global_batch_size = 1024;
  o.cp = 1;
  o.precision = Precision::kFP8;
  o.fp8_amax_history_len = 16;
  const ModelConfig dense = test::model("llama2-70b");
  const SearchResult r = test::plan(dense, c, o);
  ASSERT_FALSE(r.plans.empty());
  Layout l = r.plans[0].layout;
  EXPECT_EQ(l.precision, Precision::kFP8);
  std::vector<std::string> a = train_args(dense, l, c, {});
  EXPECT_TRUE(has(a, "--bf16"));
  EXPECT_TRUE(has(a, "--fp8-format", "hybrid"));
  EXPECT_TRUE(has(a, "--fp8-recipe", "delayed"));
  EXPECT_TRUE(has(a, "--fp8-amax-history-len", "16"));
  EXPECT_TRUE(has(a, "--fp8-amax-compute-algo", "max"));
  EXPECT_FALSE(has(a, "--fp8-param-gather"));
  EXPECT_FALSE(has(a, "--fp16"));

  l.fp8_hybrid = false;
  l.fp8_params = true;
  ASSERT_TRUE(l.parallel.use_distributed_optimizer);
  a = train_args(dense, l, c, {});
  EXPECT_TRUE(has(a, "--fp8-format", "e4m3"));
  EXPECT_TRUE(has(a, "--fp8-param-gather"));
  l.parallel.use_distributed_optimizer = false;
  EXPECT_NE(test::error_of([&] {
              train_args(dense, l, c, {});
            }).find("--fp8-param-gather needs the distributed optimizer"),
            std::string::npos);

  const ModelConfig mla = test::model("deepseek-v3");
  Layout mla_fp8 = test::layout(mla, {.world = 64, .tp = 8, .ep = 8, .mbs = 1, .gbs = 1024});
  mla_fp8.precision = Precision::kFP8;  // multi-latent attention's projections in FP8 too
  EXPECT_TRUE(has(train_args(mla, mla_fp8, c, {}), "--fp8-format", "hybrid"));
  mla_fp8.precision = Precision::kBF16;
  EXPECT_FALSE(has(train_args(mla, mla_fp8, c, {}), "--fp8-format"));
  // Megatron's 1F1B overlap of the expert all-to-alls goes into the script when planned.
  EXPECT_FALSE(has(train_args(mla, mla_fp8, c, {}), "--overlap-moe-expert-parallel-comm"));
  mla_fp8.ep_comm_overlap = true;
  EXPECT_TRUE(has(train_args(mla, mla_fp8, c, {}), "--overlap-moe-expert-parallel-comm"));
}

// 126 layers do not divide over 8 stages: the best plan for Llama 3.1 405B at 32K tokens on 128
// H100s (TP8 PP8 CP2) splits them Megatron's way, 15 + 6 x 16 + 15, and its script carries the
// split (emit_roundtrip.sh and top_plans_train.py run such scripts).
TEST(Emit, PlansSplitLayersUnevenly) {
  const ModelConfig m = test::model("llama3.1-405b", {"--seq-length", "32768"});
  const Cluster c = test::gpus("h100-sxm", 128);
  SearchOptions o;
  o.global_batch_size = 512;
  o.grads_fp32 = false;
  const SearchResult r = test::plan(m, c, o);
  ASSERT_FALSE(r.plans.empty());
  const std::vector<std::string> a = train_args(m, r.plans[0].layout, c, {});
  for (const char* flag :
       {"--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"}) {
    const auto it = std::find(a.begin(), a.end(), flag);
    ASSERT_NE(it, a.end()) << flag;
    EXPECT_EQ(*(it + 1), "15") << flag;
  }
}

}  // namespace
}  // namespace mtron::plan
