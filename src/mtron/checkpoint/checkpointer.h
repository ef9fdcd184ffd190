// defines: CheckpointArgs, add_checkpoint_flags, validate_checkpoint_args, check_save_dir,
//          TrainView, Checkpointer
//
// Megatron's checkpoint and exit flags and what the training loop does with them:
//   --save DIR --save-interval N     save every N iterations (and at the end of training)
//   --load DIR                       resume from DIR's latest checkpoint (or start fresh with a
//                                    warning if DIR has none, as Megatron)
//   --no-load-optim                  load the weights only; the optimizer starts fresh
//   --no-load-rng                    do not require the checkpoint's seed (see below)
//   --finetune                       load the weights only and start at iteration 0
//   --exit-signal-handler            on SIGTERM/SIGINT (any rank): all ranks save and exit 0
//   --exit-interval N                save and exit when the iteration is a multiple of N
//   --exit-duration-in-mins N        save and exit once any rank has run N minutes (from the
//                                    start of training; fractions accepted)
//   --ckpt-step N                    load iteration N of --load instead of the latest
//   --no-save-optim, --no-save-rng   save without the optimizer state / the seed
//   --ckpt-format F                  accepted with a note: mtron writes its own reshardable
//                                    format (Megatron's torch_dist is its closest analogue)
//   --keep-last-n-checkpoints N      (mtron) delete older checkpoints, keeping the newest N
//   --override-opt_param-scheduler   use the flags' learning-rate schedule even if it differs
//                                    from the checkpoint's (Megatron's flag)
//   --use-checkpoint-opt_param-scheduler  use the checkpoint's learning-rate schedule, whatever
//                                    the flags say (Megatron's flag; excludes the one above)
//
// RNG: all of mtron's randomness is counter-based (Philox keyed by the seed and a name), so the
// seed is the whole RNG state. The checkpoint records it; loading requires the run's --seed to
// equal it (exact resume), unless --no-load-rng (or --finetune), which continues with the
// flags' seed.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mtron/checkpoint/checkpoint.h"
#include "mtron/checkpoint/exit_signal.h"
#include "mtron/optim/grad_scaler.h"
#include "mtron/optim/optimizer.h"
#include "mtron/parallel/parallel_state.h"

namespace mtron::checkpoint {

struct CheckpointArgs {
  std::string save, load;
  int64_t save_interval = 0;
  bool no_load_optim = false, no_load_rng = false, finetune = false;
  bool no_save_optim = false, no_save_rng = false;
  int64_t ckpt_step = -1;   // -1: the latest
  std::string ckpt_format;  // accepted for Megatron scripts (a note; mtron has one format)
  bool exit_signal_handler = false;
  int64_t exit_interval = 0;
  double exit_duration_in_mins = 0;     // Megatron takes an int; fractions are accepted too
  int64_t keep_last_n_checkpoints = 0;  // 0: keep all
  int64_t save_retain_interval = 0;     // 0: keep all (Retention::retain_interval)
  bool override_opt_param_scheduler = false;
  bool use_checkpoint_opt_param_scheduler = false;
  // --use-checkpoint-args: the model flags from --load's checkpoint (train/checkpoint_args.h),
  // with the tokenizer model (unless --no-use-tokenizer-model-from-checkpoint-args) and, with
  // --use-mp-args-from-checkpoint-args, the model-parallel sizes.
  bool use_checkpoint_args = false;
  bool use_mp_args_from_checkpoint_args = false;
  bool use_tokenizer_model_from_checkpoint_args = true;
};

void add_checkpoint_flags(CLI::App& app, CheckpointArgs& a);
// Megatron's rules (e.g. --save needs a positive --save-interval); throws mtron::Error.
void validate_checkpoint_args(const CheckpointArgs& a);
// Creates --save and writes a probe file there, so that a --save this rank cannot write is
// reported at start-up, before any compute; throws mtron::Error naming the directory.
void check_save_dir(const std::string& dir, int rank);
// The checkpoint directory --load (and --ckpt-step) designate; nullopt without --load or when
// --load holds no checkpoint yet (find_checkpoint).
std::optional<std::string> checkpoint_to_load(const CheckpointArgs& a);

// The trainer's state as the checkpointer reads and restores it.
struct TrainView {
  std::vector<ChunkState> chunks;
  int64_t* iteration = nullptr;
  int64_t* consumed_samples = nullptr;
  int64_t* lr_samples = nullptr;  // where the learning-rate schedule stands (steps not skipped)
  optim::Optimizer* optimizer = nullptr;
  optim::LrSchedule* schedule = nullptr;  // replaced by the checkpoint's on request
  // The loss scaler (null without one); a dynamic one's state is saved and restored with the
  // optimizer state.
  optim::GradScaler* scaler = nullptr;
};

class Checkpointer {
 public:
  Checkpointer(CheckpointArgs args, RunInfo info, const ParallelState& ps);
  ~Checkpointer();

  // Collective. With --load, restores the view from the checkpoint after checking that it
  // fits this run (model shape, seed, learning-rate schedule), under any layout.
  void load(const TrainView& v);
  // Collective; after each iteration. Saves when due and returns true when training must stop
  // (signal, --exit-duration-in-mins, --exit-interval), having saved first when --save is set.
  bool after_iteration(const TrainView& v);
  // Collective; after the last iteration: saves unless that iteration is saved already.
  void at_end(const TrainView& v);

 private:
  void save(const TrainView& v);

  CheckpointArgs a_;
  RunInfo info_;
  const ParallelState& ps_;
  RankGroups groups_;
  std::unique_ptr<ExitSignalHandler> signals_;
  double start_time_ = 0;
  int64_t last_saved_ = -1;
};

}  // namespace mtron::checkpoint
