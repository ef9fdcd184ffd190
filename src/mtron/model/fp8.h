// defines: Fp8Recipe, Fp8AmaxAlgo, Fp8Config, Fp8Scaling, delayed_scaling_update,
//          current_scaling, Fp8Role, Fp8State
//
// FP8 training as Transformer Engine runs it under Megatron's --fp8-* flags (docs/precision.md):
// only the inputs of the transformer layers' linear-layer GEMMs are quantised (fprop: input and
// weight; dgrad: output gradient and weight; wgrad: output gradient and input), each with a
// per-tensor scale: the quantised value is fp8(x * scale) and the GEMM's alpha is
// (1 / scale_a) (1 / scale_b). E4M3 everywhere (--fp8-format e4m3), or E4M3 forward and E5M2 for
// the output gradients (hybrid).
//
// Recipes: delayed (TE's DelayedScaling) quantises with scales computed from an amax history of
// earlier iterations; tensorwise (TE's Float8CurrentScaling) with a scale from the tensor's own
// amax. The delayed state of each linear layer (one history and scale per role: input, weight,
// output gradient) lives in Fp8State; the amaxes an iteration records are reduced (MAX) over the
// ranks holding the layer's shards and replicas, then every history and scale is updated once
// (Fp8State::update), so every layout quantises with the same scales.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "mtron/core/tensor.h"
#include "mtron/kernels/ctx.h"
#include "mtron/kernels/fp8.h"
#include "mtron/model/params.h"

namespace mtron::model {

enum class Fp8Recipe { kDelayed, kTensorwise };
enum class Fp8AmaxAlgo { kMostRecent, kMax };

// Megatron's FP8 flags (defaults as Megatron's TransformerConfig).
struct Fp8Config {
  bool enabled = false;  // --fp8-format given
  bool hybrid = false;   // --fp8-format hybrid (else e4m3)
  Fp8Recipe recipe = Fp8Recipe::kDelayed;
  int margin = 0;                // --fp8-margin (delayed only)
  int64_t amax_history_len = 1;  // --fp8-amax-history-len (delayed only)
  Fp8AmaxAlgo amax_compute_algo = Fp8AmaxAlgo::kMostRecent;
  bool first_last_layers_bf16 = false;
  int64_t num_layers_at_start_in_bf16 = 1, num_layers_at_end_in_bf16 = 1;
  bool param_gather = false;  // --fp8-param-gather: no numeric effect here (docs/precision.md)

  // Whether global layer `layer` (0-based) of `num_layers` runs its GEMMs in FP8.
  bool layer_in_fp8(int64_t layer, int64_t num_layers) const;
  // "hybrid (E4M3 forward, E5M2 gradients), delayed scaling (amax history 16, max, margin 0)"
  std::string describe() const;
};

// One tensor's delayed-scaling state: TE's amax history (history[0] is the slot of the current
// iteration's amax; zero after an update) and scale.
struct Fp8Scaling {
  std::vector<float> history;
  float scale = 1.0f;
};

// TE's amax-and-scale update (its bulk form) with this iteration's amax: when amax is 0 (nothing
// recorded) the history and scale stay; otherwise the history rolls (the window of the last
// `history.size()` amaxes, this one included), the amax used is this one (most_recent) or the
// window's maximum (max, NaN ignored), and scale = fp8_max / 2^margin / amax when that amax is
// finite and positive, else the previous scale; an infinite scale becomes FLT_MAX.
void delayed_scaling_update(Fp8Scaling& s, float amax, float fp8_max, int margin, Fp8AmaxAlgo algo);

// TE's current scaling: fp8_max / amax; 1 when amax is 0, infinite or NaN; FLT_MAX when the
// quotient overflows.
float current_scaling(float amax, float fp8_max);

enum class Fp8Role { kInput = 0, kWeight = 1, kGrad = 2 };
// "input" | "weight" | "grad_output"
const char* fp8_role_name(Fp8Role r);

// The FP8 linear layers of this rank and their delayed-scaling state.
class Fp8State {
 public:
  Fp8State(const Fp8Config& cfg, const kernels::Ctx& k);

  // Registers the GEMM weights of `params` (the transformer layers' linear_qkv or multi-latent
  // attention's q and kv projections, linear_proj, linear_fc1 and linear_fc2, experts included)
  // of the layers that run in FP8; `experts`: the buffer of routed experts. Then finalize()
  // once, after the last buffer.
  void add_linears(const ParamBuffer& params, int64_t num_layers, bool experts);
  void finalize();

  const Fp8Config& config() const { return cfg_; }
  kernels::Fp8Format format(Fp8Role r) const;
  // The linear layer whose GEMM weight operand starts at `weight`, or -1 (not an FP8 GEMM).
  int find(const void* weight) const;
  // The delayed scale the layer's role quantises with this iteration.
  float scale(int linear, Fp8Role r) const;
  // Where the role's amax of this iteration accumulates (on the device), or null while not
  // recording (evaluation, or the tensorwise recipe).
  float* amax(int linear, Fp8Role r) const;
  void set_recording(bool on) { recording_ = on && cfg_.recipe == Fp8Recipe::kDelayed; }

  // The amaxes of this iteration, 3 per linear layer (input, weight, gradient), the dense layers'
  // first (dense_amaxes() of them), then the experts'; update() takes them reduced over the
  // ranks, updates every history and scale and zeroes the amaxes.
  std::vector<float> amaxes() const;
  int64_t dense_amaxes() const { return 3 * dense_; }
  void update(const std::vector<float>& reduced);

  // For checkpoints: the layers' names (their weights'), whether each is an expert's, and their
  // states ([3] per layer: input, weight, gradient).
  int64_t size() const { return int64_t(names_.size()); }
  // The bytes of the delayed state: a history and a scale per layer and role.
  int64_t state_bytes() const;
  const std::string& name(int linear) const { return names_[size_t(linear)]; }
  bool expert(int linear) const { return linear >= dense_; }
  Fp8Scaling* scaling(int linear) { return &state_[size_t(3 * linear)]; }

 private:
  struct Pending {
    std::string name;
    const void* weight;
  };
  Fp8Config cfg_;
  kernels::Ctx k_;
  std::vector<Pending> dense_pending_, expert_pending_;
  std::vector<std::string> names_;
  std::unordered_map<const void*, int> index_;
  std::vector<Fp8Scaling> state_;  // 3 per layer
  int dense_ = 0;
  Tensor amax_;  // 3 per layer, on the device
  bool recording_ = false;
};

}  // namespace mtron::model
