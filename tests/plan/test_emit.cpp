// Launch scripts: every flag, parseable model flags, and scripts bash accepts.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

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
  const Cluster c = test::gpus("h100-sxm", 64);
  const SearchResult r = test::plan(m, c, o);
  ASSERT_FALSE(r.plans.empty());
  const Layout& l = r.plans[0].layout;
  TrainingArgs t;
  t.data_args = {"--data-path",     "/data/corpus_text_document", "--tokenizer-type",
                 "Llama2Tokenizer", "--tokenizer-model",          "/data/tokenizer.model"};
  t.save = "/ckpt";
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
  EXPECT_TRUE(has(a, "--data-path", "/data/corpus_text_document"));
  EXPECT_TRUE(has(a, "--save", "/ckpt"));
  EXPECT_TRUE(has(a, "--save-interval"));
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
  EXPECT_NE(srun.find("srun --nodes=8 --ntasks-per-node=8 --gpus-per-node=8"), std::string::npos);
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

}  // namespace
}  // namespace mtron::plan
