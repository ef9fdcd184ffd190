#include "mtron/train/muon_flags.h"

#include <CLI/CLI.hpp>

#include "mtron/core/error.h"

namespace mtron::train {

void add_optimizer_flags(CLI::App& app, OptimizerFlags& f, const char* group) {
  app.add_option("--optimizer", f.optimizer,
                 "adam (AdamW, decoupled weight decay), muon (Muon for the 2-D weights, Adam "
                 "for the rest), dist_muon (Megatron's deprecated muon with the distributed "
                 "optimizer)")
      ->check(CLI::IsMember({"adam", "muon", "dist_muon"}))
      ->group(group);
  app.add_option("--muon-momentum", f.muon.momentum, "Muon's momentum (default 0.9)")->group(group);
  app.add_flag("--muon-nesterov", f.muon.nesterov, "Muon: Nesterov momentum")->group(group);
  app.add_flag("--muon-no-split-qkv{false}", f.muon.split_qkv,
               "Muon: orthogonalise a fused QKV weight as one matrix (default: its q, k and v "
               "rows apart)")
      ->group(group);
  app.add_option("--muon-scale-mode", f.scale_mode,
                 "Muon's update scale: spectral (default, sqrt(max(rows, cols))), "
                 "unit_rms_norm (sqrt(rows / cols)), shape_scaling (sqrt(max(1, rows / cols)))")
      ->check(CLI::IsMember({"spectral", "unit_rms_norm", "shape_scaling"}))
      ->group(group);
  app.add_option("--muon-extra-scale-factor", f.muon.extra_scale,
                 "Muon: a further factor of the update (default 1)")
      ->group(group);
  app.add_option("--muon-fp32-matmul-prec", f.matmul_prec,
                 "Muon's Newton-Schulz GEMMs: medium (default, bf16 operands, fp32 accumulation), "
                 "high or low (fp32)")
      ->check(CLI::IsMember({"low", "medium", "high"}))
      ->group(group);
  app.add_option("--muon-coefficient-type", f.muon.coefficients,
                 "Newton-Schulz coefficients: quintic (default), simple, polar_express, cans, "
                 "aol, deepseekv4, cubic5")
      ->group(group);
  app.add_option("--muon-num-ns-steps", f.muon.ns_steps, "Newton-Schulz steps (default 5)")
      ->group(group);
  app.add_option("--muon-tp-mode", f.tp_mode,
                 "blockwise, duplicated (default) or distributed: mtron orthogonalises the whole "
                 "matrix in each (Megatron's blockwise does too under TP)")
      ->check(CLI::IsMember({"blockwise", "duplicated", "distributed"}))
      ->group(group);
  app.add_flag("--muon-use-syrk", f.use_syrk, "Megatron's Triton SYRK kernel: a kernel choice")
      ->group(group);
  app.add_option("--muon-scalar-optimizer", f.scalar_optimizer,
                 "The optimizer of the parameters Muon does not step (embeddings, output layer, "
                 "norms, biases): adam")
      ->check(CLI::IsMember({"adam", "lion"}))
      ->group(group);
}

std::optional<optim::MuonConfig> validate_optimizer_flags(const OptimizerFlags& f,
                                                          ParallelConfig& p,
                                                          Precision compute,
                                                          bool cpu_offload,
                                                          bool& layer_wise,
                                                          std::vector<std::string>& notes) {
  layer_wise = false;
  if (f.optimizer == "adam") return std::nullopt;
  // Megatron's rules (arguments.py, the emerging-optimizer check), its words. Its third, the
  // checkpoint format torch or torch_dist, follows here from the FSDP ones: mtron takes the
  // other two formats only with FSDP.
  layer_wise = p.use_distributed_optimizer;
  if (f.optimizer == "dist_muon") {
    notes.push_back(
        "optimizer='dist_muon' is deprecated. Use --optimizer muon --use-distributed-optimizer "
        "instead.");
    layer_wise = true;
  }
  MT_CHECK(!p.use_torch_fsdp2, "Emerging optimizer does not support Torch-FSDP2 for now.");
  MT_CHECK(!p.use_megatron_fsdp, "Emerging optimizer does not support Megatron-FSDP for now.");
  MT_CHECK(compute != Precision::kFP16, "emerging optimizer with fp16 is not supported.");
  MT_CHECK(f.scalar_optimizer == "adam",
           "--muon-scalar-optimizer lion: mtron steps the parameters Muon does not with Adam "
           "(--muon-scalar-optimizer adam, the default)");
  MT_CHECK(!cpu_offload,
           "--optimizer-cpu-offload with --optimizer muon: mtron offloads Adam's state only");
  MT_CHECK(f.muon.ns_steps >= 1, "num_ns_steps must be at least 1, got ", f.muon.ns_steps);
  MT_CHECK(f.muon.momentum >= 0 && f.muon.momentum < 1, "--muon-momentum must be in [0, 1)");
  MT_CHECK(!optim::ns_coefficients(f.muon.coefficients, f.muon.ns_steps).empty(),
           "Unsupported muon coefficient type '", f.muon.coefficients, "' with ", f.muon.ns_steps,
           " steps: one of ", optim::ns_coefficient_names(), " (cubic5 takes exactly 5 steps)");
  p.use_distributed_optimizer = false;  // the layer-wise optimizer instead
  if (f.use_syrk) notes.push_back("--muon-use-syrk has no effect: kernel choice");
  optim::MuonConfig m = f.muon;
  m.scale = *value_of(optim::kMuonScaleNames, f.scale_mode);  // the flag checked the name
  m.bf16 = f.matmul_prec == "medium";
  return m;
}

}  // namespace mtron::train
