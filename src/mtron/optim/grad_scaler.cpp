#include "mtron/optim/grad_scaler.h"

#include <algorithm>

#include "mtron/core/error.h"

namespace mtron::optim {

GradScaler::GradScaler(const GradScalerConfig& cfg) : cfg_(cfg) {
  if (cfg_.static_scale) {
    MT_CHECK(*cfg_.static_scale > 0, "--loss-scale must be > 0 (got ", *cfg_.static_scale, ")");
    state_.scale = float(*cfg_.static_scale);
    return;
  }
  MT_CHECK(cfg_.initial_scale > 0, "--initial-loss-scale must be > 0 (got ", cfg_.initial_scale,
           ")");
  MT_CHECK(cfg_.min_scale > 0 && cfg_.min_scale <= cfg_.initial_scale,
           "--min-loss-scale must be > 0 and <= --initial-loss-scale (got ", cfg_.min_scale, ")");
  MT_CHECK(cfg_.window > 0, "--loss-scale-window must be > 0 (got ", cfg_.window, ")");
  MT_CHECK(cfg_.hysteresis > 0, "--hysteresis must be > 0 (got ", cfg_.hysteresis, ")");
  state_ = {float(cfg_.initial_scale), 0, cfg_.hysteresis};
}

float GradScaler::inv_scale() const {
  return float(1.0 / double(state_.scale));
}

void GradScaler::update(bool found_inf) {
  if (!dynamic()) return;
  if (found_inf) {
    state_.growth_tracker = 0;
    if (--state_.hysteresis_tracker <= 0)
      state_.scale = std::max(state_.scale * 0.5f, float(cfg_.min_scale));
    return;
  }
  if (++state_.growth_tracker == cfg_.window) {
    state_.growth_tracker = 0;
    state_.hysteresis_tracker = cfg_.hysteresis;
    state_.scale *= 2.0f;
  }
}

}  // namespace mtron::optim
