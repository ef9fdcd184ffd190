// defines: LrDecayStyle, LrSchedule
//
// Megatron's OptimizerParamScheduler: counted in *samples*. Warmup rises linearly from
// lr_warmup_init to lr over lr_warmup_iters * global_batch samples; then decay to min_lr over
// the remaining lr_decay_iters * global_batch samples (linear: 1 - r, cosine:
// 0.5 (cos(pi r) + 1), constant: lr). The learning rate of iteration k (1-based) is
// lr_at((k - 1) * global_batch); Megatron's log line shows lr_at(k * global_batch), the rate of
// the next iteration, read after the scheduler stepped.
#pragma once

#include <cstdint>

namespace mtron::optim {

enum class LrDecayStyle { kConstant, kLinear, kCosine, kInverseSquareRoot };

struct LrSchedule {
  double lr = 0, min_lr = 0, warmup_init = 0;
  int64_t warmup_samples = 0, decay_samples = 0;
  LrDecayStyle style = LrDecayStyle::kLinear;

  double lr_at(int64_t samples) const;
};

}  // namespace mtron::optim
