// defines: StepResult, Interval
//
// One training step's results, and the sums over a log interval of Trainer::run from which the
// iteration line takes Megatron's interval means (metrics.h IterationLog).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "mtron/core/model_config.h"
#include "mtron/model/moe.h"
#include "mtron/train/metrics.h"

namespace mtron::train {

struct StepResult {
  double lm_loss = 0;    // token-weighted mean over the global batch (on every rank)
  double grad_norm = 0;  // before clipping (non-finite when skipped)
  double lr = 0;
  bool skipped = false;
  double loss_scale = 1.0;  // after this step's update (Megatron's log value); 1 without scaler
  // MoE: Megatron's load_balancing_loss and z_loss (averaged over the global batch's
  // micro-batches and the MoE layers, without their coefficients), and the step's statistics
  // summed over the world (dropped pairs, routing checksums).
  double load_balancing_loss = 0, z_loss = 0;
  model::MoEStats moe;
  // --mtp-num-layers: Megatron's mtp_<k> loss per depth (the token-weighted mean over the global
  // batch's positions with a target k tokens further, without the scaling factor).
  std::vector<double> mtp_losses;
  // --moe-router-enable-expert-bias: a checksum of every layer's expert bias after the step,
  // sum over layers L and experts e of (L + 1) (e + 1) bias[e] (tests compare layouts with it).
  double expert_bias_hash = 0;

  // The gradient norm the logs show: none on a step the loss scaler skipped (Megatron logs its
  // None there), the norm otherwise.
  std::optional<double> logged_grad_norm(bool scaler) const {
    if (scaler && skipped) return std::nullopt;
    return grad_norm;
  }
};

struct Interval {
  double loss = 0, skipped_loss = 0, time = 0, flops = 0, load_balancing = 0, z = 0;
  model::MoEStats moe;
  std::vector<double> mtp;  // sums of StepResult::mtp_losses
  int64_t iters = 0, samples = 0, skipped = 0, nans = 0;

  // A step of dt seconds, `flops` FLOPs and `samples` samples.
  void add(const StepResult& r, double dt, double flops, int64_t samples);
  // The interval's means and counters into l (not its iteration, schedule or memory fields):
  // the loss over the iterations not skipped (over all when every one was, as Megatron), time,
  // TFLOP/s, tokens/s and MFU per rank of `world` against `peak` FLOP/s (0: no MFU), the last
  // step's loss scale and grad norm (none on a step the loss scaler skipped), the MoE statistics.
  void report(IterationLog& l,
              const StepResult& last,
              bool scaler,
              int64_t world,
              double peak,
              const ModelConfig& m) const;
};

}  // namespace mtron::train
