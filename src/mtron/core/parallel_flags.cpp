#include "mtron/core/parallel_flags.h"

#include <fmt/core.h>

#include <CLI/CLI.hpp>

namespace mtron {
namespace {

// One size flag: its name, help and field. The table is the single list both directions read.
struct SizeFlag {
  const char* name;
  const char* help;
  int64_t ParallelConfig::*field;
  bool moe_only;
};

constexpr SizeFlag kSizeFlags[] = {
    {"--tensor-model-parallel-size", "Degree of tensor model parallelism (TP)",
     &ParallelConfig::tensor_model_parallel_size, false},
    {"--pipeline-model-parallel-size", "Degree of pipeline model parallelism (PP)",
     &ParallelConfig::pipeline_model_parallel_size, false},
    {"--context-parallel-size", "Degree of context parallelism (CP)",
     &ParallelConfig::context_parallel_size, false},
    {"--expert-model-parallel-size", "Degree of expert model parallelism (EP)",
     &ParallelConfig::expert_model_parallel_size, true},
    {"--expert-tensor-parallel-size",
     "Degree of tensor model parallelism of expert layers "
     "(default: TP)",
     &ParallelConfig::expert_tensor_parallel_size, true},
    {"--num-layers-per-virtual-pipeline-stage", "Interleaved pipeline: layers per virtual stage",
     &ParallelConfig::num_layers_per_virtual_pipeline_stage, false},
    {"--num-virtual-stages-per-pipeline-rank",
     "Interleaved pipeline: virtual stages (model "
     "chunks) per pipeline rank",
     &ParallelConfig::num_virtual_stages_per_pipeline_rank, false},
    {"--microbatch-group-size-per-virtual-pipeline-stage",
     "Interleaved pipeline: contiguous micro-batches run on a virtual stage before the next "
     "(default: PP)",
     &ParallelConfig::microbatch_group_size_per_vp_stage, false},
    {"--decoder-first-pipeline-num-layers", "Uneven pipeline: layers of the first stage",
     &ParallelConfig::decoder_first_pipeline_num_layers, false},
    {"--decoder-last-pipeline-num-layers", "Uneven pipeline: layers of the last stage",
     &ParallelConfig::decoder_last_pipeline_num_layers, false},
    {"--micro-batch-size", "Sequences per micro-batch", &ParallelConfig::micro_batch_size, false},
    {"--global-batch-size", "Sequences per iteration (default: micro-batch size x DP)",
     &ParallelConfig::global_batch_size, false},
};

struct SwitchFlag {
  const char* name;
  const char* help;
  bool ParallelConfig::*field;
};

constexpr SwitchFlag kSwitchFlags[] = {
    {"--sequence-parallel", "Sequence parallelism (with TP > 1; forced off at TP 1)",
     &ParallelConfig::sequence_parallel},
    {"--use-distributed-optimizer", "Shard the optimizer state over data-parallel ranks (ZeRO-1)",
     &ParallelConfig::use_distributed_optimizer},
    {"--overlap-grad-reduce", "Overlap the gradient reduction with backward",
     &ParallelConfig::overlap_grad_reduce},
    {"--overlap-param-gather", "Overlap the parameter all-gather with forward",
     &ParallelConfig::overlap_param_gather},
    {"--use-tp-pp-dp-mapping", "Rank order tp-cp-ep-pp-dp instead of tp-cp-ep-dp-pp",
     &ParallelConfig::use_tp_pp_dp_mapping},
};

// The switches of the pipeline split (kSizes).
constexpr SwitchFlag kSplitFlags[] = {
    {"--account-for-embedding-in-pipeline-split",
     "Count the embedding as one layer when splitting the layers over pipeline stages",
     &ParallelConfig::account_for_embedding_in_pipeline_split},
    {"--account-for-loss-in-pipeline-split",
     "Count the output layer and loss as one layer when splitting the layers over pipeline "
     "stages",
     &ParallelConfig::account_for_loss_in_pipeline_split},
};

constexpr const char* kLayoutFlag = "--pipeline-model-parallel-layout";
constexpr const char* kCpCommFlag = "--cp-comm-type";
constexpr const char* kHcpFlag = "--hierarchical-context-parallel-sizes";

}  // namespace

void add_parallel_flags(CLI::App& app, ParallelConfig& p, ParallelFlags which, const char* group) {
  for (const SizeFlag& f : kSizeFlags) {
    app.add_option(f.name, p.*f.field, f.help)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
        ->group(group);
  }
  const auto switches = [&](const auto& flags) {
    for (const SwitchFlag& f : flags) {
      app.add_flag(f.name, p.*f.field, f.help)
          ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
          ->group(group);
    }
  };
  switches(kSplitFlags);
  app.add_option(kLayoutFlag, p.pipeline_model_parallel_layout,
                 "The layers of each virtual pipeline stage, '|' between stages: E embedding, t "
                 "transformer layer, m MTP layer, L loss; x*n and (...)*n repeat (e.g. "
                 "\"Et*3|(tt|)*29,m|L\"); sets the virtual stages per rank")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->group(group);
  app.add_option(kCpCommFlag, p.cp_comm_type,
                 "How context parallelism moves attention's inputs: p2p (ring attention, "
                 "default), all_gather (K/V gathered), a2a (heads exchanged all-to-all: "
                 "DeepSpeed-Ulysses) or a2a+p2p (all-to-all inside the first level of "
                 "--hierarchical-context-parallel-sizes, a ring across); one for every layer "
                 "or one per layer")
      ->expected(1, CLI::detail::expected_max_vector_size)
      ->group(group);
  app.add_option(kHcpFlag, p.hierarchical_context_parallel_sizes,
                 "The CP group's levels, adjacent CP ranks first (\"2 4\": groups of 2 "
                 "adjacent ranks, and the ranks at the same place in each); with "
                 "--cp-comm-type a2a+p2p")
      ->expected(1, CLI::detail::expected_max_vector_size)
      ->delimiter(' ')
      ->group(group);
  if (which == ParallelFlags::kAll) switches(kSwitchFlags);
}

std::vector<std::string> parallel_flag_args(const ParallelConfig& p, bool moe) {
  std::vector<std::string> a;
  for (const SizeFlag& f : kSizeFlags) {
    const int64_t v = p.*f.field;
    // Zero means "not set" for the optional sizes (interleaving, uneven stages).
    if (v == 0 || (f.moe_only && !moe)) continue;
    a.push_back(f.name);
    a.push_back(fmt::format("{}", v));
  }
  const auto switches = [&](const auto& flags) {
    for (const SwitchFlag& f : flags)
      if (p.*f.field) a.push_back(f.name);
  };
  switches(kSwitchFlags);
  switches(kSplitFlags);
  if (!p.pipeline_model_parallel_layout.empty()) {
    a.push_back(kLayoutFlag);
    a.push_back(p.pipeline_model_parallel_layout);
  }
  if (p.cp_comm_type != ParallelConfig{}.cp_comm_type) {
    a.push_back(kCpCommFlag);
    a.insert(a.end(), p.cp_comm_type.begin(), p.cp_comm_type.end());
  }
  if (!p.hierarchical_context_parallel_sizes.empty()) {
    a.push_back(kHcpFlag);
    for (int64_t v : p.hierarchical_context_parallel_sizes) a.push_back(fmt::format("{}", v));
  }
  return a;
}

void add_precision_flags(CLI::App& app, PrecisionFlags& f, const char* group) {
  // Megatron: --fp16 and --bf16 exclude each other (whichever comes second fails).
  auto set = [&f](Precision p, const char* name, const char* other) {
    if (f.compute != Precision::kFP32 && f.compute != p)
      throw CLI::ValidationError(name, std::string("excludes ") + other);
    f.compute = p;
  };
  app.add_flag_callback(
         "--bf16", [set] { set(Precision::kBF16, "--bf16", "--fp16"); },
         "bf16 mixed precision (fp32 master weights and gradients)")
      ->group(group);
  app.add_flag_callback(
         "--fp16", [set] { set(Precision::kFP16, "--fp16", "--bf16"); },
         "fp16 mixed precision (fp32 master weights and gradients) with loss scaling")
      ->group(group);
  app.add_flag("--grad-reduce-in-bf16", f.grad_reduce_in_bf16,
               "With --bf16: reduce the gradients over data parallel in bf16 (half the bytes)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->group(group);
}

std::vector<std::string> precision_flag_args(const PrecisionFlags& f) {
  std::vector<std::string> a;
  const bool bf16 = f.compute == Precision::kBF16;
  if (bf16) a.push_back("--bf16");
  if (f.compute == Precision::kFP16) a.push_back("--fp16");
  if (bf16 && f.grad_reduce_in_bf16) a.push_back("--grad-reduce-in-bf16");
  return a;
}

}  // namespace mtron
