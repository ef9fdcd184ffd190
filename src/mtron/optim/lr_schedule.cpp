#include "mtron/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "mtron/core/error.h"

namespace mtron::optim {

double LrSchedule::lr_at(int64_t samples) const {
  if (warmup_samples > 0 && samples <= warmup_samples) {
    return warmup_init + (lr - warmup_init) * double(samples) / double(warmup_samples);
  }
  switch (style) {
    case LrDecayStyle::kConstant:
      return lr;
    case LrDecayStyle::kInverseSquareRoot: {
      const double w = double(std::max<int64_t>(warmup_samples, 1));
      return std::max(min_lr, lr * std::sqrt(w) / std::sqrt(double(std::max<int64_t>(samples, 1))));
    }
    case LrDecayStyle::kLinear:
    case LrDecayStyle::kCosine:
      break;
  }
  if (samples > decay_samples) return min_lr;
  MT_ASSERT(decay_samples > warmup_samples, "decay (", decay_samples, ") must exceed warmup (",
            warmup_samples, ") samples");
  const double r = double(samples - warmup_samples) / double(decay_samples - warmup_samples);
  const double coeff = style == LrDecayStyle::kLinear ? 1.0 - r : 0.5 * (std::cos(M_PI * r) + 1.0);
  return min_lr + coeff * (lr - min_lr);
}

}  // namespace mtron::optim
