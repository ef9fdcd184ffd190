// defines: OptimRange, OptimBuffer, AdamWConfig, AdamW
//
// AdamW over flat fp32 buffers (one per model chunk). The optimizer knows nothing of the model:
// a buffer is a master/grad(/compute copy) triple plus ranges with their weight-decay and norm
// flags (the trainer builds them from the parameter registry). With the distributed optimizer each
// data-parallel rank owns one equal part of every gradient bucket (Megatron's layout: each
// bucket is reduce-scattered on its own), its `shards`, and keeps Adam's moments for those
// elements only, stored one after another in shard order.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "mtron/comm/comm.h"
#include "mtron/core/tensor.h"
#include "mtron/kernels/adamw.h"

namespace mtron::optim {

struct OptimRange {
  int64_t begin = 0, end = 0;  // elements in the buffer
  bool weight_decay = true;
  // false for replicas counted on another rank (TP duplicates, tied copies)
  bool count_in_norm = true;
  bool decoupled_lr = false;  // steps with the decoupled learning rate (--decoupled-lr)
};

struct OptimBuffer {
  float* master = nullptr;
  float* grad = nullptr;
  // The bf16 or fp16 compute copy refreshed by the step (null in fp32 mode): bf16 written by the
  // AdamW kernel itself, fp16 converted after it.
  void* compute = nullptr;
  DType compute_dtype = DType::kBF16;
  int64_t size = 0;
  std::vector<OptimRange> ranges;  // sorted, disjoint
  struct Shard {
    int64_t begin, end;
  };
  std::vector<Shard> shards;  // this rank's part, sorted (the whole buffer unless sharded)
  int64_t shard_elems() const;
};

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float weight_decay = 0.01f;
  float clip_grad = 1.0f;  // global L2 norm; <= 0: no clipping
};

class AdamW {
 public:
  // The buffers live on k's device; the moments go there too and the steps run on k.
  AdamW(std::vector<OptimBuffer> buffers, AdamWConfig cfg, const kernels::Ctx& k = {});

  // The global gradient norm over this rank's shards, summed over `norm_group` (the ranks that
  // hold different parts of the gradient: model parallel, and data parallel when sharded).
  double grad_norm(Comm& norm_group) const;
  // Clips by the given global norm, then one AdamW step with learning rate lr over each
  // buffer's shard (decoupled_lr, when given, for the ranges marked decoupled_lr). Returns false
  // (and changes nothing) if the norm is not finite.
  bool step(double lr, double grad_norm, std::optional<double> decoupled_lr = std::nullopt);
  // grad *= s over this rank's shards (clipping; the loss scaler's unscaling).
  void scale_grads(float s);

  int64_t steps() const { return step_; }
  void set_steps(int64_t s) { step_ = s; }
  // Optimizer-state bytes this rank holds (moments), for the memory report.
  int64_t state_bytes() const;
  const std::vector<OptimBuffer>& buffers() const { return buffers_; }
  // Adam moments of buffer i (its shards, concatenated), on the buffers' device.
  const Tensor& exp_avg(size_t i) const { return m_[i]; }
  const Tensor& exp_avg_sq(size_t i) const { return v_[i]; }

 private:
  std::vector<OptimBuffer> buffers_;
  AdamWConfig cfg_;
  kernels::Ctx k_;
  std::vector<Tensor> m_, v_;
  Tensor norm_sum_;  // [1] double on the device: grad_norm's sum of squares
  int64_t step_ = 0;
};

}  // namespace mtron::optim
