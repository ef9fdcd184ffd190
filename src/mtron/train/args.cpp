#include "mtron/train/args.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "mtron/core/error.h"
#include "mtron/core/model_flags.h"
#include "mtron/data/null_tokenizer.h"
#include "mtron/data/tokenizer.h"
#include "mtron/train/checkpoint_args.h"
#include "mtron/train/fp8_flags.h"
#include "mtron/train/fsdp_flags.h"
#include "mtron/train/megatron_flags.h"
#include "mtron/train/muon_flags.h"

#include <fmt/format.h>

namespace mtron::train {
namespace {

// A choice flag: the names are what --help shows.
template <typename E>
CLI::Validator choices(const std::map<std::string, E>& m) {
  std::string names;
  for (const auto& [k, v] : m) names += (names.empty() ? "{" : ",") + k;
  return CLI::CheckedTransformer(m).description(names + "}");
}

// The vocabulary --print-layout assumes when it may not read the tokenizer's files.
int64_t usual_vocab_size(const std::string& type) {
  return type == "GPT2BPETokenizer" ? 50257 : 32000;
}

void validate_schedule_flags(TrainArgs& a, bool warmup_iters_set) {
  MT_CHECK(a.train_iters > 0 || a.train_samples > 0,
           "--train-iters or --train-samples is required (and must be positive)");
  MT_CHECK(a.train_iters >= 0 && a.train_samples >= 0,
           "--train-iters and --train-samples must "
           "be positive");
  const int64_t gbs = a.batches.final_batch_size();
  if (a.train_iters > 0) {
    // Megatron's rules for iteration-based training.
    MT_CHECK(a.train_samples == 0,
             "--train-iters and --train-samples exclude each other (expected iteration-based "
             "training)");
    MT_CHECK(a.lr_decay_samples == 0,
             "--lr-decay-samples needs --train-samples (expected iteration-based learning rate "
             "decay: use --lr-decay-iters)");
    MT_CHECK(a.lr_warmup_samples == 0,
             "--lr-warmup-samples needs --train-samples (expected iteration-based learning rate "
             "warmup: use --lr-warmup-iters)");
    if (a.lr_decay_iters == 0) a.lr_decay_iters = a.train_iters;
    a.schedule.decay_samples = a.lr_decay_iters * gbs;
    a.schedule.warmup_samples = a.lr_warmup_iters * gbs;
    a.schedule.wsd_decay_samples = a.lr_wsd_decay_iters * gbs;
  } else {
    MT_CHECK(a.lr_decay_iters == 0,
             "--lr-decay-iters needs --train-iters (expected sample-based learning rate decay: "
             "use --lr-decay-samples)");
    MT_CHECK(a.lr_warmup_iters == 0,
             "--lr-warmup-iters needs --train-iters (expected sample-based learning rate warmup: "
             "use --lr-warmup-samples)");
    a.train_iters = a.batches.iterations_for(a.train_samples);
    MT_CHECK(a.train_iters > 0, "--train-samples ", a.train_samples,
             " is less than one global batch (", gbs, ")");
    if (a.lr_decay_samples == 0) a.lr_decay_samples = a.train_samples;
    a.schedule.decay_samples = a.lr_decay_samples;
    a.schedule.warmup_samples = a.lr_warmup_samples;
    a.schedule.wsd_decay_samples = a.lr_wsd_decay_samples;
  }
  // Megatron reads --lr-wsd-decay-iters in iteration-based training and --lr-wsd-decay-samples
  // in sample-based training.
  if (a.lr_decay_style == optim::LrDecayStyle::kWsd) {
    const char* want = a.train_samples > 0 ? "--lr-wsd-decay-samples" : "--lr-wsd-decay-iters";
    MT_CHECK(a.train_samples > 0 ? a.lr_wsd_decay_iters == 0 : a.lr_wsd_decay_samples == 0,
             a.train_samples > 0 ? "--lr-wsd-decay-iters" : "--lr-wsd-decay-samples", " needs ",
             a.train_samples > 0 ? "--train-iters" : "--train-samples", " (expected ", want, ")");
    MT_CHECK(a.schedule.wsd_decay_samples > 0, "--lr-decay-style WSD needs ", want,
             " (the annealing phase at the end of the decay)");
  } else if (a.lr_wsd_decay_iters > 0 || a.lr_wsd_decay_samples > 0) {
    a.notes.push_back(
        "--lr-wsd-decay-iters/--lr-wsd-decay-samples have no effect without --lr-decay-style "
        "WSD");
    a.schedule.wsd_decay_samples = 0;
  }
  a.schedule.wsd_style = a.lr_wsd_decay_style;
  if (a.lr_warmup_fraction >= 0) {
    MT_CHECK(!warmup_iters_set && a.lr_warmup_samples == 0,
             "can only specify one of --lr-warmup-fraction and --lr-warmup-iters/samples");
    a.schedule.warmup_samples = int64_t(a.lr_warmup_fraction * double(a.schedule.decay_samples));
  }
  MT_CHECK(a.schedule.warmup_samples >= 0, "the learning-rate warmup must be >= 0");
  MT_CHECK(a.lr >= 0, "--lr is required");
  MT_CHECK(a.min_lr <= a.lr, "--min-lr (", a.min_lr, ") must be <= --lr (", a.lr, ")");
  a.schedule.lr = a.lr;
  a.schedule.min_lr = a.min_lr;
  a.schedule.warmup_init = a.lr_warmup_init;
  a.schedule.style = a.lr_decay_style;
  if (a.decoupled_lr) {
    if (!a.decoupled_min_lr) a.decoupled_min_lr = a.min_lr;  // Megatron's default
    MT_CHECK(*a.decoupled_min_lr <= *a.decoupled_lr, "--decoupled-min-lr (", *a.decoupled_min_lr,
             ") must be <= --decoupled-lr (", *a.decoupled_lr, ")");
  } else if (a.decoupled_min_lr) {
    a.notes.push_back("--decoupled-min-lr has no effect without --decoupled-lr");
    a.decoupled_min_lr.reset();
  }
}

// Megatron's rules for --recompute-modules under selective recompute (TransformerConfig's
// __post_init__), with its messages.
void check_train_recompute_modules(const RecomputeModules& r,
                                   const ModelConfig& m,
                                   bool shared_expert_overlap) {
  check_recompute_modules(r, m);
  MT_CHECK(!r.has(RecomputeModule::kSharedExperts) || m.moe_shared_expert_intermediate_size == 0 ||
               !shared_expert_overlap,
           "shared_experts recompute cannot work with --moe-shared-expert-overlap.");
}

}  // namespace

bool parse_train_args(int argc, char** argv, int64_t world_size, TrainArgs& a) {
  CLI::App app{
      "mtron train: pretrain a GPT/Llama model with Megatron's flags.\n"
      "One process, or N under `mpirun -np N mtron train ...` / srun --mpi=pmix.\n"
      "A flag given twice takes its last value. docs/flags.md lists every Megatron flag."};
  app.name("mtron train");
  app.set_help_flag("-h,--help", "Print this help and exit");
  app.allow_extras();
  // argparse semantics, as Megatron: a repeated flag takes its last value.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_model_flags(app, a.model);

  const char* p = "Parallelism";
  add_parallel_flags(app, a.parallel, ParallelFlags::kAll, p);
  FsdpFlags fsdp;
  add_fsdp_flags(app, a.parallel, fsdp, p);
  app.add_option("--ddp-bucket-size", a.ddp_bucket_size,
                 "Gradient bucket size in elements with --overlap-grad-reduce (default max(40M, "
                 "1M x DP); without it one bucket)")
      ->group(p);
  auto* num_buckets =
      app.add_option("--ddp-num-buckets", a.ddp_num_buckets,
                     "With --overlap-grad-reduce: buckets of the rank's parameters over N")
          ->group(p);
  app.add_option("--distributed-timeout-minutes", a.distributed_timeout_minutes,
                 "A collective waiting longer ends the job, naming it (default 10; fractions "
                 "accepted)")
      ->group(p);
  std::string backend = "nccl";
  app.add_option("--distributed-backend", backend, "nccl or gloo (mtron picks MPI on CPUs)")
      ->check(CLI::IsMember({"nccl", "gloo"}))
      ->group(p);
  app.add_flag("--print-layout", a.print_layout,
               "Validate every flag, print the rank map and the memory report, and exit (reads "
               "no data, tokenizer or checkpoint file)")
      ->group(p);
  app.add_option("--world-size", a.layout_world_size,
                 "With --print-layout: the number of ranks to lay out (default: this launch's)")
      ->group(p);
  bool tp_comm_overlap = false;
  app.add_flag("--tp-comm-overlap", tp_comm_overlap,
               "Accepted (needs --sequence-parallel); mtron does not overlap TP collectives")
      ->group(p);
  std::string dispatcher = "allgather", router_dtype = "fp32";
  std::string flex_backend = "deepep";
  app.add_option("--moe-token-dispatcher-type", dispatcher,
                 "allgather, alltoall or flex (mtron exchanges tokens all-to-all over EP in every "
                 "case; the result is the same)")
      ->check(CLI::IsMember({"allgather", "alltoall", "flex"}))
      ->group(p);
  app.add_option("--moe-flex-dispatcher-backend", flex_backend,
                 "deepep or hybridep (with --moe-token-dispatcher-type flex; mtron's all-to-all "
                 "serves both)")
      ->check(CLI::IsMember({"deepep", "hybridep"}))
      ->group(p);
  app.add_option("--moe-router-dtype", router_dtype, "fp32 (mtron's router always runs in fp32)")
      ->check(CLI::IsMember({"fp32"}))
      ->group(p);

  const char* t = "Training";
  app.add_option("--train-iters", a.train_iters, "Iterations to train")->group(t);
  app.add_option("--train-samples", a.train_samples,
                 "Samples to train (sample-based: the iterations follow from the batch sizes)")
      ->group(t);
  std::vector<int64_t> rampup;
  app.add_option("--rampup-batch-size", rampup,
                 "START INCREMENT SAMPLES: ramp the global batch size up from START by INCREMENT "
                 "over SAMPLES samples (with --train-samples)")
      ->expected(3)
      ->group(t);
  // One word, or (as Megatron-LM's own GPT-3 example passes it, unquoted) one word per entry.
  std::vector<std::string> step_words;
  app.add_option("--step-batch-size-schedule", step_words,
                 "\"TOKENS:BATCH ...\": the global batch size from each token count on (suffixes "
                 "K, M, B, T)")
      ->expected(1, CLI::detail::expected_max_vector_size)
      ->group(t);
  app.add_option("--eval-global-batch-size", a.eval_global_batch_size,
                 "Sequences per validation iteration (default --global-batch-size)")
      ->group(t);
  int64_t eval_micro_batch_size = 0;
  app.add_option("--eval-micro-batch-size", eval_micro_batch_size,
                 "Only --micro-batch-size's value (mtron evaluates in training's micro-batches)")
      ->group(t);
  app.add_option("--seed", a.seed, "Random seed (default 1234)")->group(t);
  add_precision_flags(app, a.precision, t);
  std::string fp8_recipe = "delayed";
  add_fp8_flags(app, a.fp8, fp8_recipe, t);
  app.add_option("--device", a.device,
                 "mtron only: cpu (default) or cuda (one GPU per rank, the node-local rank's; "
                 "NCCL between ranks)")
      ->transform(
          choices(std::map<std::string, Device>{{"cpu", Device::kCPU}, {"cuda", Device::kCUDA}}))
      ->type_name("TEXT")
      ->group(t);
  app.add_option_function<std::string>(
         "--attention-backend",
         [&](const std::string& b) {
           a.fp32_attention = b == "unfused" || b == "local";
           a.flash_attention = b == "flash";
         },
         "auto (default), fused or flash: in --bf16 runs on CUDA attention's matrix products "
         "take bf16 operands on the tensor cores, in cuDNN's fused attention (auto, fused; "
         "mtron's own kernels where cuDNN does not take the shape) or in mtron's own "
         "FlashAttention-2-style kernels (flash); unfused or local: fp32 products, the CPU's "
         "numbers (every backend is tiled with an online softmax: no score matrix is stored)")
      ->check(CLI::IsMember({"auto", "flash", "fused", "unfused", "local"}))
      ->group(t);
  bool deterministic_mode = false;
  app.add_flag("--deterministic-mode", deterministic_mode,
               "Bitwise reproducible runs even where NVTE_ALLOW_NONDETERMINISTIC_ALGO=1 lets "
               "cuDNN's attention backward accumulate dq by atomic additions (CUDA); every other "
               "kernel of mtron is deterministic always")
      ->group(t);
  app.add_option("--recompute-granularity", a.recompute.granularity, "full or selective")
      ->transform(choices(std::map<std::string, RecomputeGranularity>{
          {"full", RecomputeGranularity::kFull}, {"selective", RecomputeGranularity::kSelective}}))
      ->type_name("TEXT")
      ->group(t);
  // Megatron's legacy flag: selective recompute whatever --recompute-granularity says (its
  // callback runs after that option's).
  app.add_flag_callback(
         "--recompute-activations",
         [&a] { a.recompute.granularity = RecomputeGranularity::kSelective; },
         "Recompute activations: --recompute-granularity selective")
      ->group(t);
  bool recompute_method_set = false;
  app.add_option_function<model::RecomputeMethod>(
         "--recompute-method",
         [&](const model::RecomputeMethod& m) {
           a.recompute.method = m;
           recompute_method_set = true;
         },
         "uniform or block")
      ->transform(choices(std::map<std::string, model::RecomputeMethod>{
          {"uniform", model::RecomputeMethod::kUniform},
          {"block", model::RecomputeMethod::kBlock}}))
      ->type_name("TEXT")
      ->group(t);
  app.add_option("--recompute-num-layers", a.recompute.num_layers, "Layers per recompute group")
      ->group(t);
  std::vector<std::string> recompute_modules;
  auto* modules_opt =
      app.add_option(
             "--recompute-modules", recompute_modules,
             "With --recompute-granularity selective, the parts of every layer that "
             "backward rebuilds: core_attn (default), moe_act, layernorm, mla_up_proj, mlp, "
             "moe, shared_experts (docs/flags.md)")
          ->expected(0, -1)
          ->group(t);
  bool moe_layer_recompute = false;
  app.add_flag(
         "--moe-layer-recompute", moe_layer_recompute,
         "Megatron's deprecated form of --recompute-granularity selective --recompute-modules "
         "moe (added to the modules)")
      ->group(t);

  const char* o = "Optimizer";
  OptimizerFlags optimizer;
  add_optimizer_flags(app, optimizer, o);
  app.add_option("--lr", a.lr, "Peak learning rate")->group(o);
  app.add_option("--min-lr", a.min_lr, "Minimum learning rate (default 0)")->group(o);
  app.add_option_function<double>(
         "--decoupled-lr", [&a](double v) { a.decoupled_lr = v; },
         "Peak learning rate of the word embeddings and the output layer")
      ->group(o);
  app.add_option_function<double>(
         "--decoupled-min-lr", [&a](double v) { a.decoupled_min_lr = v; },
         "Their minimum learning rate (default: --min-lr)")
      ->group(o);
  app.add_option("--lr-decay-style", a.lr_decay_style,
                 "constant, linear, cosine, inverse-square-root, WSD (warmup, stable, decay)")
      ->transform(choices(std::map<std::string, optim::LrDecayStyle>{
          {"constant", optim::LrDecayStyle::kConstant},
          {"linear", optim::LrDecayStyle::kLinear},
          {"cosine", optim::LrDecayStyle::kCosine},
          {"inverse-square-root", optim::LrDecayStyle::kInverseSquareRoot},
          {"WSD", optim::LrDecayStyle::kWsd}}))
      ->type_name("TEXT")
      ->group(o);
  app.add_option("--lr-wsd-decay-style", a.lr_wsd_decay_style,
                 "WSD's annealing: exponential (default), linear, cosine, minus_sqrt")
      ->transform(choices(std::map<std::string, optim::WsdDecayStyle>{
          {"exponential", optim::WsdDecayStyle::kExponential},
          {"linear", optim::WsdDecayStyle::kLinear},
          {"cosine", optim::WsdDecayStyle::kCosine},
          {"minus_sqrt", optim::WsdDecayStyle::kMinusSqrt}}))
      ->type_name("TEXT")
      ->group(o);
  app.add_option("--lr-wsd-decay-iters", a.lr_wsd_decay_iters,
                 "WSD: anneal over the last this many iterations of the decay")
      ->group(o);
  app.add_option("--lr-wsd-decay-samples", a.lr_wsd_decay_samples,
                 "WSD: anneal over the last this many samples of the decay")
      ->group(o);
  app.add_option("--lr-decay-iters", a.lr_decay_iters,
                 "Decay over this many iterations (default: --train-iters)")
      ->group(o);
  app.add_option("--lr-decay-samples", a.lr_decay_samples,
                 "Decay over this many samples (default: --train-samples)")
      ->group(o);
  auto* warm_iters =
      app.add_option("--lr-warmup-iters", a.lr_warmup_iters, "Linear warmup iterations")->group(o);
  app.add_option("--lr-warmup-samples", a.lr_warmup_samples, "Linear warmup samples")->group(o);
  app.add_option("--lr-warmup-fraction", a.lr_warmup_fraction, "Warmup as a fraction of decay")
      ->group(o);
  app.add_option("--lr-warmup-init", a.lr_warmup_init, "Learning rate at the start of warmup")
      ->group(o);
  app.add_option("--weight-decay", a.adam.weight_decay, "Decoupled weight decay (default 0.01)")
      ->group(o);
  app.add_option("--clip-grad", a.adam.clip_grad, "Global gradient-norm clip (default 1.0)")
      ->group(o);
  app.add_flag("--apply-wd-to-qk-layernorm", a.apply_wd_to_qk_layernorm,
               "Weight decay on the q and k layernorms too (Qwen3-Next's choice; other norms and "
               "biases stay without)")
      ->group(o);
  app.add_option_function<std::string>(
         "--no-weight-decay-cond-type",
         [&a](const std::string&) {
           a.notes.push_back(
               "WARNING: --no-weight-decay-cond-type is deprecated. Please use "
               "--apply-wd-to-qk-layernorm instead.");
           a.apply_wd_to_qk_layernorm = true;
         },
         "Megatron's deprecated form of --apply-wd-to-qk-layernorm")
      ->check(CLI::IsMember({"apply_wd_to_qk_layernorm"}))
      ->group(o);
  app.add_option("--adam-beta1", a.adam.beta1, "Adam beta1 (default 0.9)")->group(o);
  app.add_option("--adam-beta2", a.adam.beta2, "Adam beta2 (default 0.999)")->group(o);
  app.add_option("--adam-eps", a.adam.eps, "Adam epsilon (default 1e-8)")->group(o);
  bool cpu_offload = false, precision_aware = false;
  app.add_flag("--optimizer-cpu-offload", cpu_offload,
               "Adam's moments and step in host memory for --optimizer-offload-fraction of the "
               "parameters, stepped on the CPU beside the device (needs "
               "--use-precision-aware-optimizer, as in Megatron)")
      ->group(o);
  double offload_fraction = 0;
  app.add_option("--optimizer-offload-fraction", offload_fraction,
                 "With --optimizer-cpu-offload: the fraction of each parameter buffer's optimizer "
                 "state in host memory, rounded to a parameter boundary (default 0)")
      ->group(o);
  app.add_flag("--use-precision-aware-optimizer", precision_aware,
               "Megatron's precision-aware optimizer; with its default fp32 moments and master "
               "weights the arithmetic is mtron's AdamW's")
      ->group(o);
  // The precision-aware optimizer's storage types, Megatron's names, choices and defaults. mtron
  // keeps all four in fp32.
  struct StateDtype {
    const char* flag;
    const char* what;
    std::vector<std::string> choices;
    std::string value = "fp32";
  };
  std::vector<StateDtype> state_dtypes = {
      {"--main-grads-dtype", "main gradients", {"fp32", "bf16"}},
      {"--main-params-dtype", "master weights", {"fp32", "fp16"}},
      {"--exp-avg-dtype", "Adam's first moments", {"fp32", "fp16", "bf16", "fp8"}},
      {"--exp-avg-sq-dtype", "Adam's second moments", {"fp32", "fp16", "bf16", "fp8"}}};
  for (StateDtype& d : state_dtypes)
    app.add_option(d.flag, d.value,
                   str("Storage type of ", d.what,
                       " with --use-precision-aware-optimizer; mtron keeps fp32 (the default)"))
        ->check(CLI::IsMember(d.choices))
        ->group(o);
  app.add_option("--loss-scale", a.loss_scale.static_scale,
                 "Static loss scale (with --fp16, or --bf16); default: dynamic with --fp16")
      ->group(o);
  app.add_option("--initial-loss-scale", a.loss_scale.initial_scale,
                 "Dynamic loss scaling: initial scale (default 2^32)")
      ->group(o);
  app.add_option("--min-loss-scale", a.loss_scale.min_scale,
                 "Dynamic loss scaling: minimum scale (default 1)")
      ->group(o);
  app.add_option("--loss-scale-window", a.loss_scale.window,
                 "Dynamic loss scaling: clean steps before the scale doubles (default 1000)")
      ->group(o);
  app.add_option("--hysteresis", a.loss_scale.hysteresis,
                 "Dynamic loss scaling: overflows before the scale halves (default 2)")
      ->group(o);

  const char* d = "Data";
  app.add_flag("--mock-data", a.mock_data, "Synthetic data, deterministic per sample index")
      ->group(d);
  app.add_option("--tokenizer-type", a.tokenizer_type,
                 fmt::format("{}", fmt::join(data::tokenizer_types(), ", ")))
      ->group(d);
  app.add_option("--vocab-size", a.vocab_size, "Vocabulary size (NullTokenizer)")->group(d);
  app.add_option("--data-path", a.data_path, "Data prefixes, optionally weighted")->group(d);
  app.add_option("--split", a.split, "Train/valid/test split (default 969, 30, 1)")->group(d);
  app.add_option("--vocab-file", a.vocab_file, "GPT-2 vocab.json")->group(d);
  app.add_option("--merge-file", a.merge_file, "GPT-2 merges.txt")->group(d);
  app.add_option("--tokenizer-model", a.tokenizer_model, "SentencePiece/HF tokenizer file")
      ->group(d);
  app.add_option("--data-cache-path", a.data_cache_path, "Where dataset indices are cached")
      ->group(d);
  app.add_flag("--eod-mask-loss", a.eod_mask_loss,
               "Leave the tokens whose input is the end-of-document token out of the loss")
      ->group(d);
  app.add_flag("--reset-position-ids", a.reset_position_ids,
               "Learned position embeddings count from 0 after each end-of-document token")
      ->group(d);
  app.add_flag("--reset-attention-mask", a.reset_attention_mask,
               "Accepted; attention stays causal over the whole sequence (docs/flags.md)")
      ->group(d);
  app.add_option("--eval-interval", a.eval_interval,
                 "Iterations between evaluations (default 1000)")
      ->group(d);
  app.add_option("--eval-iters", a.eval_iters, "Iterations per evaluation (default 100)")->group(d);

  const char* l = "Logging";
  app.add_option("--log-interval", a.log_interval, "Iterations between log lines (default 100)")
      ->group(l);
  app.add_flag("--profile", a.profile,
               "Print where the time went (per kernel, after the first iteration) at the end")
      ->group(l);
  app.add_option("--check-weight-hash-across-dp-replicas-interval", a.check_weight_hash_interval,
                 "Every N iterations and at the end, compare each parameter's hash across its "
                 "data-parallel replicas; stop on a mismatch")
      ->check(CLI::PositiveNumber)
      ->group(l);
  app.add_flag("--test-mode", a.test_mode,
               "Compare the parameters' hashes across their data-parallel and (for those not "
               "sharded over TP) tensor-parallel replicas after every iteration")
      ->group(l);
  app.add_option("--metrics-file", a.metrics_file,
                 "JSONL metrics (default: mtron-metrics.jsonl in --save, else in "
                 "--tensorboard-dir, else none); appended to on resume")
      ->group(l);
  add_tensorboard_flags(app, a.tensorboard, l);

  checkpoint::add_checkpoint_flags(app, a.checkpoint);
  add_compat_flags(app, a.notes);

  std::vector<std::string> args = last_occurrence_only(
      argc, argv, {"--data-path", "--step-batch-size-schedule", "--recompute-modules"});
  std::reverse(args.begin(), args.end());  // CLI11 takes a vector in reverse order
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return false;
  } catch (const CLI::ParseError& e) {
    throw Error(e.what());
  }
  check_unknown_flags(app);
  if (a.checkpoint.use_checkpoint_args) {
    apply_checkpoint_args(a);
  } else if (a.checkpoint.use_mp_args_from_checkpoint_args) {
    a.notes.push_back(
        "--use-mp-args-from-checkpoint-args has no effect without --use-checkpoint-args");
  }
  // Transformer Engine's switch, which Megatron scripts set: nondeterministic algorithms allowed.
  const char* nondet = std::getenv("NVTE_ALLOW_NONDETERMINISTIC_ALGO");
  if (nondet && std::string(nondet) == "1" && !deterministic_mode) {
    a.nondeterministic_attention = a.device == Device::kCUDA;
    a.notes.push_back(
        a.device == Device::kCUDA
            ? "NVTE_ALLOW_NONDETERMINISTIC_ALGO=1: cuDNN's fused attention backward (--bf16) "
              "accumulates dq by atomic additions, so gradients' last bits vary from run to run "
              "(--deterministic-mode keeps them reproducible)"
            : "NVTE_ALLOW_NONDETERMINISTIC_ALGO=1 has no effect on --device cpu (its kernels are "
              "deterministic)");
  }
  if (a.precision.compute == Precision::kFP16 ||
      (a.precision.compute == Precision::kBF16 && a.loss_scale.static_scale)) {
    // Megatron: a constant scaler with --loss-scale (bf16 too), else a dynamic one for fp16.
    a.grad_scaler = a.loss_scale;
    optim::GradScaler check(a.loss_scale);  // the flags' validation
  } else if (a.loss_scale.static_scale) {
    a.notes.push_back("--loss-scale has no effect without --fp16 or --bf16 (fp32 training)");
  }
  if (dispatcher == "flex") {
    a.notes.push_back("--moe-token-dispatcher-type flex (" + flex_backend +
                      ") runs as alltoall: the same routing and results, mtron's own all-to-all "
                      "instead of DeepEP/HybridEP kernels");
  }
  validate_fsdp_flags(fsdp, a.parallel, a.precision, a.checkpoint.ckpt_format,
                      a.check_weight_hash_interval);
  if (!a.checkpoint.ckpt_format.empty()) {
    a.notes.push_back("--ckpt-format " + a.checkpoint.ckpt_format +
                      " has no effect: mtron writes sharded safetensors checkpoints that load "
                      "under any layout (docs/checkpoints.md)");
  }
  if (a.precision.grad_reduce_in_bf16 && a.precision.compute != Precision::kBF16) {
    a.notes.push_back("--grad-reduce-in-bf16 has no effect without --bf16 (fp32 gradients)");
    a.precision.grad_reduce_in_bf16 = false;
  }

  // The model's vocabulary is the tokenizer's; NullTokenizer takes --vocab-size.
  MT_CHECK(a.mock_data || !a.data_path.empty(), "no data: pass --data-path PREFIX or --mock-data");
  MT_CHECK(!(a.mock_data && !a.data_path.empty()),
           "--mock-data and --data-path exclude each other");
  if (a.tokenizer_type.empty() && !a.vocab_file.empty() && !a.merge_file.empty()) {
    // Only GPT-2's BPE takes a merge file (Megatron-LM's GPT-3 example relies on it).
    a.tokenizer_type = "GPT2BPETokenizer";
    a.notes.push_back(
        "no --tokenizer-type: GPT2BPETokenizer, the tokenizer of --vocab-file and --merge-file");
  }
  if (a.tokenizer_type.empty()) {
    MT_CHECK(a.mock_data, "--data-path needs --tokenizer-type (one of ",
             fmt::format("{}", fmt::join(data::tokenizer_types(), ", ")), ")");
    a.tokenizer_type = "NullTokenizer";
  }
  if (a.tokenizer_type == "NullTokenizer") {
    MT_CHECK(a.vocab_size > 0, "--tokenizer-type NullTokenizer needs --vocab-size");
    a.model.vocab_size = a.vocab_size;
    a.eod_id = data::NullTokenizer(a.vocab_size, std::nullopt, std::nullopt).eod();
  } else if (a.print_layout) {
    data::check_tokenizer_type(a.tokenizer_type);
    a.model.vocab_size = a.vocab_size > 0 ? a.vocab_size : usual_vocab_size(a.tokenizer_type);
    if (a.vocab_size == 0) {
      a.notes.push_back(fmt::format(
          "--print-layout reads no tokenizer file: vocabulary assumed {} (pass --vocab-size for "
          "the exact memory report)",
          a.model.vocab_size));
    }
  } else {
    data::TokenizerOptions to;
    to.type = a.tokenizer_type;
    to.vocab_file = a.vocab_file;
    to.merge_file = a.merge_file;
    to.model = a.tokenizer_model;
    const auto tokenizer = data::make_tokenizer(to);
    a.model.vocab_size = tokenizer->vocab_size();
    a.eod_id = tokenizer->eod();
    for (const auto& [on, flag] : {std::pair{a.eod_mask_loss, "--eod-mask-loss"},
                                   std::pair{a.reset_position_ids, "--reset-position-ids"}}) {
      MT_CHECK(!on || a.eod_id >= 0, flag, ": the ", a.tokenizer_type,
               " has no end-of-document token");
    }
  }
  if (a.eod_mask_loss && !a.print_layout) {
    a.notes.push_back(
        "--eod-mask-loss: the gradient is that of the mean over the global batch's tokens whose "
        "loss counts (Megatron's with --calculate-per-token-loss; without it Megatron averages "
        "each micro-batch's own mean, which depends on the micro-batch and data-parallel sizes)");
  }
  MT_CHECK(a.model.num_layers != 0, "--num-layers is required");
  MT_CHECK(a.model.hidden_size != 0, "--hidden-size is required");
  MT_CHECK(a.model.num_attention_heads != 0, "--num-attention-heads is required");
  MT_CHECK(a.model.seq_length != 0, "--seq-length is required");
  a.model.finalize();
  if (a.reset_position_ids &&
      a.model.position_embedding_type != PositionEmbedding::kLearnedAbsolute) {
    a.notes.push_back(
        "--reset-position-ids has no effect: position ids only index learned absolute position "
        "embeddings; rotary embeddings run over the sequence's positions, as in Megatron-Core");
  }
  if (a.reset_attention_mask) {
    a.notes.push_back(
        "--reset-attention-mask has no effect: attention stays causal over the whole sequence, so "
        "a packed document sees the ones before it, as in Megatron-Core with Transformer Engine "
        "(whose causal attention ignores the data loader's mask)");
  }
  MT_CHECK(!a.model.is_moe() || !a.model.add_bias_linear,
           "--num-experts: experts with biases are not supported yet; pass --disable-bias-linear");

  MT_CHECK(a.layout_world_size == 0 || a.print_layout, "--world-size is only for --print-layout");
  auto& par = a.parallel;
  par.world_size = a.layout_world_size > 0 ? a.layout_world_size : world_size;
  MT_CHECK(par.micro_batch_size != 0, "--micro-batch-size is required");
  // The batch schedule: its last size is the global batch size the layout is checked with.
  const std::string step_schedule = fmt::format("{}", fmt::join(step_words, " "));
  MT_CHECK(rampup.empty() || step_schedule.empty(),
           "--rampup-batch-size and --step-batch-size-schedule exclude each other");
  // Megatron's evaluation batch under a step schedule without --global-batch-size: its
  // global_batch_size default, micro-batch x DP (set below, once DP is known).
  const bool eval_batch_is_microbatch_dp = !step_schedule.empty() && par.global_batch_size == 0;
  if (!step_schedule.empty()) {
    a.batches = BatchSchedule::steps(step_schedule, a.model.seq_length);
    // Megatron-LM rejects --global-batch-size with a schedule, yet its GPT-3 example passes
    // both: accepted when they agree.
    MT_CHECK(par.global_batch_size == 0 || par.global_batch_size == a.batches.final_batch_size(),
             "--global-batch-size (", par.global_batch_size,
             ") differs from the last batch size of --step-batch-size-schedule (",
             a.batches.final_batch_size(), ")");
    par.global_batch_size = a.batches.final_batch_size();
  }
  par.finalize(a.model);
  if (!rampup.empty()) {
    MT_CHECK(a.train_iters == 0,
             "--rampup-batch-size needs sample-based training (--train-samples; expected no "
             "batch-size rampup for iteration-based training)");
    a.batches = BatchSchedule::rampup(rampup[0], rampup[1], rampup[2], par.global_batch_size);
  } else if (step_schedule.empty()) {
    a.batches = BatchSchedule::constant(par.global_batch_size);
  }
  a.batches.validate(par);
  // Megatron's evaluation batch: --eval-global-batch-size, else the global batch size (micro-batch
  // x DP under a step schedule, as above), in micro-batches of --eval-micro-batch-size (mtron:
  // --micro-batch-size only).
  MT_CHECK(eval_micro_batch_size == 0 || eval_micro_batch_size == par.micro_batch_size,
           "--eval-micro-batch-size ", eval_micro_batch_size,
           ": mtron evaluates in micro-batches of --micro-batch-size (", par.micro_batch_size,
           "); leave it out or pass the same value");
  if (a.eval_global_batch_size == 0)
    a.eval_global_batch_size =
        eval_batch_is_microbatch_dp ? par.micro_batch_size * par.dp() : par.global_batch_size;
  MT_CHECK(a.eval_global_batch_size > 0 &&
               a.eval_global_batch_size % (par.micro_batch_size * par.dp()) == 0,
           "eval_global_batch_size (", a.eval_global_batch_size,
           ") must be divisible by eval_micro_batch_size (", par.micro_batch_size,
           ") * data_parallel_size (", par.dp(), ") (--eval-global-batch-size)");
  // Megatron's MoELayer raises this in training: each TP rank must route distinct tokens.
  MT_CHECK(!a.model.is_moe() || par.tp() == 1 || par.sequence_parallel,
           "During training, performance may degrade if MoE and tensor parallelism are "
           "enabled without also enabling sequence parallelism (add --sequence-parallel)");
  if (tp_comm_overlap) {
    MT_CHECK(par.sequence_parallel,
             "Tensor parallel communication/GEMM overlap can happen only when sequence "
             "parallelism is enabled (--tp-comm-overlap needs --sequence-parallel)");
    a.notes.push_back(
        "--tp-comm-overlap has no effect: mtron does not overlap TP collectives with GEMMs (the "
        "results are the same)");
  }

  for (const StateDtype& d : state_dtypes) {
    if (d.value == "fp32") continue;
    // Megatron's rule (OptimizerConfig), its words.
    std::string name = std::string(d.flag + 2);
    std::replace(name.begin(), name.end(), '-', '_');
    MT_CHECK(precision_aware, name, " can only be fp32 when not using precision-aware optimizer");
    MT_CHECK(false, d.flag, " ", d.value, ": mtron keeps ", d.what,
             " in fp32 (Megatron's default; drop the flag or pass fp32); to save device memory "
             "keep part of the optimizer state in host memory with --optimizer-cpu-offload "
             "--optimizer-offload-fraction F, or shard it with --use-distributed-optimizer");
  }
  MT_CHECK(offload_fraction >= 0 && offload_fraction <= 1,
           "--optimizer-offload-fraction must be in [0, 1] (got ", offload_fraction, ")");
  if (cpu_offload) {
    // Megatron's rule (arguments.py): the hybrid device optimizer reuses that code path.
    MT_CHECK(precision_aware,
             "The optimizer cpu offload must be used in conjunction with "
             "`--use-precision-aware-optimizer`, as the hybrid device optimizer reuses the code "
             "path of this flag.");
    if (a.device == Device::kCPU) {
      a.notes.push_back(
          "--optimizer-cpu-offload has no effect on --device cpu: the optimizer state is in host "
          "memory already");
    } else {
      a.optimizer_offload_fraction = offload_fraction;
    }
  }
  a.muon = validate_optimizer_flags(optimizer, a.parallel, a.precision.compute, cpu_offload,
                                    a.layer_wise_optimizer, a.notes);
  validate_fp8_flags(a.fp8, fp8_recipe, a.precision.compute, a.model, par, a.notes);
  validate_schedule_flags(a, warm_iters->count() > 0);
  MT_CHECK(a.log_interval > 0, "--log-interval must be positive");
  MT_CHECK(a.eval_interval > 0, "--eval-interval must be positive");
  MT_CHECK(a.eval_iters >= 0, "--eval-iters must be >= 0");
  MT_CHECK(a.tensorboard.log_interval > 0, "--tensorboard-log-interval must be positive");
  validate_wandb_flags(a.tensorboard, a.checkpoint.save, a.notes);
  MT_CHECK(a.distributed_timeout_minutes > 0, "--distributed-timeout-minutes must be positive");
  MT_CHECK(a.adam.beta1 >= 0 && a.adam.beta1 < 1, "--adam-beta1 must be in [0, 1)");
  MT_CHECK(a.adam.beta2 >= 0 && a.adam.beta2 < 1, "--adam-beta2 must be in [0, 1)");
  MT_CHECK(a.adam.eps > 0, "--adam-eps must be positive");
  if (a.recompute.granularity == RecomputeGranularity::kSelective) {
    MT_CHECK(!recompute_method_set,
             "recompute method is not yet supported for selective "
             "recomputing granularity");
  }
  if (modules_opt->count() > 0) a.recompute.modules = parse_recompute_modules(recompute_modules);
  if (moe_layer_recompute) {  // Megatron's TransformerConfig rule and conversion
    MT_CHECK(a.recompute.granularity != RecomputeGranularity::kFull,
             "Do not set --moe-layer-recompute with full recompute granularity. ");
    a.recompute.granularity = RecomputeGranularity::kSelective;
    a.recompute.modules.add(RecomputeModule::kMoe);
    a.notes.push_back(
        "--moe-layer-recompute is deprecated: it is --recompute-granularity selective with moe "
        "added to --recompute-modules");
  }
  if (a.recompute.granularity == RecomputeGranularity::kSelective) {
    check_train_recompute_modules(a.recompute.modules, a.model,
                                  app.count("--moe-shared-expert-overlap"));
  } else if (modules_opt->count() > 0) {
    a.notes.push_back(
        "--recompute-modules has no effect without --recompute-granularity selective");
  }
  MT_CHECK(a.recompute.num_layers >= 1, "--recompute-num-layers must be >= 1");
  MT_CHECK(a.ddp_bucket_size >= 0, "--ddp-bucket-size must be >= 0");
  // Megatron's DistributedDataParallelConfig checks.
  MT_CHECK(a.ddp_num_buckets == 0 || a.ddp_bucket_size == 0,
           "Cannot specify both num_buckets and bucket_size (--ddp-num-buckets and "
           "--ddp-bucket-size)");
  MT_CHECK(num_buckets->count() == 0 || a.ddp_num_buckets > 0,
           "num_buckets must be greater than 0 (--ddp-num-buckets ", a.ddp_num_buckets, ")");
  checkpoint::validate_checkpoint_args(a.checkpoint);
  return true;
}

std::string metrics_path(const TrainArgs& a) {
  if (!a.metrics_file.empty()) return a.metrics_file;
  for (const std::string& dir : {a.checkpoint.save, a.tensorboard.dir}) {
    if (!dir.empty()) return (std::filesystem::path(dir) / "mtron-metrics.jsonl").string();
  }
  return "";
}

}  // namespace mtron::train
