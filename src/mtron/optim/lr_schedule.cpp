#include "mtron/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "mtron/core/error.h"

namespace mtron::optim {
namespace {

// The share of (lr - min_lr) left after the fraction r of a decay of the given style (linear and
// cosine decays anneal as WSD's styles of those names).
double decay_coeff(LrDecayStyle style, WsdDecayStyle wsd, double r) {
  if (style == LrDecayStyle::kLinear) wsd = WsdDecayStyle::kLinear;
  if (style == LrDecayStyle::kCosine) wsd = WsdDecayStyle::kCosine;
  switch (wsd) {
    case WsdDecayStyle::kExponential:
      return 2.0 * std::pow(0.5, r) - 1.0;
    case WsdDecayStyle::kLinear:
      return 1.0 - r;
    case WsdDecayStyle::kCosine:
      return 0.5 * (std::cos(M_PI * r) + 1.0);
    case WsdDecayStyle::kMinusSqrt:
      return 1.0 - std::sqrt(r);
  }
  return 1.0;
}

}  // namespace

double LrSchedule::lr_at(int64_t samples) const {
  if (warmup_samples > 0 && samples <= warmup_samples) {
    return warmup_init + (lr - warmup_init) * double(samples) / double(warmup_samples);
  }
  if (style == LrDecayStyle::kConstant) return lr;
  if (samples > decay_samples) return min_lr;
  if (style == LrDecayStyle::kInverseSquareRoot) {
    const double w = double(std::max<int64_t>(warmup_samples, 1));
    return std::max(min_lr, lr * std::sqrt(w) / std::sqrt(double(std::max<int64_t>(samples, 1))));
  }
  MT_ASSERT(decay_samples > warmup_samples, "decay (", decay_samples, ") must exceed warmup (",
            warmup_samples, ") samples");
  if (style == LrDecayStyle::kWsd) {
    MT_ASSERT(wsd_decay_samples > 0, "WSD needs its annealing samples");
    const int64_t anneal_start = decay_samples - wsd_decay_samples;
    if (samples <= anneal_start) return lr;
    const double r = double(samples - anneal_start) / double(wsd_decay_samples);
    return min_lr + decay_coeff(style, wsd_style, r) * (lr - min_lr);
  }
  const double r = double(samples - warmup_samples) / double(decay_samples - warmup_samples);
  return min_lr + decay_coeff(style, wsd_style, r) * (lr - min_lr);
}

}  // namespace mtron::optim
