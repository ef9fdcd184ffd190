// defines: Severity, Finding, IterationRecord, DoctorOptions, LogDevice, LogReport, parse_log,
//          diagnose, format_findings, findings_json, has_problems
//
// `mtron doctor LOG`: reads a training log (mtron's, whose per-iteration line is Megatron's,
// possibly prefixed by "[mtron rR/W] ", or Megatron's own and its forks': launcher prefixes
// such as srun's "3: ", torchrun's "[rank3]:" or "[default7]:", "stdout: "; lines wrapped by a
// terminal; Megatron v1's "lm loss 6.75E+00 | loss scale 64.0 |"; Megatron-DeepSpeed's
// "samples per second" and "TFLOPs"; DeepSpeed's loss-scaler lines) and finds: out-of-memory
// errors, NaN/Inf loss or gradients (a NaN loss is also a missing "lm loss" field: Megatron
// does not print it), loss spikes and divergence, skipped iterations (fp16 overflow; the
// loss-scale warm-up at the start is reported as information), low MFU, throughput drops and
// slowdowns, stragglers, hangs (watchdog/timeout messages, or a log whose timestamps go on
// without iterations), crashes (a Python traceback or a fatal error), and a log without a
// single iteration. Findings are ranked, each with its evidence lines and the fixes for the
// device the run used (CPU or GPU, from the log or the options).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mtron/core/hardware.h"

namespace mtron::plan {

enum class Severity { kCritical, kWarning, kInfo };

struct Finding {
  Severity severity = Severity::kWarning;
  std::string kind;   // oom, nan, divergence, loss_spike, skipped_iterations, loss_scale_warmup,
                      // low_mfu, throughput_drop, straggler, hang, crash, no_iterations,
                      // sdc_transient, sdc_persistent, result_validation_pending
  std::string title;  // one line
  std::vector<std::string> evidence;  // "line N: text"
  std::vector<std::string> fixes;
  double score = 0;  // ranks findings of the same severity
};

struct IterationRecord {
  int64_t line = 0;  // 1-based line number in the log
  int64_t iteration = 0, train_iters = 0;
  double elapsed_ms = -1;  // per iteration
  double tflops = -1;      // throughput per GPU
  double mfu = -1;         // mtron's "MFU: x%" field, as a fraction
  double loss = -1;
  bool has_loss = false;  // the line has an "lm loss" field
  bool loss_nan = false;
  // The line has a field Megatron prints after the losses (loss scale, grad norm, skipped or
  // NaN counts): a missing loss is then missing from a complete line, not cut off.
  bool after_loss_fields = false;
  double grad_norm = -1;
  bool grad_nan = false;
  double loss_scale = -1;
  int64_t skipped = 0, nan_iterations = 0;
  double timestamp = -1;  // seconds since the epoch, when the line has one
  int rank = -1;          // from a rank prefix, when present
};

// The device the log says the run used: mtron's "threads per rank" (CPU) or "one GPU per
// rank", CUDA/NCCL messages (GPU).
enum class LogDevice { kUnknown, kCpu, kGpu };

struct LogReport {
  std::vector<std::string> lines;
  std::vector<IterationRecord> iterations;
  LogDevice device = LogDevice::kUnknown;
};

struct DoctorOptions {
  double expected_tflops = 0;  // a plan's prediction (TFLOP/s per GPU); 0: unknown
  double peak_flops = 0;       // the hardware's MFU denominator; 0: unknown
  std::string peak_name;       // what peak_flops is, for the message
  bool gpu = true;  // thresholds and fixes for GPUs (false: mtron's CPU backend); the log's
                    // own device (LogReport::device) takes precedence
};

LogReport parse_log(const std::vector<std::string>& lines);
std::vector<Finding> diagnose(const LogReport& log, const DoctorOptions& o);
std::string format_findings(const std::string& name,
                            const LogReport& log,
                            const std::vector<Finding>& findings);
nlohmann::json findings_json(const std::vector<Finding>& findings);
// Whether any finding is above information (the doctor's exit code 1).
bool has_problems(const std::vector<Finding>& findings);

}  // namespace mtron::plan
