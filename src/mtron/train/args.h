// defines: TrainArgs, parse_train_args, metrics_path
//
// `mtron train`'s flags: Megatron's names, defaults and validation (arguments.py; docs/flags.md
// lists every Megatron flag and what mtron does with it). Unknown flags are errors naming the
// closest known flag; Megatron flags that change nothing here (fusions, --use-mcore-models,
// data-loader workers, ...) are accepted with a note; flags of features mtron does not have are
// rejected by name, with what to use instead. A flag given twice takes its last value, as
// Megatron's argparse does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mtron/checkpoint/checkpointer.h"
#include "mtron/core/model_config.h"
#include "mtron/core/parallel_config.h"
#include "mtron/core/parallel_flags.h"
#include "mtron/model/fp8.h"
#include "mtron/model/gpt.h"
#include "mtron/optim/grad_scaler.h"
#include "mtron/optim/lr_schedule.h"
#include "mtron/optim/optimizer.h"
#include "mtron/train/batch_schedule.h"
#include "mtron/train/tensorboard.h"

namespace mtron::train {

struct TrainArgs {
  ModelConfig model;
  ParallelConfig parallel;
  PrecisionFlags precision;  // --bf16, --fp16, --grad-reduce-in-bf16
  model::Fp8Config fp8;      // --fp8-format and the FP8 recipe's flags (fp8_flags.h)
  optim::AdamWConfig adam;
  std::optional<optim::MuonConfig> muon;  // --optimizer muon (Adam for what Muon does not step)
  // Muon's distributed optimizer: each data-parallel rank owns whole parameters (layer-wise).
  bool layer_wise_optimizer = false;
  // --apply-wd-to-qk-layernorm: weight decay on the q/k layernorms' weights and biases too.
  bool apply_wd_to_qk_layernorm = false;
  // --optimizer-cpu-offload with --optimizer-offload-fraction: the fraction of the optimizer
  // state (Adam's moments) and step in host memory (optim/optimizer.h); 0 without offload and on
  // --device cpu, where the state is in host memory already.
  double optimizer_offload_fraction = 0;
  // --loss-scale, --initial-loss-scale, --min-loss-scale, --loss-scale-window, --hysteresis; the
  // run's loss scaler (optim/grad_scaler.h): with --fp16, or --bf16 with --loss-scale (Megatron's
  // rule), else none.
  optim::GradScalerConfig loss_scale;
  std::optional<optim::GradScalerConfig> grad_scaler;
  model::Recompute recompute;
  checkpoint::CheckpointArgs checkpoint;  // --save, --load, --exit-*, ... (checkpointer.h)

  // Iteration- or sample-based training (exactly one): train_iters is derived from
  // --train-samples as Megatron's update_train_iters does.
  int64_t train_iters = 0;
  int64_t train_samples = 0;  // 0: iteration-based
  BatchSchedule batches;  // --global-batch-size, --rampup-batch-size, --step-batch-size-schedule
  double lr = -1, min_lr = 0, lr_warmup_init = 0, lr_warmup_fraction = -1;
  int64_t lr_warmup_iters = 0, lr_decay_iters = 0;
  int64_t lr_warmup_samples = 0, lr_decay_samples = 0;
  optim::LrDecayStyle lr_decay_style = optim::LrDecayStyle::kLinear;
  int64_t lr_wsd_decay_iters = 0, lr_wsd_decay_samples = 0;
  optim::WsdDecayStyle lr_wsd_decay_style = optim::WsdDecayStyle::kExponential;
  // --decoupled-lr / --decoupled-min-lr: the word embeddings' and output layer's peak and
  // minimum learning rates (the same warmup and decay shape).
  std::optional<double> decoupled_lr, decoupled_min_lr;
  optim::LrSchedule schedule;  // derived from the flags above
  uint64_t seed = 1234;
  Device device = Device::kCPU;  // --device (mtron's; Megatron always runs on CUDA)
  // --attention-backend unfused or local: attention's matrix products in fp32 in bf16 runs too
  // (model::RunCtx::fp32_attention).
  bool fp32_attention = false;
  // --attention-backend flash: on CUDA mtron's own flash-attention kernels where cuDNN's fused
  // attention (auto, fused) would run (model::RunCtx::flash_attention).
  bool flash_attention = false;
  // NVTE_ALLOW_NONDETERMINISTIC_ALGO=1 without --deterministic-mode, on CUDA: cuDNN's attention
  // backward may accumulate dq atomically (model::RunCtx::nondeterministic_attention).
  bool nondeterministic_attention = false;
  int64_t eval_global_batch_size = 0;  // --eval-global-batch-size (default: the global batch)
  int64_t ddp_bucket_size = 0;         // elements per gradient bucket; 0: Megatron's default
  int64_t ddp_num_buckets = 0;         // --ddp-num-buckets; 0: by ddp_bucket_size
  double distributed_timeout_minutes = 10;

  // data
  bool mock_data = false;
  std::string tokenizer_type;
  int64_t vocab_size = 0;
  std::vector<std::string> data_path;
  // --eod-mask-loss: the loss leaves out the tokens whose input is the tokenizer's end-of-document
  // token; --reset-position-ids: learned position embeddings count from 0 after it.
  bool eod_mask_loss = false, reset_position_ids = false, reset_attention_mask = false;
  int32_t eod_id = -1;  // the tokenizer's end-of-document id (-1: none, or not read)
  std::string split = "969, 30, 1";
  std::string vocab_file, merge_file, tokenizer_model, data_cache_path;
  int64_t eval_interval = 1000, eval_iters = 100;

  // logging
  int64_t log_interval = 100;
  // JSONL; default: <save>/mtron-metrics.jsonl, else <tensorboard-dir>/mtron-metrics.jsonl, else
  // none. Appended to when training resumes from a checkpoint.
  std::string metrics_file;
  TensorBoardArgs tensorboard;
  bool print_layout = false;
  int64_t layout_world_size = 0;  // --world-size: the world --print-layout describes
  bool profile = false;           // per-op time table at the end
  // Replica checks (train/weight_hash.h): every parameter's hash compared over its data-parallel
  // replicas every N iterations and at the end (0: never); --test-mode: after every iteration,
  // and the TP-replicated parameters over TP too.
  int64_t check_weight_hash_interval = 0;
  bool test_mode = false;

  std::vector<std::string> notes;  // accepted flags without effect, reported at start
};

// Parses and validates against a world of `world_size` ranks. Returns false when the run
// should stop successfully (--help); throws mtron::Error on bad input. With --print-layout no
// file is opened (tokenizer, data, checkpoint): the vocabulary is --vocab-size when given, else
// the tokenizer type's usual size, said in a note.
bool parse_train_args(int argc, char** argv, int64_t world_size, TrainArgs& a);

// The metrics file this run writes ("" for none), from --metrics-file, --save, --tensorboard-dir.
std::string metrics_path(const TrainArgs& a);

}  // namespace mtron::train
