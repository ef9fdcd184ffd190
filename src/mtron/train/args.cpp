#include "mtron/train/args.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <map>

#include "mtron/core/error.h"
#include "mtron/core/model_flags.h"
#include "mtron/data/tokenizer.h"

#include <fmt/format.h>

namespace mtron::train {
namespace {

// Megatron flags that select an implementation detail mtron always has (or never needs):
// accepted, reported once, no effect.
const char* kNoOpFlags[] = {
    "--use-mcore-models",
    "--use-flash-attn",
    "--no-masked-softmax-fusion",
    "--no-bias-gelu-fusion",
    "--no-bias-dropout-fusion",
    "--no-bias-swiglu-fusion",
    "--no-rope-fusion",
    "--no-gradient-accumulation-fusion",
    "--attention-softmax-in-fp32",
    "--no-async-tensor-model-parallel-allreduce",
    "--accumulate-allreduce-grads-in-fp32",
    "--log-throughput",
    "--log-timers-to-tensorboard",
    "--log-memory-to-tensorboard",
    "--log-validation-ppl-to-tensorboard",
    "--no-create-attention-mask-in-dataloader",
    "--use-contiguous-buffers-in-local-ddp",
    "--cross-entropy-loss-fusion",
    "--moe-grouped-gemm",
    "--moe-permute-fusion",
    "--moe-router-fusion",
};

template <typename E>
CLI::CheckedTransformer choices(std::map<std::string, E> m) {
  return CLI::CheckedTransformer(std::move(m));
}

}  // namespace

bool parse_train_args(int argc, char** argv, int64_t world_size, TrainArgs& a) {
  CLI::App app{
      "mtron train: pretrain a GPT/Llama model with Megatron's flags.\n"
      "One process, or N under `mpirun -np N mtron train ...` / srun."};
  app.name("mtron train");
  app.set_help_flag("-h,--help", "Print this help and exit");
  // argparse semantics, as Megatron: a repeated flag takes its last value.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_model_flags(app, a.model);

  const char* p = "Parallelism";
  auto& par = a.parallel;
  app.add_option("--tensor-model-parallel-size", par.tensor_model_parallel_size, "TP size")
      ->group(p);
  app.add_option("--pipeline-model-parallel-size", par.pipeline_model_parallel_size, "PP size")
      ->group(p);
  app.add_option("--context-parallel-size", par.context_parallel_size, "CP size")->group(p);
  app.add_option("--expert-model-parallel-size", par.expert_model_parallel_size, "EP size")
      ->group(p);
  app.add_option("--expert-tensor-parallel-size", par.expert_tensor_parallel_size,
                 "Expert TP size (default: TP)")
      ->group(p);
  app.add_option("--num-layers-per-virtual-pipeline-stage",
                 par.num_layers_per_virtual_pipeline_stage,
                 "Interleaved pipeline: layers per chunk")
      ->group(p);
  app.add_option("--num-virtual-stages-per-pipeline-rank", par.num_virtual_stages_per_pipeline_rank,
                 "Interleaved pipeline: chunks per rank")
      ->group(p);
  app.add_flag("--sequence-parallel", par.sequence_parallel, "Sequence parallelism (with TP > 1)")
      ->group(p);
  app.add_flag("--use-distributed-optimizer", par.use_distributed_optimizer,
               "Shard optimizer state over data-parallel ranks (ZeRO-1)")
      ->group(p);
  app.add_flag("--overlap-grad-reduce", par.overlap_grad_reduce,
               "Overlap the gradient reduction with backward")
      ->group(p);
  app.add_flag("--overlap-param-gather", par.overlap_param_gather,
               "Overlap the parameter all-gather with forward")
      ->group(p);
  app.add_option("--ddp-bucket-size", a.ddp_bucket_size,
                 "Gradient bucket size in elements (default: one bucket, or max(40M, 1M x DP) "
                 "with --overlap-grad-reduce)")
      ->group(p);
  app.add_flag("--use-tp-pp-dp-mapping", par.use_tp_pp_dp_mapping, "Rank order tp-cp-ep-pp-dp")
      ->group(p);
  int64_t timeout_minutes = 10;
  app.add_option("--distributed-timeout-minutes", timeout_minutes, "Collective timeout")->group(p);
  std::string backend = "nccl";
  app.add_option("--distributed-backend", backend, "nccl or gloo (mtron picks MPI on CPUs)")
      ->check(CLI::IsMember({"nccl", "gloo"}))
      ->group(p);
  app.add_flag("--print-layout", a.print_layout, "Print the rank map of this layout and exit")
      ->group(p);
  app.add_option("--world-size", a.layout_world_size,
                 "With --print-layout: the number of ranks to lay out (default: this launch's)")
      ->group(p);
  std::string dispatcher = "allgather", router_dtype = "fp32", cp_comm = "p2p";
  app.add_option("--moe-token-dispatcher-type", dispatcher,
                 "allgather or alltoall (mtron exchanges tokens all-to-all over EP either way; "
                 "the result is the same)")
      ->check(CLI::IsMember({"allgather", "alltoall"}))
      ->group(p);
  app.add_option("--moe-router-dtype", router_dtype, "fp32 (mtron's router always runs in fp32)")
      ->check(CLI::IsMember({"fp32"}))
      ->group(p);
  app.add_option("--cp-comm-type", cp_comm, "p2p (ring attention; the only one mtron has)")
      ->check(CLI::IsMember({"p2p"}))
      ->group(p);

  const char* t = "Training";
  app.add_option("--micro-batch-size", par.micro_batch_size, "Sequences per micro-batch")->group(t);
  app.add_option("--global-batch-size", par.global_batch_size,
                 "Sequences per iteration (default: micro-batch x DP)")
      ->group(t);
  app.add_option("--train-iters", a.train_iters, "Iterations to train")->group(t);
  app.add_option("--seed", a.seed, "Random seed (default 1234)")->group(t);
  app.add_flag_callback(
         "--bf16", [&a] { a.precision = Precision::kBF16; },
         "bf16 mixed precision (fp32 master weights and gradients)")
      ->group(t);
  app.add_option("--device", a.device,
                 "mtron only: cpu (default) or cuda (one GPU per rank, the node-local rank's; "
                 "NCCL between ranks)")
      ->transform(
          choices(std::map<std::string, Device>{{"cpu", Device::kCPU}, {"cuda", Device::kCUDA}}))
      ->group(t);
  app.add_option("--recompute-granularity", a.recompute.granularity, "full or selective")
      ->transform(choices(std::map<std::string, RecomputeGranularity>{
          {"full", RecomputeGranularity::kFull}, {"selective", RecomputeGranularity::kSelective}}))
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
      ->group(t);
  app.add_option("--recompute-num-layers", a.recompute.num_layers, "Layers per recompute group")
      ->group(t);

  const char* o = "Optimizer";
  std::string optimizer = "adam";
  app.add_option("--optimizer", optimizer, "adam (AdamW, decoupled weight decay)")
      ->check(CLI::IsMember({"adam"}))
      ->group(o);
  app.add_option("--lr", a.lr, "Peak learning rate")->group(o);
  app.add_option("--min-lr", a.min_lr, "Minimum learning rate (default 0)")->group(o);
  app.add_option("--lr-decay-style", a.lr_decay_style,
                 "constant, linear, cosine, inverse-square-root")
      ->transform(choices(std::map<std::string, optim::LrDecayStyle>{
          {"constant", optim::LrDecayStyle::kConstant},
          {"linear", optim::LrDecayStyle::kLinear},
          {"cosine", optim::LrDecayStyle::kCosine},
          {"inverse-square-root", optim::LrDecayStyle::kInverseSquareRoot}}))
      ->group(o);
  app.add_option("--lr-decay-iters", a.lr_decay_iters,
                 "Decay over this many iterations (default: --train-iters)")
      ->group(o);
  auto* warm_iters =
      app.add_option("--lr-warmup-iters", a.lr_warmup_iters, "Linear warmup iterations")->group(o);
  app.add_option("--lr-warmup-fraction", a.lr_warmup_fraction, "Warmup as a fraction of decay")
      ->excludes(warm_iters)
      ->group(o);
  app.add_option("--lr-warmup-init", a.lr_warmup_init, "Learning rate at the start of warmup")
      ->group(o);
  app.add_option("--weight-decay", a.adam.weight_decay, "Decoupled weight decay (default 0.01)")
      ->group(o);
  app.add_option("--clip-grad", a.adam.clip_grad, "Global gradient-norm clip (default 1.0)")
      ->group(o);
  app.add_option("--adam-beta1", a.adam.beta1, "Adam beta1 (default 0.9)")->group(o);
  app.add_option("--adam-beta2", a.adam.beta2, "Adam beta2 (default 0.999)")->group(o);
  app.add_option("--adam-eps", a.adam.eps, "Adam epsilon (default 1e-8)")->group(o);

  const char* d = "Data";
  app.add_flag("--mock-data", a.mock_data, "Synthetic data, deterministic per sample index")
      ->group(d);
  app.add_option("--tokenizer-type", a.tokenizer_type, "NullTokenizer, GPT2BPETokenizer, ...")
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
  app.add_option("--metrics-file", a.metrics_file, "JSONL metrics (default ./mtron-metrics.jsonl)")
      ->group(l);

  checkpoint::add_checkpoint_flags(app, a.checkpoint);

  for (const char* f : kNoOpFlags) {
    app.add_flag_callback(
           f, [&a, f] { a.notes.push_back(std::string(f) + " has no effect in mtron"); })
        ->group("");
  }
  std::string transformer_impl;
  app.add_option("--transformer-impl", transformer_impl, "")->group("");
  bool fp16 = false;
  app.add_flag("--fp16", fp16, "")->group("");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return false;
  } catch (const CLI::ParseError& e) {
    throw Error(e.what());
  }
  if (!transformer_impl.empty()) a.notes.push_back("--transformer-impl has no effect in mtron");
  MT_CHECK(!fp16, "--fp16 is not supported yet; use --bf16 (or fp32, the default)");
  MT_CHECK(a.model.hidden_dropout == 0.0f && a.model.attention_dropout == 0.0f,
           "dropout is not supported yet: pass --hidden-dropout 0 --attention-dropout 0 "
           "(mtron's default)");

  // The model's vocabulary is the tokenizer's; NullTokenizer takes --vocab-size.
  MT_CHECK(a.mock_data || !a.data_path.empty(), "no data: pass --data-path PREFIX or --mock-data");
  MT_CHECK(!(a.mock_data && !a.data_path.empty()),
           "--mock-data and --data-path exclude each other");
  if (a.tokenizer_type.empty()) {
    MT_CHECK(a.mock_data, "--data-path needs --tokenizer-type (one of ",
             fmt::format("{}", fmt::join(data::tokenizer_types(), ", ")), ")");
    a.tokenizer_type = "NullTokenizer";
  }
  if (a.tokenizer_type == "NullTokenizer") {
    MT_CHECK(a.vocab_size > 0, "--tokenizer-type NullTokenizer needs --vocab-size");
    a.model.vocab_size = a.vocab_size;
  } else {
    data::TokenizerOptions o;
    o.type = a.tokenizer_type;
    o.vocab_file = a.vocab_file;
    o.merge_file = a.merge_file;
    o.model = a.tokenizer_model;
    a.model.vocab_size = data::make_tokenizer(o)->vocab_size();
  }
  MT_CHECK(a.model.num_layers != 0, "--num-layers is required");
  MT_CHECK(a.model.hidden_size != 0, "--hidden-size is required");
  MT_CHECK(a.model.num_attention_heads != 0, "--num-attention-heads is required");
  MT_CHECK(a.model.seq_length != 0, "--seq-length is required");
  a.model.finalize();
  MT_CHECK(!a.model.is_moe() || !a.model.add_bias_linear,
           "--num-experts: experts with biases are not supported yet; pass --disable-bias-linear");

  MT_CHECK(a.layout_world_size == 0 || a.print_layout, "--world-size is only for --print-layout");
  par.world_size = a.layout_world_size > 0 ? a.layout_world_size : world_size;
  MT_CHECK(par.micro_batch_size != 0, "--micro-batch-size is required");
  par.finalize(a.model);
  // Megatron's MoELayer raises this in training: each TP rank must route distinct tokens.
  MT_CHECK(!a.model.is_moe() || par.tp() == 1 || par.sequence_parallel,
           "During training, performance may degrade if MoE and tensor parallelism are "
           "enabled without also enabling sequence parallelism (add --sequence-parallel)");

  MT_CHECK(a.train_iters > 0, "--train-iters is required and must be positive");
  MT_CHECK(a.lr >= 0, "--lr is required");
  MT_CHECK(a.min_lr <= a.lr, "--min-lr (", a.min_lr, ") must be <= --lr (", a.lr, ")");
  MT_CHECK(a.log_interval > 0, "--log-interval must be positive");
  MT_CHECK(a.eval_interval > 0, "--eval-interval must be positive");
  MT_CHECK(a.eval_iters >= 0, "--eval-iters must be >= 0");
  MT_CHECK(a.adam.beta1 >= 0 && a.adam.beta1 < 1, "--adam-beta1 must be in [0, 1)");
  MT_CHECK(a.adam.beta2 >= 0 && a.adam.beta2 < 1, "--adam-beta2 must be in [0, 1)");
  MT_CHECK(a.adam.eps > 0, "--adam-eps must be positive");
  if (a.lr_decay_iters == 0) a.lr_decay_iters = a.train_iters;
  if (a.lr_warmup_fraction >= 0) {
    a.lr_warmup_iters = int64_t(a.lr_warmup_fraction * double(a.lr_decay_iters));
  }
  MT_CHECK(a.lr_warmup_iters >= 0, "--lr-warmup-iters must be >= 0");
  if (a.recompute.granularity == RecomputeGranularity::kSelective) {
    MT_CHECK(!recompute_method_set,
             "recompute method is not yet supported for selective "
             "recomputing granularity");
  }
  MT_CHECK(a.recompute.num_layers >= 1, "--recompute-num-layers must be >= 1");
  MT_CHECK(a.ddp_bucket_size >= 0, "--ddp-bucket-size must be >= 0");
  checkpoint::validate_checkpoint_args(a.checkpoint);
  if (a.device == Device::kCUDA) {
    // What still runs on the host in these features (see docs/cuda.md).
    MT_CHECK(!a.model.is_moe() || (par.ep() == 1 && par.etp() == 1),
             "--device cuda: --expert-model-parallel-size and --expert-tensor-parallel-size > 1 "
             "are not supported yet (the expert dispatch exchanges its counts on the host; the "
             "latter defaults to --tensor-model-parallel-size: with TP > 1 pass "
             "--expert-tensor-parallel-size 1)");
    MT_CHECK(par.cp() == 1, "--device cuda: --context-parallel-size > 1 is not supported yet");
    MT_CHECK(a.checkpoint.save.empty() && a.checkpoint.load.empty(),
             "--device cuda: --save/--load are not supported yet");
  }
  return true;
}

}  // namespace mtron::train
