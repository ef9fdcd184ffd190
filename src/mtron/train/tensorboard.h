// defines: TensorBoardArgs, add_tensorboard_flags, EventFile, TensorBoard
//
// TensorBoard event files, written without TensorBoard or protobuf libraries. An event file
// (events.out.tfevents.<unix time>.<host>.<pid>) is a sequence of TFRecords:
//   uint64 length (little-endian) | uint32 masked_crc32c(those 8 bytes) | data |
//   uint32 masked_crc32c(data)
// with masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 over CRC-32C. Each record's data is a
// serialized tensorflow.Event (event.proto): wall_time = field 1 (double), step = 2 (int64),
// file_version = 3 (string, "brain.Event:2" in the first record), summary = 5 (Summary:
// repeated Value value = 1; Value: tag = 1 (string), simple_value = 2 (float)). Only varints,
// fixed 32/64-bit fields and length-delimited fields occur, which EventFile encodes by hand.
//
// TensorBoard writes Megatron's scalars under Megatron's tags, on the last rank (training_log and
// evaluate_and_print_results in core 0.15): every --tensorboard-log-interval iterations
// `learning-rate`, `decoupled-learning-rate`, `batch-size`, `lm loss` (that iteration's loss),
// `loss-scale` (unless --no-log-loss-scale-to-tensorboard), `world-size`
// (--log-world-size-to-tensorboard), `grad-norm`, the MoE losses, `mem-*`
// (--log-memory-to-tensorboard), each also as `<tag> vs samples` (step = consumed samples) where
// Megatron writes one; at --log-interval `iteration-time` (seconds) and `throughput` (TFLOP/s
// per GPU) with --log-timers-to-tensorboard; after each evaluation `lm loss validation` (and
// `lm loss validation ppl` with --log-validation-ppl-to-tensorboard), with their `vs samples`.
#pragma once

#include <CLI/App.hpp>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mtron/kernels/device.h"

namespace mtron::train {

struct TensorBoardArgs {
  std::string dir;                  // --tensorboard-dir; empty: no event file
  int64_t log_interval = 1;         // --tensorboard-log-interval
  bool log_timers = false;          // --log-timers-to-tensorboard: iteration-time, throughput
  bool log_loss_scale = true;       // --no-log-loss-scale-to-tensorboard clears it
  bool log_validation_ppl = false;  // --log-validation-ppl-to-tensorboard
  bool log_memory = false;          // --log-memory-to-tensorboard: mem-* bytes
  bool log_world_size = false;      // --log-world-size-to-tensorboard
};
void add_tensorboard_flags(CLI::App& app, TensorBoardArgs& a, const char* group);

class EventFile {
 public:
  // Creates `dir` (and parents) and a new event file in it; throws mtron::Error naming the
  // directory when it cannot.
  explicit EventFile(const std::string& dir);
  ~EventFile();
  EventFile(const EventFile&) = delete;
  EventFile& operator=(const EventFile&) = delete;

  void scalar(const std::string& tag, double value, int64_t step);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void record(const std::string& event);

  std::string path_;
  FILE* f_ = nullptr;
};

// One training iteration as Megatron's training_log sees it.
struct TensorBoardStep {
  int64_t iteration = 0, consumed_samples = 0, batch_size = 0;
  double learning_rate = 0;
  std::optional<double> decoupled_learning_rate;
  double lm_loss = 0, loss_scale = 1;
  std::optional<double> grad_norm;  // none on a step the loss scaler skipped
  std::vector<std::pair<std::string, double>> aux_losses;
};

class TensorBoard {
 public:
  TensorBoard(const TensorBoardArgs& a, int64_t world_size, Device device);
  void iteration(const TensorBoardStep& s);
  // At --log-interval: seconds per iteration and TFLOP/s per GPU over the interval.
  void timers(int64_t iteration, double seconds_per_iteration, double tflops_per_device);
  void validation(int64_t iteration, int64_t consumed_samples, double lm_loss);

 private:
  TensorBoardArgs a_;
  int64_t world_size_;
  Device device_;
  EventFile file_;
};

}  // namespace mtron::train
