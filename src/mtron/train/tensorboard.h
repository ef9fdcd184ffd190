// defines: TensorBoardArgs, add_tensorboard_flags, wandb_dir, validate_wandb_flags, EventFile,
//          TensorBoard
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
//
// Weights & Biases: Megatron's --wandb-project sends the same scalars to W&B from the last rank.
// mtron does not talk to W&B; with --wandb-project it writes the event stream a second time into
// W&B's directory (wandb_dir), from where `wandb sync --sync-tensorboard` uploads it.
#pragma once

#include <CLI/App.hpp>
#include <cstdint>
#include <cstdio>
#include <memory>
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
  // --wandb-project (empty: no W&B), --wandb-exp-name (needed with a project, as in Megatron),
  // --wandb-entity, --wandb-save-dir.
  std::string wandb_project, wandb_exp_name, wandb_entity, wandb_save_dir;
};
void add_tensorboard_flags(CLI::App& app, TensorBoardArgs& a, const char* group);
// Where the W&B copy of the event stream goes: --wandb-save-dir, else <save>/wandb (Megatron's
// wandb.init dir); empty without --wandb-project.
std::string wandb_dir(const TensorBoardArgs& a, const std::string& save);
// Megatron's rule (a project needs a run name) and a directory to write to; the note that says
// where the W&B scalars go and how to upload them.
void validate_wandb_flags(const TensorBoardArgs& a,
                          const std::string& save,
                          std::vector<std::string>& notes);

class EventFile {
 public:
  // Creates `dir` (and parents) and a new event file in it; throws mtron::Error naming the
  // flag that set the directory, and the directory, when it cannot.
  EventFile(const std::string& dir, const std::string& flag);
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

// The event stream, written to --tensorboard-dir and to the W&B directory (those set).
class TensorBoard {
 public:
  // save: --save (the W&B directory's default parent).
  TensorBoard(const TensorBoardArgs& a, const std::string& save, int64_t world_size, Device device);
  void iteration(const TensorBoardStep& s);
  // At --log-interval: seconds per iteration and TFLOP/s per GPU over the interval.
  void timers(int64_t iteration, double seconds_per_iteration, double tflops_per_device);
  void validation(int64_t iteration, int64_t consumed_samples, double lm_loss);

 private:
  void scalar(const std::string& tag, double value, int64_t step);
  void flush();

  TensorBoardArgs a_;
  int64_t world_size_;
  Device device_;
  std::vector<std::unique_ptr<EventFile>> files_;
};

}  // namespace mtron::train
