#include "mtron/plan/emit.h"

#include <fmt/core.h>

#include <algorithm>

#include "mtron/core/error.h"
#include "mtron/core/model_flags.h"
#include "mtron/core/parallel_flags.h"

namespace mtron::plan {
namespace {

// Shell-quotes one word when it needs it.
std::string quote(const std::string& w) {
  const bool plain = !w.empty() && std::all_of(w.begin(), w.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) ||
           std::string_view("-_./=:,+@%").find(ch) != std::string_view::npos;
  });
  if (plain) return w;
  std::string q = "'";
  for (char ch : w) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

// The flags as a bash array body, one flag (with its values) per line.
std::string args_block(const std::vector<std::string>& args) {
  std::string s;
  for (size_t i = 0; i < args.size(); ++i) {
    s += "  ";
    s += quote(args[i]);
    while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
      s += ' ';
      s += quote(args[++i]);
    }
    s += '\n';
  }
  return s;
}

std::string comment_block(const std::string& text) {
  std::string s;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    s += "# ";
    s.append(text, start, end - start);
    s += '\n';
    start = end + 1;
  }
  return s;
}

}  // namespace

Launcher parse_launcher(const std::string& s) {
  if (s == "mpirun") return Launcher::kMpirun;
  if (s == "srun") return Launcher::kSrun;
  if (s == "sbatch") return Launcher::kSbatch;
  MT_CHECK(false, "--emit must be mpirun, srun or sbatch (got '", s, "')");
}

std::vector<std::string> train_args(const ModelConfig& m,
                                    const Layout& l,
                                    const Cluster& c,
                                    const TrainingArgs& t) {
  const ParallelConfig& p = l.parallel;
  const bool gpu = !c.hardware.is_cpu;
  const bool fp8 = l.precision == Precision::kFP8;
  // --fp8-param-gather only beside the distributed optimizer (Megatron's rule).
  MT_CHECK(!fp8 || !l.fp8_params || p.use_distributed_optimizer,
           "no launch script: --fp8-param-gather needs the distributed optimizer, which the plan "
           "does not use");
  std::vector<std::string> a = model_flag_args(m);
  auto add = [&](const char* flag, auto v) {
    a.push_back(flag);
    a.push_back(fmt::format("{}", v));
  };
  for (std::string& f : parallel_flag_args(p, m.is_moe())) a.push_back(std::move(f));
  if (l.tp_comm_overlap) a.push_back("--tp-comm-overlap");
  if (l.ep_comm_overlap) a.push_back("--overlap-moe-expert-parallel-comm");
  PrecisionFlags prec;
  // --bf16 (also under FP8 GEMMs) or --fp16; fp32 runs without a flag.
  prec.compute = fp8 ? Precision::kBF16 : l.precision;
  prec.grad_reduce_in_bf16 = !l.grads_fp32;
  for (std::string& f : precision_flag_args(prec)) a.push_back(std::move(f));
  if (fp8) {
    // Megatron's delayed-scaling recipe; with a history of 1 max is the most recent amax.
    add("--fp8-format", l.fp8_hybrid ? "hybrid" : "e4m3");
    add("--fp8-recipe", "delayed");
    add("--fp8-amax-history-len", l.fp8_amax_history_len);
    add("--fp8-amax-compute-algo", "max");
    if (l.fp8_params) a.push_back("--fp8-param-gather");
  }
  if (gpu) add("--device", "cuda");
  if (l.recompute != RecomputeGranularity::kNone)
    add("--recompute-granularity", recompute_name(l.recompute));
  if (l.recompute == RecomputeGranularity::kSelective &&
      l.recompute_modules.bits != RecomputeModules{}.bits) {
    a.push_back("--recompute-modules");
    for (std::string_view name : recompute_module_list(l.recompute_modules)) a.emplace_back(name);
    // Megatron runs moe_act recompute only with grouped GEMMs (a kernel choice to mtron train).
    if (l.recompute_modules.has(RecomputeModule::kMoeAct)) a.push_back("--moe-grouped-gemm");
  }
  if (l.recompute == RecomputeGranularity::kFull) {
    add("--recompute-method", "uniform");
    add("--recompute-num-layers", 1);
  }
  add("--train-iters", t.train_iters);
  add("--lr", t.lr);
  add("--min-lr", t.min_lr);
  add("--lr-decay-style", t.lr_decay_style);
  add("--lr-warmup-iters", t.lr_warmup_iters >= 0 ? t.lr_warmup_iters : t.train_iters / 10);
  add("--weight-decay", t.weight_decay);
  add("--clip-grad", t.clip_grad);
  add("--adam-beta1", t.adam_beta1);
  add("--adam-beta2", t.adam_beta2);
  add("--seed", t.seed);
  if (t.data_args.empty()) {
    a.push_back("--mock-data");
    add("--tokenizer-type", "NullTokenizer");
  } else {
    a.insert(a.end(), t.data_args.begin(), t.data_args.end());
  }
  add("--log-interval", t.log_interval > 0 ? t.log_interval : c.hardware.is_cpu ? 1 : 10);
  add("--eval-interval", t.eval_interval > 0 ? t.eval_interval : t.train_iters);
  add("--eval-iters", t.eval_iters);
  if (!t.save.empty()) {
    add("--save", t.save);
    add("--save-interval", t.save_interval > 0 ? t.save_interval : t.train_iters);
  }
  if (!t.load.empty()) add("--load", t.load);
  a.insert(a.end(), t.extra.begin(), t.extra.end());
  return a;
}

std::string emit_script(Launcher launcher,
                        const Cluster& c,
                        const Layout& l,
                        const std::vector<std::string>& args,
                        const JobOptions& job) {
  const ParallelConfig& p = l.parallel;
  const bool cpu = c.hardware.is_cpu;
  const int64_t nodes = c.nodes(), per_node = c.devices_per_node, world = c.num_devices;
  std::string s = launcher == Launcher::kSbatch ? "#!/bin/bash\n" : "#!/usr/bin/env bash\n";
  if (launcher == Launcher::kSbatch) {
    s += fmt::format("#SBATCH --job-name={}\n#SBATCH --nodes={}\n#SBATCH --ntasks-per-node={}\n",
                     job.job_name, nodes, per_node);
    if (!cpu) s += fmt::format("#SBATCH --gpus-per-node={}\n", per_node);
    s += fmt::format("#SBATCH --time={}\n#SBATCH --exclusive\n#SBATCH --output=%x-%j.log\n",
                     job.time_limit);
    if (!job.partition.empty()) s += fmt::format("#SBATCH --partition={}\n", job.partition);
  }
  s += "# Generated by:\n" + comment_block(job.comment);
  s += "set -euo pipefail\n\n";
  s += fmt::format("MTRON=${{MTRON:-{}}}\n", quote(job.mtron));
  if (cpu) {
    // One rank per share of the cores; OpenMP threads fill the share.
    const int64_t threads = std::max<int64_t>(1, c.hardware.gpus_per_node / per_node);
    s += fmt::format("export OMP_NUM_THREADS=${{OMP_NUM_THREADS:-{}}}\n", threads);
  } else if (p.tp() > 1 || p.cp() > 1) {
    // Megatron's requirement for TP/CP communication overlap ordering on pre-Blackwell GPUs.
    s += "export CUDA_DEVICE_MAX_CONNECTIONS=1\n";
  }
  s += "\nARGS=(\n" + args_block(args) + ")\n\n";

  switch (launcher) {
    case Launcher::kMpirun: {
      s += "MPI_FLAGS=()\n";
      s += "if [ \"$(id -u)\" = 0 ]; then MPI_FLAGS+=(--allow-run-as-root); fi\n";
      if (cpu) {
        if (world > c.hardware.gpus_per_node) s += "MPI_FLAGS+=(--oversubscribe)\n";
        s += "MPI_FLAGS+=(--bind-to none -x OMP_NUM_THREADS)\n";
      } else {
        s += "MPI_FLAGS+=(-x CUDA_DEVICE_MAX_CONNECTIONS)\n";
      }
      if (nodes > 1) {
        s += fmt::format(
            "# {} nodes: list them in a hostfile (one line per node: 'host slots={}').\n"
            "HOSTFILE=${{HOSTFILE:?set HOSTFILE to a file naming the {} nodes}}\n"
            "MPI_FLAGS+=(--hostfile \"$HOSTFILE\" --npernode {})\n",
            nodes, per_node, nodes, per_node);
      }
      s += fmt::format(
          "exec mpirun -np {} \"${{MPI_FLAGS[@]}}\" \"$MTRON\" train \"${{ARGS[@]}}\" \"$@\"\n",
          world);
      break;
    }
    case Launcher::kSrun:
      s += "# Run inside an allocation (salloc, or an sbatch job) of the size below.\n";
      s += fmt::format(
          "exec srun --mpi=pmix --nodes={} --ntasks-per-node={}{} --kill-on-bad-exit=1 \\\n"
          "  \"$MTRON\" train \"${{ARGS[@]}}\" \"$@\"\n",
          nodes, per_node, cpu ? "" : fmt::format(" --gpus-per-node={}", per_node));
      break;
    case Launcher::kSbatch:
      s += "srun --mpi=pmix --kill-on-bad-exit=1 \"$MTRON\" train \"${ARGS[@]}\" \"$@\"\n";
      break;
  }
  return s;
}

}  // namespace mtron::plan
