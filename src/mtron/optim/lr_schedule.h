// defines: LrDecayStyle, WsdDecayStyle, LrSchedule
//
// Megatron's OptimizerParamScheduler: counted in *samples*. Warmup rises linearly from
// lr_warmup_init to lr over lr_warmup_iters * global_batch samples; then decay to min_lr over
// the remaining lr_decay_iters * global_batch samples (linear: 1 - r, cosine:
// 0.5 (cos(pi r) + 1), constant: lr). WSD (warmup, stable, decay) holds lr until the last
// wsd_decay_samples of the decay and anneals over those (exponential: 2 * 0.5^r - 1, linear,
// cosine, minus_sqrt: 1 - sqrt(r)). Past the decay every style but constant gives min_lr. The
// learning rate of iteration k (1-based) is lr_at((k - 1) * global_batch); Megatron's log line
// shows lr_at(k * global_batch), the rate of the next iteration, read after the scheduler stepped.
#pragma once

#include <cstdint>

namespace mtron::optim {

enum class LrDecayStyle { kConstant, kLinear, kCosine, kInverseSquareRoot, kWsd };
enum class WsdDecayStyle { kExponential, kLinear, kCosine, kMinusSqrt };

struct LrSchedule {
  double lr = 0, min_lr = 0, warmup_init = 0;
  int64_t warmup_samples = 0, decay_samples = 0;
  LrDecayStyle style = LrDecayStyle::kLinear;
  int64_t wsd_decay_samples = 0;  // WSD's annealing phase, the end of the decay
  WsdDecayStyle wsd_style = WsdDecayStyle::kExponential;

  double lr_at(int64_t samples) const;
};

}  // namespace mtron::optim
