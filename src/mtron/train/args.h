// defines: TrainArgs, parse_train_args
//
// `mtron train`'s flags: Megatron's names, defaults and validation (arguments.py). Unknown flags
// are errors; Megatron flags that change nothing here (fusions,
// --use-mcore-models, ...) are accepted with a note; flags of features mtron does not have are
// rejected by name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mtron/checkpoint/checkpointer.h"
#include "mtron/core/model_config.h"
#include "mtron/core/parallel_config.h"
#include "mtron/model/gpt.h"
#include "mtron/optim/lr_schedule.h"
#include "mtron/optim/optimizer.h"

namespace mtron::train {

struct TrainArgs {
  ModelConfig model;
  ParallelConfig parallel;
  optim::AdamWConfig adam;
  model::Recompute recompute;
  checkpoint::CheckpointArgs checkpoint;  // --save, --load, --exit-*, ... (checkpointer.h)

  int64_t train_iters = 0;
  double lr = -1, min_lr = 0, lr_warmup_init = 0, lr_warmup_fraction = -1;
  int64_t lr_warmup_iters = 0, lr_decay_iters = 0;
  optim::LrDecayStyle lr_decay_style = optim::LrDecayStyle::kLinear;
  uint64_t seed = 1234;
  Precision precision = Precision::kFP32;  // --bf16: kBF16
  Device device = Device::kCPU;            // --device (mtron's; Megatron always runs on CUDA)
  int64_t ddp_bucket_size = 0;             // elements per gradient bucket; 0: Megatron's default

  // data
  bool mock_data = false;
  std::string tokenizer_type;
  int64_t vocab_size = 0;
  std::vector<std::string> data_path;
  std::string split = "969, 30, 1";
  std::string vocab_file, merge_file, tokenizer_model, data_cache_path;
  int64_t eval_interval = 1000, eval_iters = 100;

  // logging
  int64_t log_interval = 100;
  std::string metrics_file;  // JSONL; default: <save>/metrics.jsonl or ./mtron-metrics.jsonl
  bool print_layout = false;
  int64_t layout_world_size = 0;  // --world-size: the world --print-layout describes
  bool profile = false;           // per-op time table at the end

  std::vector<std::string> notes;  // accepted no-op flags, reported at start
};

// Parses and validates against a world of `world_size` ranks. Returns false when the run
// should stop successfully (--help); throws mtron::Error on bad input.
bool parse_train_args(int argc, char** argv, int64_t world_size, TrainArgs& a);

}  // namespace mtron::train
