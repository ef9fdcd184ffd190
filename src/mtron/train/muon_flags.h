// defines: OptimizerFlags, add_optimizer_flags, validate_optimizer_flags
//
// --optimizer adam | muon | dist_muon and Muon's flags, as Megatron's:
//   --muon-momentum (0.9), --muon-nesterov, --muon-no-split-qkv, --muon-scale-mode
//   (spectral | unit_rms_norm | shape_scaling), --muon-extra-scale-factor, --muon-fp32-matmul-prec
//   (medium: bf16 Newton-Schulz GEMMs; high, low: fp32), --muon-coefficient-type,
//   --muon-num-ns-steps, --muon-tp-mode, --muon-use-syrk, --muon-scalar-optimizer (adam)
// Megatron's rules for its "emerging optimizers", its words: no fp16, no FSDP (and so the
// checkpoint format torch or torch_dist); dist_muon is muon with the layer-wise distributed
// optimizer, which --use-distributed-optimizer also selects: each data-parallel rank owns whole
// parameters and keeps their optimizer state (train/grad_sync.h, own_whole_params).
#pragma once

#include <CLI/App.hpp>
#include <optional>
#include <string>
#include <vector>

#include "mtron/core/parallel_config.h"
#include "mtron/core/precision.h"
#include "mtron/optim/muon.h"

namespace mtron::train {

struct OptimizerFlags {
  std::string optimizer = "adam";
  optim::MuonConfig muon;
  std::string scale_mode = "spectral", matmul_prec = "medium", tp_mode = "duplicated";
  std::string scalar_optimizer = "adam";
  bool use_syrk = false;
};

void add_optimizer_flags(CLI::App& app, OptimizerFlags& f, const char* group);

// The Muon configuration for --optimizer muon (nullopt for adam), after Megatron's rules; refuses
// CPU offload. Muon's distributed optimizer (--use-distributed-optimizer, dist_muon) is the
// layer-wise one: p.use_distributed_optimizer is cleared and layer_wise set.
std::optional<optim::MuonConfig> validate_optimizer_flags(const OptimizerFlags& f,
                                                          ParallelConfig& p,
                                                          Precision compute,
                                                          bool cpu_offload,
                                                          bool& layer_wise,
                                                          std::vector<std::string>& notes);

}  // namespace mtron::train
