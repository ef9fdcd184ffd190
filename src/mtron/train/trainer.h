// defines: Trainer, train_main
//
// The training loop: builds this rank's model chunks (its pipeline stage, and its virtual
// stages when interleaved) and optimizer from TrainArgs and the ParallelState, and per step
// runs the pipeline schedule over the micro-batches (stages.h; sampled by data/sampler.h),
// completes the gradients (ddp.h: tied embeddings, data parallel, sequence parallel), clips,
// steps, evaluates, checkpoints and logs (run_log.h, in Megatron's format). The device and its
// NCCL groups come from the launch layer (parallel/launch.h: init_rank_device).
//
// Loss weighting: each token's loss enters the gradient with weight 1 / (tokens in the global
// batch), so the data-parallel reduction is a plain sum and the loss is Megatron's token-
// weighted mean over the global batch for every layout. With a loss scaler (--fp16;
// optim/grad_scaler.h) that weight (and the MoE auxiliary losses' gradients) is multiplied by the
// loss scale; after the gradients are complete they are unscaled, and a non-finite global
// gradient norm is the found-inf of every rank (the norm is summed over the world, so it is
// infinite or NaN on all ranks as soon as one rank holds an infinite or NaN gradient): the step
// is skipped. A skipped step (for any reason) leaves the weights, the optimizer state and the
// learning-rate schedule as they were; the iteration and the consumed samples advance, as
// Megatron's.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "mtron/checkpoint/checkpointer.h"
#include "mtron/comm/comm.h"
#include "mtron/data/dataset_builder.h"
#include "mtron/model/gpt.h"
#include "mtron/optim/grad_scaler.h"
#include "mtron/optim/optimizer.h"
#include "mtron/parallel/parallel_state.h"
#include "mtron/train/args.h"
#include "mtron/train/grad_sync.h"
#include "mtron/train/interval.h"
#include "mtron/train/run_log.h"

namespace mtron::train {

class Trainer {
 public:
  // ranks_per_node: how many ranks share this node's cores (the MFU denominator of one rank).
  Trainer(const TrainArgs& args, Comm& world, int ranks_per_node = 1);
  ~Trainer();

  // Trains args.train_iters iterations, logging every --log-interval.
  void run();
  // One iteration (1-based index = completed + 1).
  StepResult step();

  int64_t iteration() const { return iteration_; }
  int64_t consumed_samples() const { return consumed_samples_; }
  const ParallelState& parallel_state() const { return *ps_; }
  std::vector<std::unique_ptr<model::GPTChunk>>& chunks() { return chunks_; }
  const model::RunCtx& run_ctx() const { return rc_; }
  const optim::Optimizer& optimizer() const { return *optimizer_; }
  // Micro-batch `j` of the global batch that starts at sample `base` of a split, as this rank
  // sees it (its data-parallel slice); without a split: the current training iteration's.
  model::MicroBatch microbatch(data::Split split, int64_t base, int64_t j);
  model::MicroBatch microbatch(int64_t j) {
    return microbatch(data::Split::kTrain, consumed_samples_, j);
  }
  // Mean loss over `iters` global batches of a split (forward only), continuing where the
  // previous evaluation of that split stopped, as Megatron's evaluation iterators do.
  double evaluate(data::Split split, int64_t iters);
  // The learning-rate schedule (a function of the samples of the steps taken, not skipped): the
  // flags', or the checkpoint's with --use-checkpoint-opt_param-scheduler.
  optim::LrSchedule lr_schedule() const;
  // What checkpoints save and restore of this trainer (views into its state).
  checkpoint::TrainView checkpoint_view();
  checkpoint::RunInfo checkpoint_run_info() const;

 private:
  class Stages;
  void build_model();
  double learning_rate(int64_t samples) const;
  std::optional<double> decoupled_learning_rate(int64_t samples) const;  // --decoupled-lr
  void moe_stats(StepResult& r) const;
  // Compares every parameter's hash across the ranks holding its replicas (dense: DP x CP;
  // experts: EDP; with --test-mode the TP-replicated ones over TP too); collective over the
  // world, every rank stops with Megatron's error on a mismatch, naming it on the ranks that see
  // it.
  void check_replicas();
  // The tokens whose loss counts in the current-size global batch at sample `base` of a split,
  // for the loss and each MTP depth (data::loss_token_counts), kept for the batch last asked.
  const std::vector<int64_t>& loss_tokens(data::Split split, int64_t base);
  // After an iteration's micro-batches: the FP8 amaxes reduced (MAX) over the ranks holding each
  // layer's shards and replicas (TP and DP x CP; the experts' ETP and EDP), then every delayed
  // scale updated, as Transformer Engine's amax reduction and scale update.
  // The MoE and MTP loss fields Megatron logs for this model, with the given values (mtp: one
  // per depth).
  std::vector<std::pair<std::string, double>> aux_losses(double load_balancing,
                                                         double z,
                                                         const std::vector<double>& mtp) const;

  TrainArgs a_;
  Comm& world_;
  int ranks_per_node_ = 1;
  std::unique_ptr<Comm> device_world_;  // --device cuda, several ranks: NCCL over world_
  std::unique_ptr<ParallelState> ps_;
  model::RunCtx rc_;
  std::unique_ptr<model::Fp8State> fp8_;  // --fp8-format: the FP8 linear layers (rc_.fp8)
  std::vector<std::unique_ptr<model::GPTChunk>> chunks_;
  std::vector<std::unique_ptr<GradSync>> grad_syncs_;    // one per chunk
  std::vector<std::unique_ptr<GradSync>> expert_syncs_;  // one per chunk with routed experts
  std::unique_ptr<optim::Optimizer> optimizer_;
  data::TrainValidTest datasets_;
  int64_t consumed_eval_samples_[3] = {0, 0, 0};
  std::unique_ptr<Stages> stages_;
  std::unique_ptr<RunLog> log_;  // the last rank's
  std::unique_ptr<checkpoint::Checkpointer> checkpointer_;
  int64_t iteration_ = 0, consumed_samples_ = 0;
  // The samples of the steps that were taken (Megatron's scheduler steps only then): where the
  // learning-rate schedule stands.
  int64_t lr_samples_ = 0;
  std::unique_ptr<optim::GradScaler> scaler_;  // --fp16 (or --bf16 --loss-scale); else none
  optim::LrSchedule schedule_;  // the flags', or the checkpoint's (--use-checkpoint-opt_param-...)
  // The current global batch (--rampup-batch-size, --step-batch-size-schedule) and its
  // micro-batches per data-parallel rank.
  int64_t batch_size_ = 0, num_microbatches_ = 0;
  struct LossTokens {
    data::Split split = data::Split::kTrain;
    int64_t base = -1, batch = 0;
    std::vector<int64_t> counts;
  } loss_tokens_;
  double pipeline_compute_s_ = 0, pipeline_wait_s_ = 0;  // over profiled steps
};

// `mtron train` entry point: returns the process exit code.
int train_main(int argc, char** argv);

}  // namespace mtron::train
