// defines: BatchSchedule
//
// The global batch size of each iteration, as Megatron's num-microbatches calculators compute it
// from the samples consumed so far:
//   constant                        --global-batch-size
//   --rampup-batch-size S I N       (core 0.15's RampupBatchsizeNumMicroBatchesCalculator) S
//                                   first, then S + k I after k (N / ((G - S) / I)) samples, G
//                                   once more than N samples are consumed; sample-based only
//   --step-batch-size-schedule "T:B ..."  (Megatron-LM's StepBatchsizeNumMicroBatchesCalculator)
//                                   B from T consumed tokens on (suffixes K M B T; thresholds in
//                                   tokens, converted to samples by the sequence length)
// and the iteration count of a sample-based run (Megatron's update_train_iters).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mtron/core/parallel_config.h"

namespace mtron::train {

class BatchSchedule {
 public:
  BatchSchedule() = default;
  // Constant, or (rampup non-empty: start, increment, samples) ramping up to `global`.
  static BatchSchedule constant(int64_t global);
  static BatchSchedule rampup(int64_t start, int64_t increment, int64_t samples, int64_t global);
  // Parses Megatron's schedule string; thresholds in tokens, seq_length per sample.
  static BatchSchedule steps(const std::string& schedule, int64_t seq_length);

  int64_t batch_size_at(int64_t consumed_samples) const;
  int64_t final_batch_size() const;
  bool varies() const { return !rampup_.empty() || steps_.size() > 1; }
  // Megatron's update_train_iters for --train-samples.
  int64_t iterations_for(int64_t train_samples) const;
  // Every batch size the schedule can use must split into micro-batches of par's size over its
  // data-parallel ranks (and, interleaved, into groups by par.check_microbatch_groups):
  // Megatron's messages, thrown as mtron::Error.
  void validate(const ParallelConfig& par) const;
  std::string describe() const;  // for the start-up log

 private:
  int64_t global_ = 0;
  std::vector<int64_t> rampup_;                     // start, increment, samples
  std::vector<std::pair<int64_t, int64_t>> steps_;  // (threshold samples, batch size)
};

}  // namespace mtron::train
