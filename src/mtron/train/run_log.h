// defines: RunLog
//
// Where the last rank's training log goes, as Megatron's training_log and
// evaluate_and_print_results send it: the per-iteration line and the evaluation blocks on
// stdout (metrics.h), the JSONL metrics file when one is set (metrics_path), the TensorBoard
// event file with --tensorboard-dir (tensorboard.h).
#pragma once

#include <memory>
#include <string>

#include "mtron/train/args.h"
#include "mtron/train/metrics.h"
#include "mtron/train/tensorboard.h"

namespace mtron::train {

class RunLog {
 public:
  // resumed: training continues from a checkpoint (the metrics file is appended to).
  RunLog(const TrainArgs& a, int64_t world_size, bool resumed);
  // After every iteration (TensorBoard's --tensorboard-log-interval points).
  void step(const TensorBoardStep& s);
  // At --log-interval: the log line, its JSONL record, TensorBoard's timers.
  void interval(const IterationLog& l);
  // After an evaluation of the validation split; `where` as Megatron prints it.
  void validation(const std::string& where, int64_t iteration, int64_t consumed, double loss);

 private:
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<TensorBoard> tensorboard_;
};

}  // namespace mtron::train
