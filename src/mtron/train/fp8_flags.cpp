#include "mtron/train/fp8_flags.h"

#include <CLI/CLI.hpp>

#include "mtron/core/error.h"

namespace mtron::train {

void add_fp8_flags(CLI::App& app, model::Fp8Config& c, std::string& recipe, const char* group) {
  app.add_option_function<std::string>(
         "--fp8-format",
         [&c](const std::string& v) {
           c.enabled = true;
           c.hybrid = v == "hybrid";
         },
         "FP8 linear-layer GEMMs (with --bf16): e4m3 everywhere, or hybrid (E4M3 inputs and "
         "weights, E5M2 output gradients)")
      ->check(CLI::IsMember({"e4m3", "hybrid"}))
      ->group(group);
  app.add_option("--fp8-recipe", recipe,
                 "delayed (default: scales from an amax history) or tensorwise (each tensor's own "
                 "amax); Megatron's mxfp8, blockwise and custom are not supported")
      ->group(group);
  app.add_option("--fp8-margin", c.margin, "Delayed scaling: scale = fp8_max / 2^margin / amax")
      ->group(group);
  app.add_option("--fp8-amax-history-len", c.amax_history_len,
                 "Delayed scaling: iterations of amax history (default 1)")
      ->group(group);
  app.add_option("--fp8-amax-compute-algo", c.amax_compute_algo,
                 "Delayed scaling: the amax a scale comes from, most_recent (default) or max "
                 "(of the history)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, model::Fp8AmaxAlgo>{
          {"most_recent", model::Fp8AmaxAlgo::kMostRecent}, {"max", model::Fp8AmaxAlgo::kMax}}))
      ->group(group);
  app.add_flag("--first-last-layers-bf16", c.first_last_layers_bf16,
               "Keep the first and last transformer layers' GEMMs in bf16 (not with the delayed "
               "recipe)")
      ->group(group);
  app.add_option("--num-layers-at-start-in-bf16", c.num_layers_at_start_in_bf16,
                 "With --first-last-layers-bf16: layers at the start kept in bf16 (default 1)")
      ->group(group);
  app.add_option("--num-layers-at-end-in-bf16", c.num_layers_at_end_in_bf16,
                 "With --first-last-layers-bf16: layers at the end kept in bf16 (default 1)")
      ->group(group);
  app.add_flag("--fp8-param-gather", c.param_gather,
               "Accepted (needs --use-distributed-optimizer): Megatron keeps the weights in FP8 "
               "and gathers them in FP8; mtron quantises its bf16 weights, so the numerics are "
               "the same")
      ->group(group);
}

void validate_fp8_flags(model::Fp8Config& c,
                        const std::string& recipe,
                        Precision compute,
                        const ModelConfig& m,
                        const ParallelConfig& p,
                        std::vector<std::string>& notes) {
  if (recipe == "tensorwise") {
    c.recipe = model::Fp8Recipe::kTensorwise;
  } else {
    MT_CHECK(
        recipe == "delayed" || recipe == "mxfp8" || recipe == "blockwise" || recipe == "custom",
        "--fp8-recipe ", recipe, ": not one of delayed, tensorwise, mxfp8, blockwise, custom");
    MT_CHECK(recipe == "delayed", "--fp8-recipe ", recipe,
             " is not supported: mtron has the delayed and tensorwise recipes");
  }
  if (!c.enabled) {
    if (c.param_gather || c.first_last_layers_bf16)
      notes.push_back("the FP8 flags have no effect without --fp8-format");
    c = model::Fp8Config{};
    return;
  }
  // Without --bf16 the rest of the model runs in fp32 (Megatron's FP8 without --bf16, as its
  // FSDP proxy tests run); fp16's compute copies are not quantised from.
  MT_CHECK(compute != Precision::kFP16,
           "--fp8-format with --fp16 is not supported (use --bf16, or neither for fp32)");
  MT_CHECK(c.amax_history_len >= 1, "--fp8-amax-history-len must be >= 1 (got ", c.amax_history_len,
           ")");
  // Megatron's TransformerConfig rules and message.
  MT_CHECK(!(c.first_last_layers_bf16 && c.recipe == model::Fp8Recipe::kDelayed),
           "Delayed scaling does not support first / last layer in BF16.");
  if (c.first_last_layers_bf16) {
    const int64_t max_bf16 = m.num_layers / p.pp();
    for (const auto& [flag, v] :
         {std::pair{"num_layers_at_start_in_bf16", c.num_layers_at_start_in_bf16},
          std::pair{"num_layers_at_end_in_bf16", c.num_layers_at_end_in_bf16}}) {
      MT_CHECK(v >= 0 && v <= max_bf16, flag, " (", v,
               ") must be between 0 and number of layers per pipeline stage (", max_bf16, ").");
    }
  }
  // Megatron's arguments.py rule and message.
  MT_CHECK(
      !c.param_gather || p.use_distributed_optimizer || p.use_megatron_fsdp || p.use_torch_fsdp2,
      "--fp8-param-gather only supported with distributed optimizer, torch fsdp2, megatron "
      "fsdp, or inference mode");
  if (c.param_gather) {
    notes.push_back(
        "--fp8-param-gather has no numeric effect: mtron quantises the compute weights (bf16, or "
        "fp32 without --bf16) before each GEMM and gathers them unquantised");
  }
  if (c.recipe == model::Fp8Recipe::kTensorwise &&
      (c.margin != 0 || c.amax_history_len != 1 ||
       c.amax_compute_algo != model::Fp8AmaxAlgo::kMostRecent)) {
    notes.push_back(
        "--fp8-margin, --fp8-amax-history-len and --fp8-amax-compute-algo have no effect with "
        "--fp8-recipe tensorwise (Transformer Engine's current scaling has none)");
  }
}

}  // namespace mtron::train
