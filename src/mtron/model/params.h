// defines: ParamSpec, ParamBuffer
//
// The parameter registry (docs/architecture.md, "The module contract"). Each model chunk
// registers its parameters here with their global shape and sharding; the buffer then lays them
// out in three flat tensors: fp32 master weights, fp32 gradients (accumulated with += over
// micro-batches) and, in bf16 (fp16) mode, the bf16 (fp16) compute copy the optimizer refreshes
// after each step.
// Data-parallel reduction and the distributed optimizer work on flat ranges of these; checkpoints,
// gradient clipping, weight tying and Hugging Face export all read the specs.
//
// Initialisation draws the *global* tensor element by element from Philox keyed by
// (seed, name) and keeps the local shard, so every layout starts from the same model.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mtron/core/precision.h"
#include "mtron/core/tensor.h"
#include "mtron/kernels/ctx.h"
#include "mtron/kernels/gemm_operand.h"

namespace mtron::model {

enum class ParamInit { kNormal, kOnes, kZeros };

struct ParamSpec {
  std::string name;  // Megatron-Core's name, with the global layer index
  Shape global_shape;
  int shard_dim = -1;        // sharded over TP along this dim; -1: replicated over TP
  int64_t shard_offset = 0;  // start of this rank's slice along shard_dim
  Shape local_shape;
  ParamInit init = ParamInit::kNormal;
  float init_std = 0.0f;
  bool weight_decay = true;  // Megatron: none on biases and norm weights
  // Replicated over TP with a gradient partial per TP rank, summed over TP after backward
  // (train/ddp.h): norms and row-parallel biases under SP (each rank saw its rows), the qk norms
  // (each rank's heads), and MLA's down projections and latent norms under TP (each rank's heads
  // contribute their part).
  bool sequence_parallel = false;
  bool tied_copy = false;    // last stage's replica of the word embeddings (PP > 1)
  bool cross_stage = false;  // tied word embeddings split over two pipeline stages: its
                             // gradient is summed over the embedding group first
  bool unit_start = false;   // first parameter of a layer or of the head (begin_unit())
  int64_t offset = 0;        // element offset in the flat buffers
  int64_t numel() const { return mtron::numel(local_shape); }
  bool tp_replicated() const { return shard_dim < 0; }
};

// A weight sharded along `dim` in `size` equal slices, of which this rank holds slice `rank`.
// Initialised N(0, std); a bias (weight_decay false) starts at zero.
ParamSpec sharded_spec(std::string name,
                       Shape global,
                       int dim,
                       int64_t rank,
                       int64_t size,
                       float std,
                       bool weight_decay = true);

// A contiguous range of whole parameters reduced over data parallel as one message (and, with
// the distributed optimizer, sharded over the DP x CP ranks in equal parts). Its length is a
// multiple of the shard count. A deferred bucket holds a cross-stage tied embedding, whose
// gradient must first be summed over the embedding group.
struct Bucket {
  int64_t begin = 0, end = 0;
  bool deferred = false;
  int64_t shard_len(int64_t shards) const { return (end - begin) / shards; }
  // Where shard `rank` of `shards` begins.
  int64_t shard_begin(int64_t shards, int64_t rank) const {
    return begin + rank * shard_len(shards);
  }
};

class ParamBuffer {
 public:
  // Registers a parameter; its slice of the global shape along shard_dim is
  // [shard_offset, shard_offset + local extent). Returns its handle.
  int add(ParamSpec spec);
  // The next parameter registered starts a unit: a layer, or the head (final norm, output layer,
  // MTP depths). With unit buckets (FSDP) every unit starts a bucket.
  void begin_unit() { unit_next_ = true; }

  // Lays out every registered parameter (64-element aligned) in buckets of at least
  // `bucket_elems` elements (0: one bucket), each padded to a multiple of 64 * `shards` (the
  // distributed optimizer's shard count; padding is zero), and allocates the buffers on k's
  // device (ops on them then run on k). precision: kFP32, or kBF16 / kFP16 (adds the bf16 / fp16
  // compute copy). unit_buckets: a bucket also closes before each unit (begin_unit()), so that
  // FSDP gathers and releases a layer's parameters as one bucket. discardable: the buffers are
  // discardable device memory (memory.h) that starts out discarded: FSDP's sharded gradients
  // return what a rank does not hold, and every writer of a part of the buffers commits it first
  // (commit_params, commit_grads; init commits the ranges it fills).
  void allocate(Precision precision,
                int64_t shards,
                int64_t bucket_elems = 0,
                const kernels::Ctx& k = {},
                bool unit_buckets = false,
                bool discardable = false);
  // Fills master weights per their specs (on the host, then copied to the device) and
  // refreshes the compute copy: of every element, or only of the element ranges `keep` (FSDP's
  // sharded parameters: a rank's shards; the rest stays zero and, where it can be, not backed).
  // Each element's value is the same either way.
  void init(uint64_t seed, const std::vector<std::pair<int64_t, int64_t>>& keep = {});
  // master -> compute copy (after loading or an optimizer step that did not write it), of the
  // whole buffer or of elements [begin, end); nothing in fp32 mode.
  void refresh_compute();
  void refresh_compute(int64_t begin, int64_t end);
  void zero_grad();
  // Backs elements [begin, end) of the master weights and their compute copy, or of the
  // gradients, where device_discard returned them (those elements then read as zero); nothing to
  // do where they are held.
  void commit_params(int64_t begin, int64_t end) const;
  void commit_grads(int64_t begin, int64_t end) const;

  const std::vector<Bucket>& buckets() const { return buckets_; }
  const ParamSpec& spec(int h) const { return specs_[size_t(h)]; }
  const std::vector<ParamSpec>& specs() const { return specs_; }
  // The handle of the parameter named `name`, or -1.
  int find(const std::string& name) const;
  float* master(int h) const { return master_.f32() + specs_[size_t(h)].offset; }
  float* grad(int h) const { return grad_.f32() + specs_[size_t(h)].offset; }
  // The weight as a GEMM reads it: the fp32 master in fp32 mode, the compute copy otherwise.
  kernels::GemmOperand weight(int h) const;
  Precision precision() const { return precision_; }
  const kernels::Ctx& ctx() const { return ctx_; }

  const Tensor& master_flat() const { return master_; }
  const Tensor& grad_flat() const { return grad_; }
  // The bf16 or fp16 compute copy (undefined in fp32 mode).
  const Tensor& compute_flat() const { return compute_; }
  int64_t size() const { return master_.numel(); }  // padded element count

 private:
  std::vector<ParamSpec> specs_;
  std::vector<Bucket> buckets_;
  Precision precision_ = Precision::kFP32;
  kernels::Ctx ctx_;
  Tensor master_, grad_, compute_;
  bool discardable_ = false;  // allocate's: commit_params and commit_grads have work
  bool unit_next_ = false;
};

}  // namespace mtron::model
