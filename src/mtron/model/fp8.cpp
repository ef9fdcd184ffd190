#include "mtron/model/fp8.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "mtron/core/error.h"
#include "mtron/kernels/device.h"
#include "mtron/kernels/elementwise.h"

namespace mtron::model {

bool Fp8Config::layer_in_fp8(int64_t layer, int64_t num_layers) const {
  if (!enabled) return false;
  if (!first_last_layers_bf16) return true;
  return layer >= num_layers_at_start_in_bf16 && layer < num_layers - num_layers_at_end_in_bf16;
}

std::string Fp8Config::describe() const {
  std::string s = hybrid ? "hybrid (E4M3 forward, E5M2 gradients)" : "e4m3";
  if (recipe == Fp8Recipe::kTensorwise) return s + ", tensorwise (current) scaling";
  return s + ", delayed scaling (amax history " + std::to_string(amax_history_len) + ", " +
         (amax_compute_algo == Fp8AmaxAlgo::kMax ? "max" : "most_recent") + ", margin " +
         std::to_string(margin) + ")";
}

void delayed_scaling_update(
    Fp8Scaling& s, float amax, float fp8_max, int margin, Fp8AmaxAlgo algo) {
  if (amax == 0.0f) return;
  std::vector<float>& h = s.history;
  const size_t len = h.size();
  // The window: the older entries h[1..len) and this amax; it rolls to [0, h[2..len), amax].
  float window_max = 0.0f;
  for (size_t i = 1; i < len; ++i) window_max = std::fmax(window_max, h[i]);
  window_max = std::fmax(window_max, amax);
  for (size_t i = 1; i + 1 < len; ++i) h[i] = h[i + 1];
  if (len > 1) h[len - 1] = amax;
  h[0] = 0.0f;
  const float a = algo == Fp8AmaxAlgo::kMostRecent ? amax : window_max;
  const float scaled_max = fp8_max * std::pow(2.0f, -float(margin));
  float scale = std::isfinite(a) && a > 0 ? scaled_max / a : s.scale;
  if (std::isinf(scale)) scale = std::numeric_limits<float>::max();
  s.scale = scale;
}

float current_scaling(float amax, float fp8_max) {
  if (amax == 0.0f || !std::isfinite(amax)) return 1.0f;
  const float scale = fp8_max / amax;
  return std::isinf(scale) ? std::numeric_limits<float>::max() : scale;
}

const char* fp8_role_name(Fp8Role r) {
  return r == Fp8Role::kInput ? "input" : r == Fp8Role::kWeight ? "weight" : "grad_output";
}

namespace {

// The global layer index of a transformer layer's GEMM weight, or -1 for any other parameter.
int64_t linear_layer(const std::string& name) {
  const std::string pre = "decoder.layers.";
  if (name.rfind(pre, 0) != 0) return -1;
  bool gemm = false;
  for (const char* s :
       {".linear_qkv.weight", ".linear_proj.weight", ".linear_fc1.weight", ".linear_fc2.weight",
        ".linear_q_proj.weight", ".linear_q_down_proj.weight", ".linear_q_up_proj.weight",
        ".linear_kv_down_proj.weight", ".linear_kv_up_proj.weight"}) {
    const std::string suffix = s;
    gemm |= name.size() > suffix.size() &&
            name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  }
  return gemm ? std::stoll(name.substr(pre.size())) : -1;
}

}  // namespace

Fp8State::Fp8State(const Fp8Config& cfg, const kernels::Ctx& k) : cfg_(cfg), k_(k) {}

void Fp8State::add_linears(const ParamBuffer& params, int64_t num_layers, bool experts) {
  if (params.specs().empty()) return;  // no routed experts
  MT_ASSERT(params.precision() != Precision::kFP16, "FP8 runs with bf16 or fp32 weights");
  for (size_t h = 0; h < params.specs().size(); ++h) {
    const std::string& n = params.specs()[h].name;
    const int64_t layer = linear_layer(n);
    if (layer < 0 || !cfg_.layer_in_fp8(layer, num_layers)) continue;
    (experts ? expert_pending_ : dense_pending_).push_back({n, params.weight(int(h)).data});
  }
}

void Fp8State::finalize() {
  dense_ = int(dense_pending_.size());
  for (const auto* list : {&dense_pending_, &expert_pending_}) {
    for (const Pending& p : *list) {
      index_[p.weight] = int(names_.size());
      names_.push_back(p.name);
    }
  }
  const size_t len = size_t(std::max<int64_t>(1, cfg_.amax_history_len));
  state_.assign(3 * names_.size(), Fp8Scaling{std::vector<float>(len, 0.0f), 1.0f});
  const int64_t n = std::max<int64_t>(1, 3 * size());
  amax_ = Tensor::empty({n}, DType::kF32, k_.device);
  kernels::fill_zero(k_, amax_.raw(), n * int64_t(sizeof(float)));
}

kernels::Fp8Format Fp8State::format(Fp8Role r) const {
  return cfg_.hybrid && r == Fp8Role::kGrad ? kernels::Fp8Format::kE5M2 : kernels::Fp8Format::kE4M3;
}

int Fp8State::find(const void* weight) const {
  const auto it = index_.find(weight);
  return it == index_.end() ? -1 : it->second;
}

float Fp8State::scale(int linear, Fp8Role r) const {
  return state_[size_t(3 * linear + int(r))].scale;
}

float* Fp8State::amax(int linear, Fp8Role r) const {
  return recording_ ? amax_.f32() + 3 * linear + int(r) : nullptr;
}

int64_t Fp8State::state_bytes() const {
  return 3 * size() * (std::max<int64_t>(1, cfg_.amax_history_len) + 1) * int64_t(sizeof(float));
}

std::vector<float> Fp8State::amaxes() const {
  std::vector<float> a(size_t(3 * size()));
  kernels::copy_to_host(k_, a.data(), amax_.raw(), int64_t(a.size() * sizeof(float)));
  return a;
}

void Fp8State::update(const std::vector<float>& reduced) {
  MT_ASSERT(int64_t(reduced.size()) == 3 * size(), "one amax per linear layer and role");
  for (size_t i = 0; i < reduced.size(); ++i) {
    const float mx = kernels::fp8_max(format(Fp8Role(i % 3)));
    delayed_scaling_update(state_[i], reduced[i], mx, cfg_.margin, cfg_.amax_compute_algo);
  }
  kernels::fill_zero(k_, amax_.raw(), amax_.numel() * int64_t(sizeof(float)));
}

}  // namespace mtron::model
