// defines: Trainer
//
// The training loop: builds this rank's model chunks and optimizer from TrainArgs, feeds
// micro-batches, runs the schedule, reduces gradients, clips, steps and logs in Megatron's
// format.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "mtron/comm/comm.h"
#include "mtron/model/gpt.h"
#include "mtron/optim/optimizer.h"
#include "mtron/train/args.h"
#include "mtron/train/metrics.h"
#include "mtron/train/mock_data.h"

namespace mtron::train {

struct StepResult {
  double lm_loss = 0;    // token-weighted mean over the global batch
  double grad_norm = 0;  // before clipping
  double lr = 0;
  bool skipped = false;
};

class Trainer {
 public:
  Trainer(const TrainArgs& args, Comm& world);
  ~Trainer();

  // Trains args.train_iters iterations, logging every --log-interval.
  void run();
  // One iteration (1-based index = completed + 1).
  StepResult step();

  int64_t iteration() const { return iteration_; }
  int64_t consumed_samples() const { return consumed_samples_; }
  std::vector<std::unique_ptr<model::GPTChunk>>& chunks() { return chunks_; }
  const model::RunCtx& run_ctx() const { return rc_; }
  // Builds micro-batch `j` of the current iteration for this rank.
  model::MicroBatch microbatch(int64_t j) const;

 private:
  void build_model();
  double learning_rate(int64_t samples) const;

  TrainArgs a_;
  Comm& world_;
  model::RunCtx rc_;
  std::vector<std::unique_ptr<model::GPTChunk>> chunks_;
  std::unique_ptr<optim::AdamW> optimizer_;
  std::unique_ptr<MockData> mock_;
  std::vector<model::GPTChunk::Stash> stashes_;
  std::unique_ptr<MetricsWriter> metrics_;
  int64_t iteration_ = 0, consumed_samples_ = 0;
};

// `mtron train` entry point: returns the process exit code.
int train_main(int argc, char** argv);

}  // namespace mtron::train
