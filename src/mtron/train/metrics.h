// defines: IterationLog, format_iteration_line, format_memory_report, device_peak_flops,
//          MetricsWriter
//
// The per-iteration log line in Megatron's format (training_log in training.py), so
// existing log tooling and `mtron doctor` read it, followed by mtron's extra fields
// (tokens/s, MFU against the stated peak, peak memory).
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mtron/kernels/device.h"

namespace mtron::train {

struct IterationLog {
  int64_t iteration = 0, train_iters = 0, consumed_samples = 0, global_batch_size = 0;
  double elapsed_ms = 0;  // per iteration, averaged over the interval
  double tflops_per_device = 0;
  double learning_rate = 0;
  std::optional<double> decoupled_learning_rate;  // --decoupled-lr
  double lm_loss = 0;                             // averaged over the interval
  // Megatron's MoE and MTP loss fields, printed after lm loss ("load_balancing_loss", "z_loss",
  // "mtp_1 loss", ...), averaged over the interval.
  std::vector<std::pair<std::string, double>> aux_losses;
  double loss_scale = 1.0;  // the loss scaler's (after the last iteration's update); 1 without
  // The last iteration's; none when the loss scaler skipped it (Megatron prints none). JSONL:
  // null when none or not finite.
  std::optional<double> grad_norm;
  int64_t skipped_iterations = 0, nan_iterations = 0;
  double tokens_per_s_per_device = 0;
  double mfu = 0;  // fraction
  double peak_memory_mb = 0;
  std::vector<std::pair<std::string, double>> extra;  // JSONL only (e.g. MoE dropped tokens)
};

std::string format_iteration_line(const IterationLog& l);
// Megatron's report_memory line: "[Rank r] (after i iterations) memory (MB) | allocated: ... |
// max allocated: ... | reserved: ... | max reserved: ...".
std::string format_memory_report(int rank, int64_t iteration, const kernels::DeviceMemory& m);

// Megatron's evaluation block: a dashed rule, " validation loss at <where> | lm loss value: ...
// | lm loss PPL: ... | ", a dashed rule.
std::string format_eval_block(const std::string& where, double loss);

// One JSON object per line. The file is opened at the first record (a run that fails before its
// first iteration leaves it as it was): truncated for a fresh run, appended to when resuming.
class MetricsWriter {
 public:
  MetricsWriter(std::string path, bool append);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void write(const IterationLog& l);
  void write_eval(int64_t iteration, double loss);

 private:
  FILE* open();

  std::string path_;
  bool append_ = false;
  FILE* f_ = nullptr;
};

}  // namespace mtron::train
