// `mtron doctor` on the synthetic logs of tests/plan/data (make_logs.py): each planted problem
// is found (and is the top finding), nothing else above information is raised, and healthy
// logs raise nothing; and on the real logs of tests/plan/data/real (corpus.tsv, README.md):
// the first finding names the problem the thread reported, healthy runs raise nothing above
// information.
#include <gtest/gtest.h>

#include <fmt/core.h>

#include <fstream>
#include <set>
#include <sstream>

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

// The kinds of the findings above information.
std::set<std::string> kinds(const std::vector<Finding>& f) {
  std::set<std::string> k;
  for (const auto& x : f)
    if (x.severity != Severity::kInfo) k.insert(x.kind);
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
                        {"throughput_drop.log", "throughput_drop"},
                        {"grad_explosion.log", "divergence"}};
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
    EXPECT_FALSE(has_problems(f)) << format_findings(name, log, f);
    EXPECT_FALSE(has_problems(diagnose(log, DoctorOptions{}))) << name;
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

TEST(Doctor, LowMfuFromMtronsOwnField) {
  std::vector<std::string> lines;
  for (int it = 1; it <= 10; ++it)
    lines.push_back(fmt::format(
        "[mtron r0/1]  [2026-11-30 11:38:{:02d}] iteration {:8d}/      10 | elapsed time per "
        "iteration (ms): 12355.8 | throughput per GPU (TFLOP/s/GPU): 0.016 | lm loss: {:.6E} | "
        "MFU: 5.27% |",
        10 + it, it, 10.0 - 0.1 * it));
  const std::vector<Finding> f = diagnose(parse_log(lines), DoctorOptions{});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].kind, "low_mfu");
  EXPECT_NE(f[0].title.find("5.3% MFU"), std::string::npos) << f[0].title;
}

TEST(Doctor, ParsesMegatronsLine) {
  const LogReport log = parse_log(
      {"[mtron r7/8]  [2024-06-01 10:00:05.123456] iteration       10/    1000 | consumed "
       "samples:          640 | elapsed time per iteration (ms): 1234.5 | throughput per GPU "
       "(TFLOP/s/GPU): 400.1 | learning rate: 1.000000E-04 | global batch size:    64 | lm "
       "loss: 9.123456E+00 | loss scale: 1.0 | grad norm: nan | number of skipped iterations: "
       "  2 | number of nan iterations:   1 | tokens per second per GPU: 68.5 | MFU: 4.36% |"});
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
  EXPECT_DOUBLE_EQ(r.mfu, 0.0436);  // mtron's extra field
  EXPECT_NEAR(r.timestamp - 1717236005.0, 0.123456, 1e-6);
}

struct RealLog {
  std::string file, expected, source;
};

std::vector<RealLog> corpus() {
  std::ifstream in(std::string(MTRON_TEST_DATA) + "/real/corpus.tsv");
  EXPECT_TRUE(in);
  std::vector<RealLog> out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    RealLog r;
    std::getline(ss, r.file, '\t');
    std::getline(ss, r.expected, '\t');
    std::getline(ss, r.source, '\t');
    out.push_back(r);
  }
  return out;
}

TEST(Doctor, RealLogsFirstFindingNamesTheProblem) {
  const std::vector<RealLog> logs = corpus();
  ASSERT_GE(logs.size(), 12u);
  for (const RealLog& r : logs) {
    const LogReport log = load("real/" + r.file);
    const std::vector<Finding> f = diagnose(log, DoctorOptions{});
    std::printf("%s", format_findings(r.file, log, f).c_str());
    if (log.device == LogDevice::kCpu) {  // the advice follows the device
      for (const Finding& x : f)
        for (const std::string& fix : x.fixes)
          for (const char* gpu : {"nvidia-smi", "NCCL", "CUDA", "NVLink"}) {
            EXPECT_EQ(fix.find(gpu), std::string::npos) << r.file << ": " << fix;
          }
    }
    if (r.expected == "healthy") {
      EXPECT_FALSE(has_problems(f)) << r.file;
      continue;
    }
    ASSERT_FALSE(f.empty()) << r.file;
    EXPECT_EQ(f[0].kind, r.expected) << r.file << ": " << f[0].title;
    EXPECT_NE(f[0].severity, Severity::kInfo) << r.file;
  }
}

// The formats of real logs: Megatron v1's fields without colons (the format string of
// Megatron-LM's first pretrain_bert.py: ' lm loss {:.3E} |', ' loss scale {:.1f} |'), torchrun's
// "[defaultN]:" prefix, a line the terminal wrapped, Megatron-DeepSpeed's TFLOPs field,
// elapsed time in seconds, "NAN" spelt out.
TEST(Doctor, ParsesTheFormatsOfRealLogs) {
  const LogReport v1 = parse_log(
      {" epoch 0 | iteration      100/  500000 | elapsed time per iteration (ms): 520.3 | "
       "learning rate 1.500E-04 | lm loss 6.750E+00 | nsp loss 6.931E-01 | loss scale 64.0 |",
       " epoch 0 | iteration      200/  500000 | elapsed time per iteration (ms): 518.9 | "
       "learning rate 1.500E-04 | lm loss NAN | nsp loss 6.931E-01 | loss scale 32.0 |"});
  ASSERT_EQ(v1.iterations.size(), 2u);
  EXPECT_DOUBLE_EQ(v1.iterations[0].loss, 6.75);
  EXPECT_DOUBLE_EQ(v1.iterations[0].loss_scale, 64.0);
  EXPECT_TRUE(v1.iterations[1].loss_nan);
  EXPECT_EQ(diagnose(v1, DoctorOptions{})[0].kind, "nan");

  // A line of epfllm_11_slowdown.log wrapped after "lm lo", under torchrun's prefix.
  const LogReport wrapped = parse_log(
      {"[default7]: iteration      102/  250000 | consumed samples:       104448 | elapsed time "
       "per iteration (s): 73.2927 | learning rate: 7.650E-06 | global batch size:  1024 | lm lo",
       "ss: 2.491204E+00 | loss scale: 1.0 | grad norm: 0.272 | number of skipped iterations:   "
       "0 | number of nan iterations:   0 | TFLOPs: 78.46 |"});
  ASSERT_EQ(wrapped.iterations.size(), 1u);
  const IterationRecord& r = wrapped.iterations[0];
  EXPECT_EQ(r.rank, 7);
  EXPECT_DOUBLE_EQ(r.elapsed_ms, 73292.7);
  EXPECT_DOUBLE_EQ(r.loss, 2.491204);
  EXPECT_DOUBLE_EQ(r.grad_norm, 0.272);
  EXPECT_DOUBLE_EQ(r.tflops, 78.46);

  // A field cut off at the end of a line is not read ("lm loss: 2" of "lm loss: 2.49E+00").
  const LogReport cut =
      parse_log({" iteration      106/  250000 | elapsed time per iteration "
                 "(ms): 76078.6 | global batch size:  1024 | lm loss: 2"});
  ASSERT_EQ(cut.iterations.size(), 1u);
  EXPECT_FALSE(cut.iterations[0].has_loss);
}

// Megatron's result validation (--rerun-mode validate_results), its lines as core_v0.15.0's
// megatron/core/rerun_state_machine.py logs them (Python logging's LEVEL:name:message, which
// Megatron's functional tests gpt3_mr_mcore_reruns_* grep for): each outcome of the recomputed
// iteration is named, the suspicious GPU where the line names it; an injected error is
// information only, and the rejected check's message ("found NaN ...") is no NaN by itself.
TEST(Doctor, ResultValidationOutcomes) {
  const std::string w = "WARNING:megatron.core.rerun_state_machine:";
  const std::string e = "ERROR:megatron.core.rerun_state_machine:";
  const std::string at = "Rank 3, node dgx-017, device 3, iteration #5: ";
  const std::vector<std::string> head = {
      w + "Result validation enabled",
      " [2025-03-02 10:14:07] iteration        4/      50 | consumed samples:          512 | "
      "elapsed time per iteration (ms): 2048.1 | learning rate: 3.000000E-04 | global batch "
      "size:   128 | lm loss: 1.083012E+01 | loss scale: 1.0 | grad norm: 2.314 | number of "
      "skipped iterations:   0 | number of nan iterations:   0 |"};
  auto run = [&](const std::string& result, std::vector<std::string> tail) {
    std::vector<std::string> lines = head;
    lines.push_back(e + "Unexpected result " + result +
                    " on rank 3 at iteration #5 invocation #1 (message='found NaN in local "
                    "forward loss calculation')");
    lines.push_back(w + "Need to rerun step to check reproducibility of initial result");
    lines.insert(lines.end(), tail.begin(), tail.end());
    return diagnose(parse_log(lines), h100());
  };
  const auto transient =
      run("nan", {e + at +
                      "First rerun: unexpected result is not reproducible within the tolerance "
                      "(10.830118 != nan)!",
                  e + at + "Possible transient error!!",
                  w + "Exiting now. The job can be resumed from a previous checkpoint"});
  EXPECT_EQ(transient[0].kind, "sdc_transient");
  EXPECT_NE(transient[0].title.find("node dgx-017, device 3"), std::string::npos);
  const auto pending = run(
      "nan", {e + at +
                  "First rerun: unexpected result is reproducible within the tolerance (nan = "
                  "nan). Need to rerun on a different GPU to verify correctness.!",
              w + "Saving a checkpoint and exiting now. Please resume the job from the checkpoint "
                  "to rerun the last iteration and establish a diagnostic"});
  EXPECT_EQ(pending[0].kind, "result_validation_pending");
  EXPECT_NE(pending[0].fixes[0].find("on another node"), std::string::npos);
  const std::string other = "Rank 3, node dgx-022, device 1, iteration #5: ";
  const auto persistent =
      run("nan", {w + "Second rerun: unexpected result is not reproducible on a different GPU, "
                      "therefore was likely incorrect (10.830118 != nan)",
                  e + other + "Possible persistent error!!"});
  EXPECT_EQ(persistent[0].kind, "sdc_persistent");
  EXPECT_EQ(persistent[0].title.find("dgx-022"), std::string::npos);  // the healthy GPU
  const auto real =
      run("nan", {w + "Second rerun: unexpected result is reproducible on a different GPU, "
                      "therefore it was likely correct (nan = nan)",
                  e + other +
                      "Correct result (but possible Application error) (found NaN in local forward "
                      "loss calculation)!"});
  EXPECT_EQ(real[0].kind, "divergence");
  const auto injected = run(
      "10.830118", {w + "Injecting error type Transient error",
                    e + at +
                        "First rerun: unexpected result is not reproducible within the tolerance "
                        "(10.830118 != 10.830118)!",
                    e + at + "Possible transient error!!"});
  EXPECT_EQ(injected[0].kind, "sdc_transient");
  EXPECT_EQ(injected[0].severity, Severity::kInfo);
  EXPECT_FALSE(has_problems(injected)) << injected[0].title;
}

// The advice follows the device: mtron's CPU trainer says "threads per rank" (trainer.cpp's
// "precision: ...; MFU against ..." line), and its out-of-memory fixes then name no GPU tools.
TEST(Doctor, AdviceFollowsTheDevice) {
  const std::vector<std::string> lines = {
      "[mtron r0/2] precision: fp32; MFU against local-cpu fp32 dense peak 0.1 TFLOP/s per rank "
      "(1 threads per rank)",
      "[mtron r0/2] terminate called after throwing an instance of 'std::bad_alloc'"};
  const LogReport cpu = parse_log(lines);
  EXPECT_EQ(cpu.device, LogDevice::kCpu);
  const std::vector<Finding> f = diagnose(cpu, DoctorOptions{});
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(f[0].kind, "oom");
  std::string all;
  for (const auto& x : f[0].fixes) all += x + "\n";
  EXPECT_NE(all.find("MPI ranks"), std::string::npos) << all;
  for (const char* gpu : {"CUDA", "nvidia-smi", "NCCL", "NVLink"})
    EXPECT_EQ(all.find(gpu), std::string::npos) << gpu << " in CPU advice:\n" << all;
  // The same log from a GPU run gets the GPU advice.
  const std::vector<Finding> g = diagnose(parse_log({lines[1]}), DoctorOptions{});
  ASSERT_FALSE(g.empty());
  std::string gpu_fixes;
  for (const auto& x : g[0].fixes) gpu_fixes += x;
  EXPECT_NE(gpu_fixes.find("CUDA"), std::string::npos);
}

}  // namespace
}  // namespace mtron::plan
