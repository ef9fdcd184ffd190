#include "mtron/train/interval.h"

#include <cmath>

namespace mtron::train {

void Interval::add(const StepResult& r, double dt, double step_flops, int64_t step_samples) {
  (r.skipped ? skipped_loss : loss) += r.lm_loss;
  load_balancing += r.load_balancing_loss;
  z += r.z_loss;
  moe.add(r.moe);
  mtp.resize(r.mtp_losses.size());
  for (size_t k = 0; k < mtp.size(); ++k) mtp[k] += r.mtp_losses[k];
  time += dt;
  flops += step_flops;
  samples += step_samples;
  ++iters;
  skipped += r.skipped;
  nans += r.skipped && !std::isfinite(r.lm_loss);  // Megatron's nan iterations
}

void Interval::report(IterationLog& l,
                      const StepResult& last,
                      bool scaler,
                      int64_t world,
                      double peak,
                      const ModelConfig& m) const {
  const double per_iter = time / double(iters), per_iter_flops = flops / double(iters);
  l.elapsed_ms = 1e3 * per_iter;
  l.tflops_per_device = per_iter_flops / (per_iter * 1e12 * double(world));
  l.lm_loss = iters > skipped ? loss / double(iters - skipped) : skipped_loss / double(iters);
  l.loss_scale = last.loss_scale;
  l.grad_norm = last.logged_grad_norm(scaler);
  l.skipped_iterations = skipped;
  l.nan_iterations = nans;
  l.tokens_per_s_per_device = double(samples * m.seq_length) / time / double(world);
  l.mfu = peak > 0 ? per_iter_flops / per_iter / double(world) / peak : 0.0;
  if (m.is_moe()) l.extra.emplace_back("moe_routing_hash", moe.routed_hash);
  if (m.is_moe() && m.moe_router_enable_expert_bias)
    l.extra.emplace_back("moe_expert_bias_hash", last.expert_bias_hash);
  if (m.is_moe() && m.moe_expert_capacity_factor > 0) {
    l.extra.emplace_back("moe_dropped_pairs", moe.dropped);
    l.extra.emplace_back("moe_dropped_hash", moe.dropped_hash);
  }
}

}  // namespace mtron::train
