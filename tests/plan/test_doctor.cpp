// `mtron doctor` on the synthetic logs of tests/plan/data (make_logs.py): each planted problem
// is found (and is the top finding), nothing else is raised, and healthy logs raise nothing.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "mtron/plan/doctor.h"

namespace mtron::plan {
namespace {

LogReport load(const std::string& name) {
  std::ifstream in(std::string(MTRON_TEST_DATA) + "/" + name);
  EXPECT_TRUE(in) << name;
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return parse_log(lines);
}

DoctorOptions h100() {
  DoctorOptions o;
  o.peak_flops = find_hardware("h100-sxm").mfu_peak_flops(Precision::kBF16);
  o.peak_name = "H100 bf16";
  return o;
}

std::set<std::string> kinds(const std::vector<Finding>& f) {
  std::set<std::string> k;
  for (const auto& x : f) k.insert(x.kind);
  return k;
}

struct Case {
  const char* log;
  const char* kind;
};

TEST(Doctor, FindsEachPlantedProblemAndNothingElse) {
  const Case cases[] = {{"oom.log", "oom"},
                        {"oom_mtron.log", "oom"},
                        {"divergence.log", "divergence"},
                        {"loss_spike.log", "loss_spike"},
                        {"nan.log", "nan"},
                        {"skipped_fp16.log", "skipped_iterations"},
                        {"low_mfu.log", "low_mfu"},
                        {"straggler.log", "straggler"},
                        {"straggler_mtron.log", "straggler"},
                        {"hang.log", "hang"},
                        {"hang_silent.log", "hang"},
                        {"throughput_drop.log", "throughput_drop"}};
  for (const Case& c : cases) {
    const LogReport log = load(c.log);
    const std::vector<Finding> f = diagnose(log, h100());
    std::printf("%s", format_findings(c.log, log, f).c_str());
    ASSERT_FALSE(f.empty()) << c.log;
    EXPECT_EQ(f[0].kind, c.kind) << c.log;
    EXPECT_EQ(kinds(f), std::set<std::string>{c.kind}) << c.log;
    EXPECT_FALSE(f[0].evidence.empty()) << c.log;
    EXPECT_FALSE(f[0].fixes.empty()) << c.log;
    for (const auto& e : f[0].evidence) EXPECT_EQ(e.rfind("line ", 0), 0u) << e;
  }
}

TEST(Doctor, HealthyLogsRaiseNothing) {
  for (const char* name : {"healthy.log", "healthy_mtron.log"}) {
    const LogReport log = load(name);
    EXPECT_EQ(log.iterations.size(), 200u) << name;
    const std::vector<Finding> f = diagnose(log, h100());
    EXPECT_TRUE(f.empty()) << format_findings(name, log, f);
    EXPECT_TRUE(diagnose(log, DoctorOptions{}).empty()) << name;
  }
}

TEST(Doctor, LowMfuAgainstThePlansPrediction) {
  const LogReport log = load("healthy.log");  // ~408 TFLOP/s/GPU
  DoctorOptions o;
  o.expected_tflops = 600;  // the plan promised more
  const std::vector<Finding> f = diagnose(log, o);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].kind, "low_mfu");
  EXPECT_NE(f[0].title.find("predicted by the plan"), std::string::npos);
  o.expected_tflops = 420;  // within 25% of the prediction: fine
  EXPECT_TRUE(diagnose(log, o).empty());
}

TEST(Doctor, ParsesMegatronsLine) {
  const LogReport log = parse_log(
      {"[mtron r7/8]  [2024-06-01 10:00:05.123456] iteration       10/    1000 | consumed "
       "samples:          640 | elapsed time per iteration (ms): 1234.5 | throughput per GPU "
       "(TFLOP/s/GPU): 400.1 | learning rate: 1.000000E-04 | global batch size:    64 | lm "
       "loss: 9.123456E+00 | loss scale: 1.0 | grad norm: nan | number of skipped iterations: "
       "  2 | number of nan iterations:   1 |"});
  ASSERT_EQ(log.iterations.size(), 1u);
  const IterationRecord& r = log.iterations[0];
  EXPECT_EQ(r.iteration, 10);
  EXPECT_EQ(r.train_iters, 1000);
  EXPECT_DOUBLE_EQ(r.elapsed_ms, 1234.5);
  EXPECT_DOUBLE_EQ(r.tflops, 400.1);
  EXPECT_DOUBLE_EQ(r.loss, 9.123456);
  EXPECT_TRUE(r.grad_nan);
  EXPECT_EQ(r.skipped, 2);
  EXPECT_EQ(r.nan_iterations, 1);
  EXPECT_EQ(r.rank, 7);
  EXPECT_NEAR(r.timestamp - 1717236005.0, 0.123456, 1e-6);
}

}  // namespace
}  // namespace mtron::plan
