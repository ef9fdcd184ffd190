// defines: OptimRange, OptimBuffer, AdamWConfig, Optimizer
//
// AdamW, and with --optimizer muon Muon for the parameters marked (optim/muon.h), over flat fp32
// buffers (one per model chunk). The optimizer knows nothing of the model:
// a buffer is a master/grad(/compute copy) triple plus ranges with their weight-decay and norm
// flags (the trainer builds them from the parameter registry). With the distributed optimizer each
// data-parallel rank owns one equal part of every gradient bucket (Megatron's layout: each
// bucket is reduce-scattered on its own), its `shards`, and keeps Adam's moments for those
// elements only, stored one after another in shard order. Muon keeps its momentum where Adam's
// first moment would be (the second stays zero) and steps the matrices that lie whole in the
// shards (the whole buffer, or with the layer-wise distributed optimizer the rank's parameters).
//
// Optimizer offload (Megatron's --optimizer-cpu-offload, --optimizer-offload-fraction): the first
// moments of each buffer, up to the parameter boundary nearest that fraction of its shard
// elements, live in host memory, and their AdamW step runs on the CPU while the device steps the
// rest. Per step and buffer the offloaded gradients and weights are read to the host (one copy per
// shard that holds some, each a host synchronisation), and the updated weights are queued back to
// the device, whose compute copy is then refreshed there. The fp32 weights stay on the device:
// what the device saves is the two moments (8 bytes per offloaded parameter). The CPU and device
// AdamW kernels compute the same fp32 arithmetic (no contraction), so the result is the same.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "mtron/comm/comm.h"
#include "mtron/core/tensor.h"
#include "mtron/kernels/adamw.h"
#include "mtron/optim/muon.h"

namespace mtron::optim {

struct OptimRange {
  int64_t begin = 0, end = 0;  // elements in the buffer
  bool weight_decay = true;
  // false for replicas counted on another rank (TP duplicates, tied copies)
  bool count_in_norm = true;
  bool decoupled_lr = false;  // steps with the decoupled learning rate (--decoupled-lr)
  bool muon = false;          // stepped by Muon (one of the buffer's `muon` matrices), not AdamW
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
  std::vector<Shard> shards;     // this rank's part, sorted (the whole buffer unless sharded)
  std::vector<MuonMatrix> muon;  // the parameters Muon steps (ranges marked muon)
  int64_t shard_elems() const;
};

// Where buffer element `element` has its moments: its index in the shards' elements stored one
// after another (the moments' order), or -1 when no shard holds it.
int64_t shard_moment(const std::vector<OptimBuffer::Shard>& shards, int64_t element);

// Where Adam's moment buffer (m or v) of one OptimBuffer lives: its first host_elems elements in
// host memory (the offloaded part), the rest on the buffers' device (device[0] is element
// host_elems). A parameter's moments never straddle the two.
struct MomentSplit {
  float* host = nullptr;
  float* device = nullptr;
  int64_t host_elems = 0;
  bool on_host(int64_t m) const { return m < host_elems; }
  float* at(int64_t m) const { return on_host(m) ? host + m : device + (m - host_elems); }
  explicit operator bool() const { return host != nullptr || device != nullptr; }
};

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float weight_decay = 0.01f;
  float clip_grad = 1.0f;  // global L2 norm; <= 0: no clipping
};

class Optimizer {
 public:
  // The buffers live on k's device; the moments go there too and the steps run on k, except the
  // offloaded part (offload_fraction in [0, 1], of each buffer's shard elements), which stays
  // in host memory and steps on the CPU. With `muon` the ranges marked muon step by Muon (no
  // offload then).
  Optimizer(std::vector<OptimBuffer> buffers,
            AdamWConfig cfg,
            const kernels::Ctx& k = {},
            double offload_fraction = 0,
            std::optional<MuonConfig> muon = std::nullopt);

  // The global gradient norm over this rank's shards, summed over `norm_group` (the ranks that
  // hold different parts of the gradient: model parallel, and data parallel when sharded).
  double grad_norm(Comm& norm_group) const;
  // One step (AdamW's, and Muon's for its ranges) with learning rate lr over each buffer's shard
  // (decoupled_lr, when given, for the ranges marked decoupled_lr), of the gradients clipped by the
  // given global norm (the factor applied as the step reads them; the gradient buffers are left as
  // they are). Returns false (and changes nothing) if the norm is not finite.
  bool step(double lr, double grad_norm, std::optional<double> decoupled_lr = std::nullopt);
  // grad *= s over this rank's shards (the loss scaler's unscaling).
  void scale_grads(float s);

  int64_t steps() const { return step_; }
  void set_steps(int64_t s) { step_ = s; }
  // Optimizer-state bytes this rank holds (moments) on the buffers' device and, offloaded, in
  // host memory, for the memory report.
  int64_t state_bytes() const;
  int64_t host_state_bytes() const;
  const std::vector<OptimBuffer>& buffers() const { return buffers_; }
  // Adam moments of buffer i (its shards, concatenated).
  MomentSplit exp_avg(size_t i) const { return split(i, m_, mh_); }
  MomentSplit exp_avg_sq(size_t i) const { return split(i, v_, vh_); }

 private:
  MomentSplit split(size_t i,
                    const std::vector<Tensor>& dev,
                    const std::vector<Tensor>& host) const;
  // f(begin, at, n) for each shard of buffer i holding offloaded elements: n of them from `begin`
  // in the flat buffers, at `at` in the host copies (moment order).
  template <typename F>
  void for_each_offloaded(size_t i, F&& f) const;
  // Copies the offloaded part of buffer i (its first host_[i] shard elements) of `device`, one of
  // its flat device buffers (grad, master), to `host` (host_[i] elements; to_host) or back.
  void offload_copy(size_t i, float* device, float* host, bool to_host) const;

  std::vector<OptimBuffer> buffers_;
  AdamWConfig cfg_;
  kernels::Ctx k_;
  std::vector<Tensor> m_, v_;    // on the device: the moments from host_[i] on
  std::vector<Tensor> mh_, vh_;  // in host memory: the offloaded moments
  // Per buffer: offloaded shard elements, and host copies of their gradients and weights.
  std::vector<int64_t> host_;
  std::vector<Tensor> grad_h_, master_h_;
  Tensor norm_sum_;  // [1] double on the device: grad_norm's sum of squares
  std::unique_ptr<Muon> muon_;
  int64_t step_ = 0;
};

}  // namespace mtron::optim
