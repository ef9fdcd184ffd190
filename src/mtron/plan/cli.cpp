#include "mtron/plan/cli.h"

#include <fmt/core.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "mtron/core/error.h"
#include "mtron/core/hardware.h"
#include "mtron/core/model_flags.h"
#include "mtron/core/parallel_flags.h"
#include "mtron/plan/calibrate.h"
#include "mtron/plan/calibration.h"
#include "mtron/plan/doctor.h"
#include "mtron/plan/emit.h"
#include "mtron/plan/model_catalog.h"
#include "mtron/plan/report.h"
#include "mtron/plan/search.h"

namespace mtron::plan {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Parses `args` (without the command name) with CLI11; help and parse errors print and give
// the exit code.
std::optional<int> parse(CLI::App& app, std::vector<std::string> args) {
  std::reverse(args.begin(), args.end());  // CLI11 takes a vector in reverse order
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return std::nullopt;
}

std::string self_path() {
  std::error_code ec;
  const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("mtron") : p.string();
}

std::string list_catalogs() {
  std::string s = "models (catalog/models/*.json; any other shape: Megatron's model flags):\n";
  for (const auto& e : model_catalog()) s += fmt::format("  {:<20} {}\n", e.name, e.description);
  s += "\nhardware (catalog/hardware/*.json):\n";
  for (const auto& h : hardware_catalog()) {
    const double n = h.is_cpu ? h.gpus_per_node : 1;
    s += fmt::format("  {:<20} {}: bf16 {:.4g}{} TFLOP/s dense, {:.0f} GiB{}\n", h.name,
                     h.description, h.peak_bf16 * n / 1e12,
                     h.peak_fp8 > 0 ? fmt::format(", fp8 {:.4g}", h.peak_fp8 * n / 1e12) : "",
                     h.memory_bytes / kGiB, h.is_cpu ? " (node)" : "");
  }
  s += "\nnetworks:\n";
  for (const auto& n : network_catalog()) s += fmt::format("  {:<20} {}\n", n.name, n.description);
  return s;
}

// Megatron's rules for --recompute-modules (TransformerConfig), with its messages; a plan's
// launch script runs FP8 with delayed scaling.
void check_plan_recompute_modules(const RecomputeModules& r, const ModelConfig& m, Precision p) {
  check_recompute_modules(r, m);
  MT_CHECK(p != Precision::kFP8 ||
               !(r.has(RecomputeModule::kMoeAct) || r.has(RecomputeModule::kLayernorm)),
           "Delayed scaling does not support moe_act and layernorm recompute for fp8 (the "
           "launch script runs --fp8-recipe delayed).");
}

// No layout fits: say why, and what would.
std::string nothing_fits(const ModelConfig& m,
                         const Cluster& c,
                         const PerfParams& perf,
                         const SearchOptions& o,
                         const SearchResult& r) {
  if (r.evaluated == 0) {
    return fmt::format("no valid layout of {} GPUs for this model{}{}", c.num_devices,
                       r.first_invalid_reason.empty() ? "" : ": e.g. ", r.first_invalid_reason);
  }
  std::string s = fmt::format("no layout fits in {:.1f} GiB per GPU with a {:.0f}% margin",
                              c.device().memory_bytes / kGiB, 100 * o.memory_margin);
  if (!r.too_big.empty()) {
    const Candidate& best = r.too_big.front();
    s += fmt::format(
        ": the smallest, {}, needs {:.1f} GiB ({:.1f} GiB weights, gradients and optimizer "
        "state; {:.1f} GiB activations)",
        layout_name(best.layout), best.memory.total() / kGiB, best.memory.model_state() / kGiB,
        (best.memory.activations + best.memory.working) / kGiB);
  }
  // What would fit: bf16 gradient buffers, more GPUs of the same kind, or the same count of
  // larger GPUs.
  if (o.grads_fp32 && o.precision != Precision::kFP32) {
    SearchOptions x = o;
    x.grads_fp32 = false;
    x.top = 1;
    const SearchResult rr = search_layouts(m, c, perf, x);
    if (!rr.plans.empty())
      s += fmt::format("; with --grad-reduce-in-bf16 (bf16 gradient buffers) {} would fit",
                       layout_name(rr.plans[0].layout));
  }
  for (int64_t k = 2; k <= 64; k *= 2) {
    Cluster more = c;
    more.num_devices = c.num_devices * k;
    if (!c.hardware.is_cpu) more.devices_per_node = c.devices_per_node;
    SearchOptions x = o;
    x.top = 1;
    if (x.global_batch_size % k) x.global_batch_size *= k;
    const SearchResult rr = search_layouts(m, more, perf_from_hardware(more, o.precision), x);
    if (!rr.plans.empty()) {
      s += fmt::format("; {} GPUs would fit ({})", more.num_devices,
                       layout_name(rr.plans[0].layout));
      break;
    }
  }
  if (!c.hardware.is_cpu) {
    for (const Hardware& h : hardware_catalog()) {
      if (h.is_cpu || h.memory_bytes <= c.hardware.memory_bytes * 1.2) continue;
      Cluster bigger = c;
      bigger.hardware = h;
      SearchOptions x = o;
      x.top = 1;
      const SearchResult rr = search_layouts(m, bigger, perf_from_hardware(bigger, o.precision), x);
      if (!rr.plans.empty()) {
        s += fmt::format("; or {} x {} ({})", c.num_devices, h.name,
                         layout_name(rr.plans[0].layout));
        break;
      }
    }
  }
  if (!o.recompute)
    s += "; a shorter --seq-length or a smaller --micro-batch-size lowers activations";
  return s;
}

int run_plan(std::vector<std::string> args) {
  CLI::App app{
      "Choose a parallel layout for training a model on a cluster: every valid TP/PP/CP/EP/DP "
      "layout with micro-batch size, interleaving, recompute and the distributed optimizer, "
      "ranked by predicted throughput among those that fit memory; the memory per GPU, step "
      "time, MFU and the reasons; launch scripts for `mtron train`.\n\n"
      "  mtron plan --model llama2-13b --hardware h100-sxm --gpus 8\n"
      "  mtron plan --num-layers 24 --hidden-size 2048 ... --gpus 64 --emit sbatch -o run.sh\n"
      "  mpirun -np 2 mtron plan --calibrate     (measure this CPU; then --hardware local-cpu)",
      "mtron plan"};
  app.set_help_flag("-h,--help", "Print this help message and exit");
  ModelConfig m;
  add_model_flags(app, m);
  app.add_option("--vocab-size", m.vocab_size,
                 "Size of vocab before EOD or padding (the tokenizer's vocabulary)")
      ->group("Model");

  std::string model_name, hardware = "h100-sxm", network, emit, output, calibration_file;
  int64_t gpus = 0, gpus_per_node = 0, nics_per_node = 0, pick = 1;
  SearchOptions o;
  bool json = false, list = false, calibrate = false, quick = false;
  bool fp32 = false, no_distopt = false, no_sp = false;
  PrecisionFlags prec;
  // The layout sizes a plan fixes, in `mtron train`'s flags (parallel_flags.h); 0: searched.
  ParallelConfig fixed;
  fixed.tensor_model_parallel_size = fixed.pipeline_model_parallel_size = 0;
  fixed.context_parallel_size = fixed.expert_model_parallel_size = 0;
  std::string fp8_format, recompute;
  TrainingArgs t;
  JobOptions job;
  std::vector<std::string> data_path;
  std::string split, tokenizer_type, tokenizer_model, vocab_file, merge_file, extra_args;

  app.add_option("--model", model_name,
                 "A catalog model (see --list); its flags come first, so model flags given "
                 "as well override them")
      ->group("model");
  auto* g = "cluster";
  app.add_option("--hardware", hardware,
                 "GPU type from the catalog, or local-cpu for this machine (mtron's CPU "
                 "backend: one MPI rank per device)")
      ->capture_default_str()
      ->group(g);
  app.add_option("--gpus,--num-gpus", gpus, "GPUs in the job (with local-cpu: MPI ranks); required")
      ->group(g);
  app.add_option("--gpus-per-node", gpus_per_node,
                 "GPUs per node (default: the hardware's; local-cpu: all ranks on one node)")
      ->group(g);
  app.add_option("--network", network,
                 "Inter-node network from the catalog (default: the "
                 "hardware's)")
      ->group(g);
  app.add_option("--nics-per-node", nics_per_node,
                 "Network adapters per node (default: the "
                 "hardware's)")
      ->group(g);

  g = "training";
  add_precision_flags(app, prec, g);
  app.add_flag("--fp32", fp32, "Plan fp32 training")->group(g);
  app.add_option("--fp8-format", fp8_format,
                 "Plan FP8 GEMMs (e4m3 or hybrid) on GPUs that have "
                 "them")
      ->check(CLI::IsMember({"e4m3", "hybrid"}))
      ->group(g);
  app.add_option("--fp8-amax-history-len", o.fp8_amax_history_len,
                 "With --fp8-format: delayed scaling's amax history (Megatron's default 1)")
      ->check(CLI::PositiveNumber)
      ->group(g);

  g = "layout search (each given size is fixed; unset: searched; --global-batch-size default: "
      "the catalog model's published batch)";
  add_parallel_flags(app, fixed, ParallelFlags::kSizes, g);
  app.add_option("--max-micro-batch-size", o.max_micro_batch_size,
                 "Largest micro-batch size searched")
      ->capture_default_str()
      ->group(g);
  app.add_option("--recompute-granularity", recompute, "Fix recompute: none, selective or full")
      ->check(CLI::IsMember({"none", "selective", "full"}))
      ->group(g);
  std::vector<std::string> recompute_modules;
  auto* modules_opt =
      app.add_option("--recompute-modules", recompute_modules,
                     "Fix selective recompute with these modules (Megatron's names: core_attn, "
                     "the default; moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts)")
          ->expected(0, -1)
          ->group(g);
  app.add_flag("--no-distributed-optimizer", no_distopt,
               "Do not shard the optimizer state (--use-distributed-optimizer is used by "
               "default wherever DP x CP > 1)")
      ->group(g);
  app.add_flag("--no-sequence-parallel", no_sp, "Do not use --sequence-parallel with TP > 1")
      ->group(g);
  bool no_tp_overlap = false;
  app.add_flag("--no-tp-comm-overlap", no_tp_overlap,
               "Plan without --tp-comm-overlap (TP communication overlapped with GEMMs, on by "
               "default on GPUs with TP > 1 and sequence parallelism)")
      ->group(g);
  app.add_flag("--overlap-moe-expert-parallel-comm", o.ep_comm_overlap,
               "Plan Megatron's overlap of one micro-batch's expert-parallel all-to-alls with "
               "another's computation (the interleaved 1F1B schedule; mtron's trainer accepts the "
               "flag and runs the all-to-alls in line)")
      ->group(g);
  app.add_flag("--allow-cross-node-tp", o.allow_cross_node_tp,
               "Also search TP larger than an NVLink domain")
      ->group(g);
  app.add_option("--memory-margin", o.memory_margin, "Fraction of device memory to keep free")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.9))
      ->group(g);

  g = "output";
  app.add_option("--top", o.top, "Plans to show")->capture_default_str()->group(g);
  app.add_flag("--json", json, "Print JSON instead of the table")->group(g);
  app.add_option("--emit", emit,
                 "Print a launch script for the chosen plan: mpirun, srun or "
                 "sbatch")
      ->check(CLI::IsMember({"mpirun", "srun", "sbatch"}))
      ->group(g);
  app.add_option("--pick", pick, "Which ranked plan --emit uses")->capture_default_str()->group(g);
  app.add_option("-o,--output", output, "Write the output (table, JSON or script) to this file")
      ->group(g);
  app.add_flag("--list", list, "List the catalog models, hardware and networks")->group(g);

  g = "calibration";
  app.add_flag("--calibrate", calibrate,
               "Measure this machine (GEMMs, memory bandwidth, MPI collectives) and store the "
               "fit; run under `mpirun -np N` for N ranks per node")
      ->group(g);
  app.add_option("--calibration", calibration_file,
                 "Calibration file (default $MTRON_CALIBRATION or "
                 "~/.cache/mtron/calibration.json); used with --hardware local-cpu when present")
      ->group(g);
  app.add_flag("--calibrate-quick", quick, "A short calibration (fewer shapes)")->group(g);
  std::string calibrate_device = "cpu";
  app.add_option("--device", calibrate_device,
                 "What --calibrate measures: cpu (this machine's cores, MPI) or cuda (this "
                 "node's GPUs, one rank per GPU: `mpirun -np <GPUs>`)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->group(g);

  g = "launch script (mtron train flags)";
  app.add_option("--train-iters", t.train_iters, "Iterations to train")
      ->capture_default_str()
      ->group(g);
  app.add_option("--lr", t.lr, "Peak learning rate")->capture_default_str()->group(g);
  app.add_option("--min-lr", t.min_lr, "Final learning rate")->capture_default_str()->group(g);
  app.add_option("--lr-decay-style", t.lr_decay_style, "constant, linear, cosine, ...")
      ->capture_default_str()
      ->group(g);
  app.add_option("--lr-warmup-iters", t.lr_warmup_iters, "Default: a tenth of --train-iters")
      ->group(g);
  app.add_option("--weight-decay", t.weight_decay, "AdamW weight decay")
      ->capture_default_str()
      ->group(g);
  app.add_option("--clip-grad", t.clip_grad, "Global gradient-norm clipping")
      ->capture_default_str()
      ->group(g);
  app.add_option("--adam-beta1", t.adam_beta1, "Adam beta1")->capture_default_str()->group(g);
  app.add_option("--adam-beta2", t.adam_beta2, "Adam beta2")->capture_default_str()->group(g);
  app.add_option("--seed", t.seed, "Random seed")->capture_default_str()->group(g);
  app.add_option("--log-interval", t.log_interval, "Default: 1 on a CPU, 10 on GPUs")->group(g);
  app.add_option("--eval-interval", t.eval_interval, "Default: --train-iters")->group(g);
  app.add_option("--eval-iters", t.eval_iters, "Validation iterations per evaluation")
      ->capture_default_str()
      ->group(g);
  app.add_option("--data-path", data_path, "Training data (default: --mock-data)")->group(g);
  app.add_option("--split", split, "Train/valid/test split of --data-path")->group(g);
  app.add_option("--tokenizer-type", tokenizer_type, "Tokenizer (with --data-path)")->group(g);
  app.add_option("--tokenizer-model", tokenizer_model, "SentencePiece/HF tokenizer file")->group(g);
  app.add_option("--vocab-file", vocab_file, "GPT-2 BPE vocabulary")->group(g);
  app.add_option("--merge-file", merge_file, "GPT-2 BPE merges")->group(g);
  app.add_option("--save", t.save, "Checkpoint directory to save to")->group(g);
  app.add_option("--load", t.load, "Checkpoint directory to resume from")->group(g);
  app.add_option("--save-interval", t.save_interval,
                 "Iterations between checkpoints (default: --train-iters)")
      ->group(g);
  app.add_option("--extra-args", extra_args, "More `mtron train` flags, appended verbatim")
      ->group(g);
  app.add_option("--job-name", job.job_name, "sbatch --job-name")->capture_default_str()->group(g);
  app.add_option("--time", job.time_limit, "sbatch --time")->capture_default_str()->group(g);
  app.add_option("--partition", job.partition, "sbatch --partition")->group(g);
  std::string mtron_binary;
  app.add_option("--mtron", mtron_binary,
                 "The mtron binary the script runs (default: this one, by absolute path; the "
                 "script's MTRON variable overrides it)")
      ->group(g);

  std::string command = "mtron plan";
  for (const auto& a : args) command += " " + a;
  // A catalog model's flags go first, so the user's own model flags override them.
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--model" && i + 1 < args.size()) model_name = args[i + 1];
    if (args[i].rfind("--model=", 0) == 0) model_name = args[i].substr(8);
  }
  int64_t catalog_gbs = 0;
  if (!model_name.empty()) {
    const ModelEntry& e = find_model(model_name);
    args.insert(args.begin(), e.args.begin(), e.args.end());
    catalog_gbs = e.global_batch_size;
  }
  if (auto rc = parse(app, args)) return *rc;

  auto write = [&](const std::string& text) {
    if (output.empty()) {
      std::fputs(text.c_str(), stdout);
      return;
    }
    std::ofstream out(output);
    MT_CHECK(out, "cannot write ", output);
    out << text;
    if (!emit.empty())
      std::filesystem::permissions(output, std::filesystem::perms::owner_exec,
                                   std::filesystem::perm_options::add);
    std::fprintf(stderr, "wrote %s\n", output.c_str());
  };

  if (list) {
    write(list_catalogs());
    return 0;
  }
  if (calibration_file.empty()) calibration_file = default_calibration_path();
  if (calibrate) return run_calibration({calibration_file, quick, calibrate_device == "cuda"});

  MT_CHECK(m.num_layers > 0 || !model_name.empty(),
           "give a model: --model NAME (see --list) or Megatron's model flags (--num-layers "
           "--hidden-size --num-attention-heads --seq-length --vocab-size ...)");
  m.finalize();
  MT_CHECK(gpus > 0, "--gpus is required (the number of GPUs, or MPI ranks with local-cpu)");
  const bool bf16 = prec.compute == Precision::kBF16, fp16 = prec.compute == Precision::kFP16;
  MT_CHECK(int(bf16) + int(fp16) + int(fp32) + int(!fp8_format.empty()) <= 1 ||
               (bf16 && !fp8_format.empty() && !fp16 && !fp32),
           "--bf16, --fp16, --fp32 and --fp8-format are exclusive (--fp8-format with --bf16 "
           "is fine)");
  o.precision = !fp8_format.empty() ? Precision::kFP8
                : fp16              ? Precision::kFP16
                : fp32              ? Precision::kFP32
                                    : Precision::kBF16;
  o.fp8_hybrid = fp8_format != "e4m3";
  if (!recompute.empty())
    o.recompute = recompute == "none"        ? RecomputeGranularity::kNone
                  : recompute == "selective" ? RecomputeGranularity::kSelective
                                             : RecomputeGranularity::kFull;
  if (modules_opt->count() > 0) {
    MT_CHECK(recompute.empty() || recompute == "selective",
             "--recompute-modules applies to --recompute-granularity selective only (got "
             "--recompute-granularity ",
             recompute, ")");
    o.recompute = RecomputeGranularity::kSelective;
    o.recompute_modules = parse_recompute_modules(recompute_modules);
    check_plan_recompute_modules(o.recompute_modules, m, o.precision);
  }
  o.distributed_optimizer = !no_distopt;
  o.sequence_parallel = !no_sp;
  o.grads_fp32 = !prec.grad_reduce_in_bf16;
  o.tp_comm_overlap = !no_tp_overlap;
  o.tp = fixed.tp();
  o.pp = fixed.pp();
  o.cp = fixed.cp();
  o.ep = fixed.ep();
  o.etp = fixed.etp();
  o.vpp = fixed.num_virtual_stages_per_pipeline_rank;
  if (fixed.num_layers_per_virtual_pipeline_stage > 0) {
    MT_CHECK(o.pp > 0 && m.num_layers % (o.pp * fixed.num_layers_per_virtual_pipeline_stage) == 0,
             "--num-layers-per-virtual-pipeline-stage needs --pipeline-model-parallel-size with "
             "--num-layers a multiple of both");
    o.vpp = m.num_layers / o.pp / fixed.num_layers_per_virtual_pipeline_stage;
  }
  MT_CHECK(
      fixed.decoder_first_pipeline_num_layers == 0 && fixed.decoder_last_pipeline_num_layers == 0,
      "--decoder-first/last-pipeline-num-layers: the planner chooses them (Megatron's uneven split "
      "with lighter first and last stages, where the pipeline size does not divide the layers)");
  o.pipeline_layout = fixed.pipeline_model_parallel_layout;
  o.cp_comm_type = fixed.cp_comm_type;
  o.hierarchical_cp = fixed.hierarchical_context_parallel_sizes;
  o.account_for_embedding = fixed.account_for_embedding_in_pipeline_split;
  o.account_for_loss = fixed.account_for_loss_in_pipeline_split;
  MT_CHECK(o.pipeline_layout.empty() || (o.pp > 0 && o.vpp == 0),
           "--pipeline-model-parallel-layout needs --pipeline-model-parallel-size and sets the "
           "virtual stages itself (no --num-virtual-stages-per-pipeline-rank or "
           "--num-layers-per-virtual-pipeline-stage)");
  MT_CHECK(fixed.microbatch_group_size_per_vp_stage == 0,
           "--microbatch-group-size-per-virtual-pipeline-stage: plans use Megatron's default "
           "groups of PP micro-batches (the time model prices that schedule)");
  o.micro_batch_size = fixed.micro_batch_size;
  o.global_batch_size = fixed.global_batch_size;
  // On GPUs no context parallelism unless asked for (--context-parallel-size).
  if (o.cp == 0 && !find_hardware(hardware).is_cpu) o.cp = 1;
  if (o.global_batch_size == 0) o.global_batch_size = catalog_gbs;
  MT_CHECK(o.global_batch_size > 0,
           "--global-batch-size is required for a model not in the catalog");

  Cluster c;
  c.hardware = find_hardware(hardware);
  c.num_devices = gpus;
  c.devices_per_node = gpus_per_node > 0   ? gpus_per_node
                       : c.hardware.is_cpu ? gpus
                                           : std::min<int64_t>(gpus, c.hardware.gpus_per_node);
  MT_CHECK(c.num_devices % c.devices_per_node == 0, "--gpus (", gpus,
           ") must be a multiple of --gpus-per-node (", c.devices_per_node, ")");
  if (!network.empty()) c.hardware.network = find_network(network);
  if (nics_per_node > 0) c.hardware.nics_per_node = int(nics_per_node);
  MT_CHECK(c.hardware.peak_flops(o.precision) > 0, c.hardware.description, " has no ",
           precision_name(o.precision), " tensor cores (choose another precision)");

  PerfParams perf = perf_from_hardware(c, o.precision);
  std::string perf_source = "hardware catalog";
  if (std::filesystem::exists(calibration_file)) {
    // A CPU plan uses this machine's calibration; a GPU plan the entry measured on that GPU.
    const Calibration cal = load_calibration(calibration_file);
    if (c.hardware.is_cpu ? !cal.by_ranks.empty() : gpu_entry(cal, c) != nullptr) {
      perf = perf_from_calibration(cal, c, o.precision);
      perf_source = "calibration " + calibration_file;
    }
  }

  const SearchResult r = search_layouts(m, c, perf, o);
  MT_CHECK(!r.plans.empty(), nothing_fits(m, c, perf, o, r));

  if (!emit.empty()) {
    MT_CHECK(pick >= 1 && size_t(pick) <= r.plans.size(), "--pick must be in [1, ", r.plans.size(),
             "]");
    const Candidate& chosen = r.plans[size_t(pick - 1)];
    if (!data_path.empty()) {
      t.data_args.push_back("--data-path");
      t.data_args.insert(t.data_args.end(), data_path.begin(), data_path.end());
    }
    auto flag = [&](const char* name, const std::string& v) {
      if (!v.empty()) t.data_args.insert(t.data_args.end(), {name, v});
    };
    flag("--split", split);
    flag("--tokenizer-type", tokenizer_type);
    flag("--tokenizer-model", tokenizer_model);
    flag("--vocab-file", vocab_file);
    flag("--merge-file", merge_file);
    if (!extra_args.empty()) {
      std::istringstream ss(extra_args);
      for (std::string w; ss >> w;) t.extra.push_back(w);
    }
    job.mtron = mtron_binary.empty() ? self_path() : mtron_binary;
    job.comment = fmt::format(
        "{}\n{} on {}\nplan #{}: {}\npredicted: {:.3f} s per step, {:.0f} tokens/s/GPU, {:.4g} "
        "TFLOP/s/GPU, MFU {:.1f}%; memory {:.1f} of {:.1f} GiB per GPU\nMFU against {}",
        command, m.summary(), cluster_summary(c), pick, layout_name(chosen.layout),
        chosen.time.total, chosen.time.tokens_per_second_per_device, chosen.time.tflops_per_device,
        100 * chosen.time.mfu, chosen.memory.total() / kGiB, chosen.memory.capacity / kGiB,
        c.device().peak_description(o.precision));
    write(emit_script(parse_launcher(emit), c, chosen.layout, train_args(m, chosen.layout, c, t),
                      job));
    return 0;
  }
  if (json) {
    nlohmann::json j = plans_json(m, c, o, r);
    j["perf_source"] = perf_source;
    write(j.dump(2) + "\n");
    return 0;
  }
  std::string notes = fmt::format("\n(time model constants: {})\n", perf_source);
  write(format_plans(m, c, o, r) + notes);
  return 0;
}

int run_doctor(std::vector<std::string> args) {
  CLI::App app{
      "Diagnose a training log (mtron's or Megatron's): out of memory, NaN/Inf, loss spikes "
      "and divergence, skipped iterations, low MFU, throughput drops, stragglers, hangs. "
      "Prints the findings ranked, each with its evidence lines and the fixes; exits 1 when it "
      "finds something.\n\n"
      "  mtron doctor train.log\n"
      "  mtron doctor train.log --hardware h100-sxm          (MFU against the peak)\n"
      "  mtron plan ... --json -o plan.json && mtron doctor train.log --plan plan.json",
      "mtron doctor"};
  std::vector<std::string> logs;
  std::string hardware, plan_file, precision = "bf16";
  double expected = 0;
  bool json = false, cpu = false;
  app.add_option("LOG", logs, "Log files ('-' reads standard input)")->required();
  app.add_option("--hardware", hardware,
                 "The GPU type the run used (for MFU against its peak; see mtron plan --list)");
  app.add_option("--precision", precision, "Precision of the run's GEMMs (for the peak)")
      ->capture_default_str()
      ->check(CLI::IsMember({"bf16", "fp16", "fp8", "fp32"}));
  app.add_option("--expected-tflops", expected,
                 "Predicted TFLOP/s per GPU (e.g. from mtron plan); low MFU is judged against it");
  app.add_option("--plan", plan_file,
                 "A `mtron plan --json` file: its first plan's prediction and hardware");
  app.add_flag("--cpu", cpu, "The run used mtron's CPU backend (MFU thresholds for CPUs)");
  app.add_flag("--json", json, "Print JSON");
  if (auto rc = parse(app, args)) return *rc;

  DoctorOptions o;
  o.expected_tflops = expected;
  o.gpu = !cpu;
  if (!plan_file.empty()) {
    std::ifstream in(plan_file);
    MT_CHECK(in, "cannot read ", plan_file);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    MT_CHECK(!j.is_discarded() && j.contains("plans") && !j["plans"].empty(), plan_file,
             " is not the output of `mtron plan --json`");
    if (o.expected_tflops <= 0) o.expected_tflops = j["plans"][0].value("tflops_per_gpu", 0.0);
    if (hardware.empty()) hardware = j["cluster"].value("hardware", "");
    precision = j.value("precision", precision);
  }
  if (!hardware.empty()) {
    const Hardware h = find_hardware(hardware);
    o.peak_flops = h.mfu_peak_flops(parse_precision(precision));
    o.peak_name = h.peak_description(parse_precision(precision));
    if (h.is_cpu) o.gpu = false;
  }
  int rc = 0;
  nlohmann::json all = nlohmann::json::array();
  for (const std::string& path : logs) {
    std::vector<std::string> lines;
    std::ifstream file;
    std::istream* in = &std::cin;
    if (path != "-") {
      file.open(path);
      MT_CHECK(file, "cannot read the log ", path);
      in = &file;
    }
    for (std::string line; std::getline(*in, line);) lines.push_back(line);
    const LogReport log = parse_log(lines);
    const std::vector<Finding> f = diagnose(log, o);
    if (has_problems(f)) rc = 1;
    if (json)
      all.push_back({{"log", path}, {"findings", findings_json(f)}});
    else
      std::fputs((format_findings(path, log, f) + (logs.size() > 1 ? "\n" : "")).c_str(), stdout);
  }
  if (json) std::fputs((all.dump(2) + "\n").c_str(), stdout);
  return rc;
}

template <typename F>
int guarded(const char* name, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    std::fprintf(stderr, "mtron %s: error: %s\n", name, e.what());
    return 2;
  }
}

}  // namespace

int plan_main(int argc, char** argv) {
  return guarded("plan", [&] { return run_plan({argv + 1, argv + argc}); });
}

int doctor_main(int argc, char** argv) {
  return guarded("doctor", [&] { return run_doctor({argv + 1, argv + argc}); });
}

}  // namespace mtron::plan
