// defines: tiny, Model
//
// The checkpoint unit tests' model: a tiny GPT-2-style configuration and a single-process model
// chunk with random optimizer moments, all in the memory of one device.
#pragma once

#include <cmath>
#include <random>
#include <vector>

#include "mtron/checkpoint/checkpoint.h"
#include "mtron/kernels/device.h"
#include "mtron/model/gpt.h"
#include "test_helpers.h"

namespace mtron::checkpoint {

inline ModelConfig tiny(int64_t divisible_by = 128) {
  ModelConfig m = tests::model_shape(2, 32, 4, 8, 100);
  m.make_vocab_size_divisible_by = divisible_by;
  m.finalize();
  return m;
}

// A whole single-process model with its optimizer moments m and v, on device d.
struct Model {
  ModelConfig cfg;
  kernels::Ctx k;
  model::GPTChunk chunk;
  Tensor m, v;
  Model(const ModelConfig& c, uint64_t seed, Device d = Device::kCPU)
      : cfg(c), k{d}, chunk(cfg, {0, c.num_layers, true, true}, parallel::TensorParallel{}, {}) {
    model::ParamBuffer& p = chunk.params();
    p.allocate(Precision::kFP32, 1, 0, k);
    p.init(seed);
    std::mt19937 rng{unsigned(seed)};
    std::normal_distribution<float> n;
    std::vector<float> hm(size_t(p.size())), hv(hm.size());
    for (auto& x : hm) x = n(rng);
    for (auto& x : hv) x = std::abs(n(rng));
    m = Tensor::empty({p.size()}, DType::kF32, d);
    v = Tensor::empty({p.size()}, DType::kF32, d);
    kernels::copy_from_host(k, m.f32(), hm.data(), p.size() * 4);
    kernels::copy_from_host(k, v.f32(), hv.data(), p.size() * 4);
  }
  std::vector<ChunkState> state() {
    return {{&chunk.params(),
             {nullptr, m.f32(), 0},
             {nullptr, v.f32(), 0},
             {{0, chunk.params().size()}},
             false,
             {}}};
  }
  // A copy of t (on this model's device) in host memory.
  std::vector<float> host(const Tensor& t) const {
    std::vector<float> h(size_t(t.numel()));
    kernels::copy_to_host(k, h.data(), t.f32(), t.numel() * 4);
    return h;
  }
};

}  // namespace mtron::checkpoint
