#include "mtron/train/metrics.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "mtron/core/error.h"

namespace mtron::train {

std::string format_iteration_line(const IterationLog& l) {
  const std::time_t now = std::time(nullptr);
  // Megatron prints {:.1f}; CPU throughputs are far below 1 TFLOP/s: keep 3 significant digits.
  const std::string tflops = l.tflops_per_device >= 10 ? fmt::format("{:.1f}", l.tflops_per_device)
                                                       : fmt::format("{:.3g}", l.tflops_per_device);
  std::string aux;  // Megatron: each MoE and MTP loss as " name: {:.6E} |" after lm loss
  for (const auto& [name, value] : l.aux_losses) aux += fmt::format(" {}: {:.6E} |", name, value);
  const std::string decoupled =  // Megatron: after the learning rate, with --decoupled-lr
      l.decoupled_learning_rate
          ? fmt::format(" decoupled learning rate: {:.6E} |", *l.decoupled_learning_rate)
          : "";
  // Megatron: no grad norm when the loss scaler skipped the step
  const std::string grad_norm =
      l.grad_norm ? fmt::format(" grad norm: {:.3f} |", *l.grad_norm) : "";
  return fmt::format(
      " [{:%Y-%m-%d %H:%M:%S}] iteration {:8d}/{:8d} | consumed samples: {:12d} | elapsed time "
      "per iteration (ms): {:.1f} | throughput per GPU (TFLOP/s/GPU): {} | learning rate: "
      "{:.6E} |{} global batch size: {:5d} | lm loss: {:.6E} |{} loss scale: {:.1f} |{} number "
      "of skipped iterations: {:3d} | number of nan iterations: {:3d} | tokens "
      "per second per GPU: {:.1f} | MFU: {:.2f}% | peak memory (MB): {:.1f} |",
      fmt::localtime(now), l.iteration, l.train_iters, l.consumed_samples, l.elapsed_ms, tflops,
      l.learning_rate, decoupled, l.global_batch_size, l.lm_loss, aux, l.loss_scale, grad_norm,
      l.skipped_iterations, l.nan_iterations, l.tokens_per_s_per_device, 100.0 * l.mfu,
      l.peak_memory_mb);
}

std::string format_memory_report(int rank, int64_t iteration, const kernels::DeviceMemory& m) {
  constexpr double kMB = 1024.0 * 1024.0;
  return fmt::format(
      "[Rank {}] (after {} iterations) memory (MB) | allocated: {} | max allocated: {} | "
      "reserved: {} | max reserved: {}",
      rank, iteration, double(m.allocated) / kMB, double(m.max_allocated) / kMB,
      double(m.reserved) / kMB, double(m.max_reserved) / kMB);
}

std::string format_eval_block(const std::string& where, double loss) {
  const std::string line =
      fmt::format(" validation loss at {} | lm loss value: {:.6E} | lm loss PPL: {:.6E} | ", where,
                  loss, std::exp(std::min(20.0, loss)));
  const std::string rule(line.size() + 1, '-');
  return rule + "\n" + line + "\n" + rule;
}

MetricsWriter::MetricsWriter(std::string path, bool append)
    : path_(std::move(path)), append_(append) {}

FILE* MetricsWriter::open() {
  if (f_) return f_;
  const std::filesystem::path dir = std::filesystem::path(path_).parent_path();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  f_ = std::fopen(path_.c_str(), append_ ? "a" : "w");
  MT_CHECK(f_, "cannot write the metrics file ", path_, ": ", std::strerror(errno),
           " (set --metrics-file)");
  return f_;
}

MetricsWriter::~MetricsWriter() {
  if (f_) std::fclose(f_);
}

void MetricsWriter::write(const IterationLog& l) {
  FILE* f = open();
  fmt::print(
      f,
      "{{\"iteration\": {}, \"consumed_samples\": {}, \"lm_loss\": {:.9g}, "
      "\"learning_rate\": {:.9g}, \"grad_norm\": {}, \"elapsed_ms\": {:.3f}, "
      "\"tflops_per_device\": {:.6g}, \"tokens_per_s_per_device\": {:.3f}, \"mfu\": {:.6g}, "
      "\"peak_memory_mb\": {:.3f}, \"skipped_iterations\": {}, \"nan_iterations\": {}, "
      "\"loss_scale\": {:.17g}",
      l.iteration, l.consumed_samples, l.lm_loss, l.learning_rate,
      l.grad_norm && std::isfinite(*l.grad_norm) ? fmt::format("{:.9g}", *l.grad_norm) : "null",
      l.elapsed_ms, l.tflops_per_device, l.tokens_per_s_per_device, l.mfu, l.peak_memory_mb,
      l.skipped_iterations, l.nan_iterations, l.loss_scale);
  if (l.decoupled_learning_rate)
    fmt::print(f, ", \"decoupled_learning_rate\": {:.9g}", *l.decoupled_learning_rate);
  for (const auto& [name, value] : l.aux_losses) fmt::print(f, ", \"{}\": {:.9g}", name, value);
  for (const auto& [name, value] : l.extra) fmt::print(f, ", \"{}\": {:.17g}", name, value);
  fmt::print(f, "}}\n");
  std::fflush(f);
}

void MetricsWriter::write_eval(int64_t iteration, double loss) {
  FILE* f = open();
  fmt::print(f, "{{\"iteration\": {}, \"eval_lm_loss\": {:.9g}}}\n", iteration, loss);
  std::fflush(f);
}

}  // namespace mtron::train
