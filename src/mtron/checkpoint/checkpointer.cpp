#include "mtron/checkpoint/checkpointer.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "mtron/core/log.h"
#include "mtron/core/moe_layer_freq.h"
#include "mtron/core/timer.h"

namespace mtron::checkpoint {

namespace {

// The checkpoint's model must be this run's model: every field that changes a tensor's shape
// or the function the weights compute, named by its flag.
void check_model(const ModelConfig& ck, const ModelConfig& run, const std::string& dir) {
  auto same = [&](bool eq, const char* flag, auto a, auto b) {
    MT_CHECK(eq, "checkpoint ", dir, " was trained with ", flag, " ", a, " but this run has ", b);
  };
  same(ck.num_layers == run.num_layers, "--num-layers", ck.num_layers, run.num_layers);
  same(ck.hidden_size == run.hidden_size, "--hidden-size", ck.hidden_size, run.hidden_size);
  same(ck.num_attention_heads == run.num_attention_heads, "--num-attention-heads",
       ck.num_attention_heads, run.num_attention_heads);
  same(ck.query_groups() == run.query_groups(), "query groups (--num-query-groups)",
       ck.query_groups(), run.query_groups());
  same(ck.kv_channels == run.kv_channels, "--kv-channels", ck.kv_channels, run.kv_channels);
  const MlaConfig &a = ck.mla, &b = run.mla;
  same(a.enabled == b.enabled, "--multi-latent-attention", a.enabled ? "on" : "off",
       b.enabled ? "on" : "off");
  if (b.enabled) {
    same(a.q_lora_rank == b.q_lora_rank, "--q-lora-rank", a.q_lora_rank, b.q_lora_rank);
    same(a.kv_lora_rank == b.kv_lora_rank, "--kv-lora-rank", a.kv_lora_rank, b.kv_lora_rank);
    same(a.qk_head_dim == b.qk_head_dim, "--qk-head-dim", a.qk_head_dim, b.qk_head_dim);
    same(a.qk_pos_emb_head_dim == b.qk_pos_emb_head_dim, "--qk-pos-emb-head-dim",
         a.qk_pos_emb_head_dim, b.qk_pos_emb_head_dim);
    same(a.v_head_dim == b.v_head_dim, "--v-head-dim", a.v_head_dim, b.v_head_dim);
  }
  // (a model whose every layer is MoE has no dense MLP: --ffn-hidden-size shapes nothing)
  if (run.num_moe_layers() < run.num_layers) {
    same(ck.ffn_hidden_size == run.ffn_hidden_size, "--ffn-hidden-size", ck.ffn_hidden_size,
         run.ffn_hidden_size);
  }
  same(ck.swiglu == run.swiglu, "--swiglu", ck.swiglu ? "on" : "off", run.swiglu ? "on" : "off");
  same(ck.rotary_interleaved == run.rotary_interleaved, "--rotary-interleaved",
       ck.rotary_interleaved ? "on" : "off", run.rotary_interleaved ? "on" : "off");
  same(ck.squared_relu == run.squared_relu, "--squared-relu", ck.squared_relu ? "on" : "off",
       run.squared_relu ? "on" : "off");
  same(ck.normalization == run.normalization, "--normalization",
       ck.normalization == Normalization::kLayerNorm ? "LayerNorm" : "RMSNorm",
       run.normalization == Normalization::kLayerNorm ? "LayerNorm" : "RMSNorm");
  same(ck.position_embedding_type == run.position_embedding_type, "--position-embedding-type",
       int(ck.position_embedding_type), int(run.position_embedding_type));
  same(ck.untie_embeddings_and_output_weights == run.untie_embeddings_and_output_weights,
       "--untie-embeddings-and-output-weights",
       ck.untie_embeddings_and_output_weights ? "on" : "off",
       run.untie_embeddings_and_output_weights ? "on" : "off");
  same(ck.apply_layernorm_1p == run.apply_layernorm_1p, "--apply-layernorm-1p",
       ck.apply_layernorm_1p ? "on" : "off", run.apply_layernorm_1p ? "on" : "off");
  same(ck.qk_layernorm == run.qk_layernorm, "--qk-layernorm", ck.qk_layernorm ? "on" : "off",
       run.qk_layernorm ? "on" : "off");
  same(ck.add_bias_linear == run.add_bias_linear, "biases (--disable-bias-linear)",
       ck.add_bias_linear ? "on" : "off", run.add_bias_linear ? "on" : "off");
  same(ck.qkv_bias() == run.qkv_bias(), "a QKV bias (--add-qkv-bias)", ck.qkv_bias() ? "on" : "off",
       run.qkv_bias() ? "on" : "off");
  same(ck.vocab_size == run.vocab_size, "a vocabulary of", ck.vocab_size, run.vocab_size);
  if (run.position_embedding_type == PositionEmbedding::kLearnedAbsolute) {
    same(ck.max_position_embeddings == run.max_position_embeddings, "--max-position-embeddings",
         ck.max_position_embeddings, run.max_position_embeddings);
  }
  if (run.position_embedding_type == PositionEmbedding::kRope) {
    same(ck.rotary_percent == run.rotary_percent, "--rotary-percent", ck.rotary_percent,
         run.rotary_percent);
    if (ck.rotary_base != run.rotary_base) {
      log_warn("checkpoint was trained with --rotary-base {}; continuing with {}", ck.rotary_base,
               run.rotary_base);
    }
    const auto scaling = [](const ModelConfig& m) {
      return m.rope_scaling
                 ? str("--use-rope-scaling --rope-scaling-factor ", m.rope_scaling_factor)
                 : std::string("no --use-rope-scaling");
    };
    if (scaling(ck) != scaling(run))
      log_warn("checkpoint was trained with {}; continuing with {}", scaling(ck), scaling(run));
  }
  same(ck.mtp_num_layers == run.mtp_num_layers, "--mtp-num-layers", ck.mtp_num_layers,
       run.mtp_num_layers);
  same(ck.num_experts == run.num_experts, "--num-experts", ck.num_experts, run.num_experts);
  if (run.is_moe()) {
    same(ck.moe_ffn() == run.moe_ffn(), "--moe-ffn-hidden-size", ck.moe_ffn(), run.moe_ffn());
    same(ck.moe_layer_freq == run.moe_layer_freq && ck.moe_layer_pattern == run.moe_layer_pattern,
         "--moe-layer-freq", moe_layer_freq_string(ck.moe_layer_freq, ck.moe_layer_pattern),
         moe_layer_freq_string(run.moe_layer_freq, run.moe_layer_pattern));
    same(ck.moe_router_num_groups == run.moe_router_num_groups &&
             ck.moe_router_group_topk == run.moe_router_group_topk,
         "--moe-router-num-groups / --moe-router-group-topk",
         fmt::format("{} / {}", ck.moe_router_num_groups, ck.moe_router_group_topk),
         fmt::format("{} / {}", run.moe_router_num_groups, run.moe_router_group_topk));
    same(ck.moe_router_topk_scaling_factor == run.moe_router_topk_scaling_factor,
         "--moe-router-topk-scaling-factor", ck.moe_router_topk_scaling_factor,
         run.moe_router_topk_scaling_factor);
    same(ck.moe_router_enable_expert_bias == run.moe_router_enable_expert_bias,
         "--moe-router-enable-expert-bias", ck.moe_router_enable_expert_bias ? "on" : "off",
         run.moe_router_enable_expert_bias ? "on" : "off");
    same(ck.moe_shared_expert_intermediate_size == run.moe_shared_expert_intermediate_size,
         "--moe-shared-expert-intermediate-size", ck.moe_shared_expert_intermediate_size,
         run.moe_shared_expert_intermediate_size);
    same(ck.moe_router_topk == run.moe_router_topk, "--moe-router-topk", ck.moe_router_topk,
         run.moe_router_topk);
    auto score = [](const ModelConfig& c) {
      return c.moe_router_score_function == RouterScore::kSigmoid ? "sigmoid" : "softmax";
    };
    same(ck.moe_router_score_function == run.moe_router_score_function,
         "--moe-router-score-function", score(ck), score(run));
    // The training objective may change on purpose (e.g. a fine-tune without the aux loss).
    const bool objective =
        ck.moe_router_load_balancing_type == run.moe_router_load_balancing_type &&
        ck.moe_aux_loss_coeff == run.moe_aux_loss_coeff &&
        ck.moe_z_loss_coeff == run.moe_z_loss_coeff &&
        ck.moe_expert_capacity_factor == run.moe_expert_capacity_factor &&
        ck.moe_token_drop_policy == run.moe_token_drop_policy;
    if (!objective) {
      log_warn(
          "checkpoint was trained with other MoE load balancing / capacity settings "
          "(--moe-router-load-balancing-type, --moe-aux-loss-coeff, --moe-z-loss-coeff, "
          "--moe-expert-capacity-factor, --moe-token-drop-policy); continuing with this run's");
    }
  }
  if (ck.norm_epsilon != run.norm_epsilon) {
    log_warn("checkpoint was trained with --norm-epsilon {}; continuing with {}", ck.norm_epsilon,
             run.norm_epsilon);
  }
}

// Megatron's OptimizerParamScheduler check: the flags' schedule must be the checkpoint's.
void check_lr(const optim::LrSchedule& ck, const optim::LrSchedule& run, const std::string& dir) {
  auto same = [&](bool eq, const char* what, auto a, auto b) {
    MT_CHECK(eq, "learning-rate schedule: checkpoint ", dir, " has ", what, " ", a,
             " but this run has ", b,
             " (pass the checkpoint's values, or --override-opt_param-scheduler to use the "
             "new ones)");
  };
  same(ck.lr == run.lr, "--lr", ck.lr, run.lr);
  same(ck.min_lr == run.min_lr, "--min-lr", ck.min_lr, run.min_lr);
  same(ck.warmup_init == run.warmup_init, "--lr-warmup-init", ck.warmup_init, run.warmup_init);
  same(ck.warmup_samples == run.warmup_samples, "warmup samples (--lr-warmup-*)", ck.warmup_samples,
       run.warmup_samples);
  same(ck.decay_samples == run.decay_samples, "decay samples (--lr-decay-iters/--train-iters)",
       ck.decay_samples, run.decay_samples);
  same(ck.style == run.style, "--lr-decay-style", lr_style_name(ck.style),
       lr_style_name(run.style));
  if (run.style != optim::LrDecayStyle::kWsd) return;
  same(ck.wsd_decay_samples == run.wsd_decay_samples, "WSD annealing samples (--lr-wsd-decay-*)",
       ck.wsd_decay_samples, run.wsd_decay_samples);
  same(ck.wsd_style == run.wsd_style, "--lr-wsd-decay-style", wsd_style_name(ck.wsd_style),
       wsd_style_name(run.wsd_style));
}

std::string layout_str(const LayoutRecord& l, bool moe) {
  return fmt::format(
      "TP{} PP{}{} DP{}{}{}{}{}", l.tp, l.pp, l.cp > 1 ? fmt::format(" CP{}", l.cp) : "", l.dp,
      l.vpp > 1 ? fmt::format(" VPP{}", l.vpp) : "",
      moe ? fmt::format(" EP{} ETP{}", l.ep, l.etp) : "", l.sequence_parallel ? " SP" : "",
      l.distributed_optimizer ? " distributed optimizer" : "");
}

}  // namespace

void add_checkpoint_flags(CLI::App& app, CheckpointArgs& a) {
  const char* g = "Checkpointing";
  app.add_option("--save", a.save, "Directory to save checkpoints to")->group(g);
  app.add_option("--save-interval", a.save_interval, "Iterations between checkpoints")->group(g);
  app.add_option("--load", a.load, "Directory to load a checkpoint from")->group(g);
  app.add_flag("--no-load-optim", a.no_load_optim, "Do not load the optimizer state")->group(g);
  app.add_flag("--no-load-rng", a.no_load_rng,
               "Do not require the checkpoint's seed (continue with --seed)")
      ->group(g);
  app.add_flag("--finetune", a.finetune,
               "Load the weights only (no optimizer, no RNG) and start at iteration 0")
      ->group(g);
  app.add_flag("--exit-signal-handler", a.exit_signal_handler,
               "On SIGTERM/SIGINT, save a checkpoint and exit 0")
      ->group(g);
  app.add_option("--exit-interval", a.exit_interval,
                 "Save and exit when the iteration is a multiple of this")
      ->group(g);
  app.add_option("--exit-duration-in-mins", a.exit_duration_in_mins,
                 "Save and exit after this many minutes")
      ->group(g);
  app.add_option("--ckpt-step", a.ckpt_step, "Load this iteration of --load (default: latest)")
      ->group(g);
  app.add_flag("--no-save-optim", a.no_save_optim, "Save without the optimizer state")->group(g);
  app.add_flag("--no-save-rng", a.no_save_rng, "Save without the seed")->group(g);
  app.add_option("--ckpt-format", a.ckpt_format,
                 "Accepted for Megatron scripts; mtron writes its own reshardable format")
      ->check(CLI::IsMember({"torch_dist", "torch", "torch_dcp", "fsdp_dtensor"}))
      ->group(g);
  app.add_option("--keep-last-n-checkpoints", a.keep_last_n_checkpoints,
                 "Keep only the newest N checkpoints in --save (default: all)")
      ->group(g);
  app.add_option("--save-retain-interval", a.save_retain_interval,
                 "Keep the checkpoints of iterations that are multiples of N and the latest; "
                 "delete the others as newer ones are saved (default: keep all)")
      ->group(g);
  app.add_flag("--override-opt_param-scheduler,--override-lr-scheduler",
               a.override_opt_param_scheduler,
               "Use the flags' learning-rate schedule instead of requiring the checkpoint's")
      ->group(g);
  app.add_flag("--use-checkpoint-opt_param-scheduler,--use-checkpoint-lr-scheduler",
               a.use_checkpoint_opt_param_scheduler,
               "Use the checkpoint's learning-rate schedule instead of the flags'")
      ->group(g);
  app.add_flag("--use-checkpoint-args", a.use_checkpoint_args,
               "Override model-related command-line arguments with arguments from checkpoint")
      ->group(g);
  app.add_flag("--use-mp-args-from-checkpoint-args", a.use_mp_args_from_checkpoint_args,
               "Copy model parallelism command-line arguments from checkpoint")
      ->group(g);
  app.add_flag("!--no-use-tokenizer-model-from-checkpoint-args",
               a.use_tokenizer_model_from_checkpoint_args,
               "If set, do not use tokenizer model path from checkpoint")
      ->group(g);
}

void validate_checkpoint_args(const CheckpointArgs& a) {
  MT_CHECK(a.save.empty() || a.save_interval > 0,
           "--save-interval must be a positive number when --save is given");
  MT_CHECK(a.save_interval >= 0, "--save-interval must be positive (got ", a.save_interval, ")");
  MT_CHECK(a.exit_interval >= 0, "--exit-interval must be >= 0 (got ", a.exit_interval, ")");
  MT_CHECK(a.exit_duration_in_mins >= 0, "--exit-duration-in-mins must be >= 0 (got ",
           a.exit_duration_in_mins, ")");
  MT_CHECK(a.ckpt_step >= -1, "--ckpt-step must be >= 0 (got ", a.ckpt_step, ")");
  MT_CHECK(a.keep_last_n_checkpoints >= 0, "--keep-last-n-checkpoints must be >= 0 (got ",
           a.keep_last_n_checkpoints, ")");
  MT_CHECK(a.save_retain_interval >= 0, "--save-retain-interval must be positive (got ",
           a.save_retain_interval, ")");
  MT_CHECK(!(a.override_opt_param_scheduler && a.use_checkpoint_opt_param_scheduler),
           "both --override-opt_param-scheduler and --use-checkpoint-opt_param-scheduler are set "
           "(Megatron: 'both override and use-checkpoint are set.')");
}

void check_save_dir(const std::string& dir, int rank) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  MT_CHECK(!ec, "--save ", dir, ": cannot create the directory: ", ec.message());
  const fs::path probe = fs::path(dir) / fmt::format(".mtron-write-test.{}.{}", rank, getpid());
  FILE* f = std::fopen(probe.c_str(), "w");
  const bool written = f && std::fputs("ok\n", f) >= 0;
  const bool closed = f && std::fclose(f) == 0;
  const int err = errno;
  fs::remove(probe, ec);
  MT_CHECK(written && closed, "--save ", dir, ": cannot write there: ", std::strerror(err));
}

Checkpointer::Checkpointer(CheckpointArgs args, RunInfo info, const ParallelState& ps)
    : a_(std::move(args)), info_(std::move(info)), ps_(ps), start_time_(now_seconds()) {
  groups_ = RankGroups{&ps_.world(), &ps_.dp_cp(), ps_.tp_rank(), &ps_.edp(), ps_.etp_rank()};
  // Tokenizer files are recorded by absolute path: export and generate run from anywhere.
  for (std::string* f :
       {&info_.tokenizer.vocab_file, &info_.tokenizer.merge_file, &info_.tokenizer.model}) {
    if (!f->empty()) *f = std::filesystem::absolute(*f).lexically_normal().string();
  }
  if (a_.no_save_rng) info_.seed.reset();
  if (a_.exit_signal_handler) signals_ = std::make_unique<ExitSignalHandler>();
}

Checkpointer::~Checkpointer() = default;

std::optional<std::string> checkpoint_to_load(const CheckpointArgs& a) {
  if (a.load.empty()) return std::nullopt;
  if (a.ckpt_step >= 0)
    return (std::filesystem::path(a.load) / iteration_dir_name(a.ckpt_step)).string();
  return find_checkpoint(a.load);
}

void Checkpointer::load(const TrainView& v) {
  if (a_.load.empty()) return;
  const bool root = ps_.rank() == 0;
  const std::optional<std::string> dir = checkpoint_to_load(a_);
  if (!dir) {
    if (root) {
      log_warn(
          "could not find a checkpoint in --load {} (no latest_checkpointed_iteration.txt): "
          "will not load any checkpoint and will start from random",
          a_.load);
    }
    return;
  }
  const Manifest m = read_manifest(*dir);
  check_model(m.model, info_.model, *dir);
  bool load_optim = !a_.no_load_optim && !a_.finetune;
  if (load_optim && !m.has_optimizer) {
    if (root) log_info("note: {} has no optimizer state; the optimizer starts fresh", *dir);
    load_optim = false;
  }
  if (load_optim) {
    const char* saved = m.muon ? "muon" : "adam";
    MT_CHECK(bool(m.muon) == bool(info_.muon), "checkpoint ", *dir, " holds --optimizer ", saved,
             " state; pass --optimizer ", saved,
             " to resume it, or --no-load-optim to start this run's optimizer afresh");
  }
  if (!a_.no_load_rng && !a_.finetune && m.seed && info_.seed && *m.seed != *info_.seed) {
    MT_CHECK(false, "checkpoint ", *dir, " was trained with --seed ", *m.seed, "; pass --seed ",
             *m.seed, " to resume exactly, or --no-load-rng to continue with --seed ", *info_.seed);
  }
  if (load_optim && a_.use_checkpoint_opt_param_scheduler && m.lr_schedule) {
    *v.schedule = *m.lr_schedule;
    info_.lr_schedule = m.lr_schedule;  // and later saves record the schedule in use
    if (root)
      log_info(
          "note: the learning-rate schedule is the checkpoint's "
          "(--use-checkpoint-opt_param-scheduler)");
  } else if (load_optim && !a_.override_opt_param_scheduler && m.lr_schedule && info_.lr_schedule) {
    check_lr(*m.lr_schedule, *info_.lr_schedule, *dir);
  }
  if (root) {
    log_info("loading checkpoint {} (iteration {}, saved under {}) under {}{}", *dir, m.iteration,
             layout_str(m.layout, m.model.is_moe()), layout_str(info_.layout, m.model.is_moe()),
             load_optim ? "" : " (weights only)");
  }
  load_checkpoint(*dir, v.chunks, groups_, load_optim);
  if (load_optim) v.optimizer->set_steps(m.optimizer_steps);
  if (load_optim && v.scaler && v.scaler->dynamic()) {
    if (m.grad_scaler) {
      v.scaler->set_state(*m.grad_scaler);
    } else if (root) {
      log_info("note: {} has no loss-scaler state; the loss scale starts at --initial-loss-scale",
               *dir);
    }
  }
  if (a_.finetune) {
    *v.iteration = 0;
    *v.consumed_samples = 0;
    *v.lr_samples = 0;
  } else {
    *v.iteration = m.iteration;
    *v.consumed_samples = m.consumed_samples;
    *v.lr_samples = m.lr_schedule ? m.lr_samples : m.consumed_samples;
  }
  last_saved_ = *v.iteration;
}

void Checkpointer::save(const TrainView& v) {
  if (a_.save.empty() || last_saved_ == *v.iteration) return;
  std::vector<ChunkState> chunks = v.chunks;
  if (a_.no_save_optim) {
    for (ChunkState& c : chunks) c.exp_avg = c.exp_avg_sq = {};
  }
  Progress progress{*v.iteration, *v.consumed_samples, v.optimizer->steps(), *v.lr_samples, {}};
  if (v.scaler && v.scaler->dynamic()) progress.grad_scaler = v.scaler->state();
  save_checkpoint(a_.save, chunks, info_, progress, groups_,
                  {a_.keep_last_n_checkpoints, a_.save_retain_interval});
  last_saved_ = *v.iteration;
}

bool Checkpointer::after_iteration(const TrainView& v) {
  const int64_t it = *v.iteration;
  const bool root = ps_.rank() == 0;
  Comm& world = ps_.world();
  if (signals_) {
    // Every rank must agree, or some would save and exit while others wait in a collective.
    const int sig = int(world.all_reduce_max(double(signals_->received())));
    if (sig > 0) {
      save(v);
      if (root)
        log_info("exiting program after receiving {}.", sig == SIGINT ? "SIGINT" : "SIGTERM");
      return true;
    }
  }
  if (!a_.save.empty() && it % a_.save_interval == 0) save(v);
  if (a_.exit_duration_in_mins > 0) {
    const double minutes = (now_seconds() - start_time_) / 60.0;
    const double done = world.all_reduce_max(minutes > a_.exit_duration_in_mins ? 1 : 0);
    if (done > 0) {
      save(v);
      if (root) log_info("exiting program after {:.2f} minutes", minutes);
      return true;
    }
  }
  if (a_.exit_interval > 0 && it % a_.exit_interval == 0) {
    save(v);
    world.barrier();
    if (root) log_info("exiting program at iteration {}", it);
    return true;
  }
  return false;
}

void Checkpointer::at_end(const TrainView& v) {
  if (*v.iteration > 0) save(v);
}

}  // namespace mtron::checkpoint
