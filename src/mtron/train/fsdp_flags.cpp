#include "mtron/train/fsdp_flags.h"

#include <CLI/CLI.hpp>
#include <tuple>

#include "mtron/core/error.h"

namespace mtron::train {

void add_fsdp_flags(CLI::App& app, ParallelConfig& p, FsdpFlags& f, const char* group) {
  app.add_flag("--use-megatron-fsdp", p.use_megatron_fsdp,
               "Megatron-FSDP: data parallelism sharded by --data-parallel-sharding-strategy "
               "(needs --ckpt-format fsdp_dtensor, as in Megatron)")
      ->group(group);
  app.add_flag("--use-torch-fsdp2", p.use_torch_fsdp2,
               "PyTorch FSDP2's sharding: parameters, gradients and optimizer state (ZeRO-3)")
      ->group(group);
  app.add_option("--data-parallel-sharding-strategy", p.data_parallel_sharding_strategy,
                 "With --use-megatron-fsdp: no_shard (DDP), optim (the distributed optimizer), "
                 "optim_grads (each micro-batch's gradients reduce-scattered into the rank's "
                 "shard), optim_grads_params (default: and each rank holds its shard of the "
                 "parameters, gathered layer by layer as forward and backward read them)")
      ->check(CLI::IsMember({"no_shard", "optim", "optim_grads", "optim_grads_params"}))
      ->group(group);
  app.add_option("--megatron-fsdp-main-params-dtype", f.main_params_dtype,
                 "Master weights' type: fp32 (default; mtron's only) or auto")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16", "auto"}))
      ->group(group);
  app.add_option("--megatron-fsdp-main-grads-dtype", f.main_grads_dtype,
                 "Gradient accumulation type: auto (default) or fp32; mtron accumulates in fp32")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16", "auto"}))
      ->group(group);
  app.add_option("--megatron-fsdp-grad-comm-dtype", f.grad_comm_dtype,
                 "Gradient reduction type: auto (default: the main gradients', fp32), fp32, or "
                 "bf16 (as --grad-reduce-in-bf16)")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16", "auto"}))
      ->group(group);
}

void validate_fsdp_flags(const FsdpFlags& f,
                         const ParallelConfig& p,
                         PrecisionFlags& precision,
                         const std::string& ckpt_format,
                         int64_t check_weight_hash_interval) {
  const std::string format = ckpt_format.empty() ? "torch_dist" : ckpt_format;
  if (p.use_megatron_fsdp) {
    MT_CHECK(format == "fsdp_dtensor",
             "Megatron-FSDP requires the `fsdp_dtensor` checkpointing format (--use-megatron-fsdp "
             "needs --ckpt-format fsdp_dtensor; mtron writes its own reshardable checkpoints "
             "either way)");
    MT_CHECK(p.data_parallel_sharding_strategy != "optim_grads_params" ||
                 check_weight_hash_interval <= 0,
             "check_weight_hash_across_dp_replicas_interval is not supported with "
             "optim_grads_params");
  }
  MT_CHECK(format != "fsdp_dtensor" || p.use_megatron_fsdp,
           "--ckpt-format fsdp_dtensor is only tested with Megatron FSDP.");
  if (format == "torch_dcp") {
    MT_CHECK(p.use_torch_fsdp2, "--ckpt-format torch_dcp is only tested with FSDP.");
    MT_CHECK(p.tp() <= 1,
             "--ckpt-format torch_dcp is not tested with megatron tensor parallelism.");
    MT_CHECK(p.pp() <= 1,
             "--ckpt-format torch_dcp is not tested with megatron pipeline parallelism.");
  }
  if (p.use_torch_fsdp2) {
    MT_CHECK(format == "torch_dist" || format == "torch_dcp",
             "--use-torch-fsdp2 requires --ckpt-format torch_dist or torch_dcp");
    MT_CHECK(precision.compute != Precision::kFP16,
             "--use-torch-fsdp2 not supported with fp16 yet");
  }
  // auto: the parameters' own type, fp32 in mtron (its bf16 and fp16 runs keep fp32 master
  // weights and a compute copy).
  MT_CHECK(f.main_params_dtype == "fp32" || f.main_params_dtype == "auto",
           "--megatron-fsdp-main-params-dtype ", f.main_params_dtype,
           ": mtron keeps the master weights in fp32 (pass fp32 or auto)");
  MT_CHECK(f.main_grads_dtype == "fp32" || f.main_grads_dtype == "auto",
           "--megatron-fsdp-main-grads-dtype ", f.main_grads_dtype,
           ": mtron accumulates the gradients in fp32 (pass fp32 or auto)");
  if (f.grad_comm_dtype == "bf16") {
    MT_CHECK(precision.compute == Precision::kBF16,
             "--megatron-fsdp-grad-comm-dtype bf16 needs --bf16 (as --grad-reduce-in-bf16)");
    precision.grad_reduce_in_bf16 = true;
  } else {
    MT_CHECK(f.grad_comm_dtype != "fp16",
             "--megatron-fsdp-grad-comm-dtype fp16: mtron reduces gradients in fp32 or bf16");
  }
}

}  // namespace mtron::train
