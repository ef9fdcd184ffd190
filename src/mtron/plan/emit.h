// defines: Launcher, parse_launcher, TrainingArgs, train_args, emit_script
//
// Launch scripts for a plan: `mtron train` with every flag (model shape, layout, batch,
// precision, recompute, optimizer sharding, data, schedule), under mpirun (this machine or a
// hostfile), srun --mpi=pmix (inside an allocation) or sbatch (a Slurm job file). A Megatron
// user reads the same flags they would pass to pretrain_gpt.py. The model, layout and precision
// flags come from the definitions `mtron train` parses (model_flags.h, parallel_flags.h), FP8
// plans run --bf16 with Megatron's delayed-scaling flags, GPU plans run with --device cuda, and a
// plan `mtron train` cannot run as written (FP8 with multi-latent attention) gets
// no script but an error saying why.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mtron/core/model_config.h"
#include "mtron/plan/layout.h"

namespace mtron::plan {

enum class Launcher { kMpirun, kSrun, kSbatch };
Launcher parse_launcher(const std::string& s);  // "mpirun" | "srun" | "sbatch"

// The `mtron train` flags a plan does not decide.
struct TrainingArgs {
  int64_t train_iters = 100;
  double lr = 3e-4;
  double min_lr = 3e-5;
  std::string lr_decay_style = "cosine";
  int64_t lr_warmup_iters = -1;  // -1: a tenth of train_iters
  double weight_decay = 0.1;
  double clip_grad = 1.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.95;
  int64_t seed = 1234;
  int64_t log_interval = 0;  // 0: 1 on a CPU, 10 on GPUs
  int64_t eval_iters = 0;
  int64_t eval_interval = 0;           // 0: train_iters
  std::vector<std::string> data_args;  // --data-path, --split, tokenizer flags; empty: mock data
  std::string save, load;
  int64_t save_interval = 0;
  std::vector<std::string> extra;  // appended verbatim
};

// Every `mtron train` flag of the plan, in Megatron's spelling; throws mtron::Error when
// `mtron train` cannot run the plan.
std::vector<std::string> train_args(const ModelConfig& m,
                                    const Layout& l,
                                    const Cluster& c,
                                    const TrainingArgs& t);

struct JobOptions {
  std::string mtron = "mtron";  // the binary the script runs
  std::string job_name = "mtron";
  std::string time_limit = "04:00:00";  // sbatch --time
  std::string partition;                // sbatch --partition (empty: cluster default)
  std::string comment;                  // the plan, as a comment at the top
};

std::string emit_script(Launcher launcher,
                        const Cluster& c,
                        const Layout& l,
                        const std::vector<std::string>& args,
                        const JobOptions& job);

}  // namespace mtron::plan
