// defines: FsdpFlags, add_fsdp_flags, validate_fsdp_flags
//
// Megatron's fully-sharded data-parallel flags (docs/parallelism.md, "FSDP"):
//   --use-megatron-fsdp                  Megatron-FSDP, with
//   --data-parallel-sharding-strategy S  no_shard | optim | optim_grads | optim_grads_params
//                                        (default; ZeRO-3: the parameters sharded too)
//   --use-torch-fsdp2                    PyTorch's FSDP2 (ZeRO-3)
//   --megatron-fsdp-main-params-dtype, --megatron-fsdp-main-grads-dtype: fp32 (mtron's) or auto
//   --megatron-fsdp-grad-comm-dtype      auto | fp32, or bf16 (= --grad-reduce-in-bf16)
// The layout fields live in ParallelConfig (its finalize() applies the layout rules); the rules
// on the checkpoint format, precision and weight-hash check are here.
#pragma once

#include <CLI/App.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "mtron/core/parallel_config.h"
#include "mtron/core/parallel_flags.h"

namespace mtron::train {

struct FsdpFlags {
  std::string main_params_dtype = "fp32", main_grads_dtype = "auto", grad_comm_dtype = "auto";
};

void add_fsdp_flags(CLI::App& app, ParallelConfig& p, FsdpFlags& f, const char* group);

// Megatron's rules, its words: Megatron-FSDP needs --ckpt-format fsdp_dtensor, which needs
// Megatron-FSDP; FSDP2 needs torch_dist or torch_dcp (which needs FSDP2, TP 1 and PP 1) and no
// fp16; optim_grads_params excludes the weight-hash check. mtron's: master weights and gradients
// in fp32. `ckpt_format` is --ckpt-format's word ("" when not given: Megatron's torch_dist);
// --megatron-fsdp-grad-comm-dtype bf16 sets precision.grad_reduce_in_bf16.
void validate_fsdp_flags(const FsdpFlags& f,
                         const ParallelConfig& p,
                         PrecisionFlags& precision,
                         const std::string& ckpt_format,
                         int64_t check_weight_hash_interval);

}  // namespace mtron::train
