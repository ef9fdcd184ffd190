// defines: Severity, Finding, IterationRecord, DoctorOptions, LogReport, parse_log, diagnose,
//          format_findings, findings_json
//
// `mtron doctor LOG`: reads a training log (mtron's, whose per-iteration line is Megatron's,
// possibly prefixed by "[mtron rR/W] ", or Megatron's own, with srun/torchrun rank prefixes)
// and finds: out-of-memory errors (PyTorch/CUDA, std::bad_alloc, the kernel's OOM killer),
// NaN/Inf loss or gradients, loss spikes and divergence, skipped iterations (fp16 overflow),
// low MFU (against a plan's prediction or the hardware peak), throughput drops, stragglers
// (Megatron's timers and straggler detector), hangs (watchdog/timeout messages, or a log that
// stops making progress). Findings are ranked, each with its evidence lines and the fixes.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mtron/core/hardware.h"

namespace mtron::plan {

enum class Severity { kCritical, kWarning };

struct Finding {
  Severity severity = Severity::kWarning;
  std::string kind;   // oom, nan, divergence, loss_spike, skipped_iterations, low_mfu,
                      // throughput_drop, straggler, hang
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
  double loss = -1;
  bool loss_nan = false;
  double grad_norm = -1;
  bool grad_nan = false;
  double loss_scale = -1;
  int64_t skipped = 0, nan_iterations = 0;
  double timestamp = -1;  // seconds since the epoch, when the line has one
  int rank = -1;          // from a rank prefix, when present
};

struct LogReport {
  std::vector<std::string> lines;
  std::vector<IterationRecord> iterations;
};

struct DoctorOptions {
  double expected_tflops = 0;  // a plan's prediction (TFLOP/s per GPU); 0: unknown
  double peak_flops = 0;       // the hardware's MFU denominator; 0: unknown
  std::string peak_name;       // what peak_flops is, for the message
  bool gpu = true;             // thresholds for GPUs (false: mtron's CPU backend)
};

LogReport parse_log(const std::vector<std::string>& lines);
std::vector<Finding> diagnose(const LogReport& log, const DoctorOptions& o);
std::string format_findings(const std::string& name,
                            const LogReport& log,
                            const std::vector<Finding>& findings);
nlohmann::json findings_json(const std::vector<Finding>& findings);

}  // namespace mtron::plan
