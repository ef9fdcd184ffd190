// defines: GradScalerConfig, GradScalerState, GradScaler
//
// Megatron's loss scaling for fp16 (megatron/core/optimizer/grad_scaler.py). The loss gradient
// is multiplied by scale() before backward, so that small gradients survive the rounding of
// the output gradients to fp16; the fp32 gradients are multiplied by inv_scale() before the
// norm, clipping and the optimizer. An infinity or NaN in any gradient of any rank (found-inf)
// skips the step on every rank; update(found_inf) then adjusts the scale.
//
// Static (--loss-scale S): the scale is S for ever (Megatron's ConstantGradScaler). Dynamic
// (Megatron's DynamicGradScaler with growth factor 2, backoff factor 0.5):
//   found-inf:  growth tracker = 0; hysteresis tracker -= 1; when the hysteresis tracker is
//               <= 0, scale = max(scale / 2, --min-loss-scale) (at every further found-inf
//               too, until a growth resets the tracker)
//   clean step: growth tracker += 1; when it reaches --loss-scale-window: growth tracker = 0,
//               hysteresis tracker = --hysteresis, scale *= 2
// The scale is an fp32 number, as Megatron's tensor; the state (scale and both trackers) is
// saved in checkpoints so that a resumed run goes on exactly.
#pragma once

#include <cstdint>
#include <optional>

namespace mtron::optim {

struct GradScalerConfig {
  std::optional<double> static_scale;   // --loss-scale: the constant scaler
  double initial_scale = 4294967296.0;  // --initial-loss-scale (2^32)
  double min_scale = 1.0;               // --min-loss-scale
  int64_t window = 1000;                // --loss-scale-window
  int64_t hysteresis = 2;               // --hysteresis
};

struct GradScalerState {
  float scale = 1.0f;
  int64_t growth_tracker = 0, hysteresis_tracker = 0;
  bool operator==(const GradScalerState&) const = default;
};

class GradScaler {
 public:
  // Throws mtron::Error naming the flag on a bad value (Megatron's assertions).
  explicit GradScaler(const GradScalerConfig& cfg);

  float scale() const { return state_.scale; }
  // 1 / scale, computed in double and rounded to fp32 as Megatron's inv_scale.
  float inv_scale() const;
  void update(bool found_inf);

  bool dynamic() const { return !cfg_.static_scale; }
  const GradScalerState& state() const { return state_; }
  void set_state(const GradScalerState& s) { state_ = s; }

 private:
  GradScalerConfig cfg_;
  GradScalerState state_;
};

}  // namespace mtron::optim
