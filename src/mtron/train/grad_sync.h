// defines: GradSync
//
// Data-parallel gradient reduction of one model chunk's gradient buffer, bucket by bucket
// (model/params.h), over the DP x CP group: an all-reduce per bucket, or with the distributed
// optimizer a reduce-scatter that leaves each rank the sum for its part of every bucket.
// With --overlap-grad-reduce the buckets are launched as non-blocking collectives while backward
// still runs (ready() is called from the last micro-batch's backward as each layer finishes);
// deferred buckets (tied embeddings split over pipeline stages) always wait for finish(), after
// the caller has summed them over the embedding group. After the optimizer step the updated
// master weights are all-gathered bucket by bucket; with --overlap-param-gather the gathers run
// in the background and the next forward waits for each bucket just before it needs it.
// With FSDP's optim_grads_params (ZeRO-3) the parameters are sharded too: see shard_params().
// With the layer-wise distributed optimizer (Megatron's, for Muon) the gradients are all-reduced
// and each rank owns whole parameters: see own_whole_params().
// With bf16 reduction (--grad-reduce-in-bf16) each bucket is rounded to bf16, reduced in bf16 (the
// sum rounded to bf16 at each step, half the bytes on the wire) and widened back to fp32.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "mtron/comm/comm.h"
#include "mtron/model/params.h"

namespace mtron::train {

class GradSync {
 public:
  GradSync(model::ParamBuffer& params, Comm& dp, bool distributed_optimizer, bool bf16_reduce);

  // This rank's shard of each bucket (the whole bucket without the distributed optimizer), or
  // with own_whole_params() the parameters it owns.
  std::vector<std::pair<int64_t, int64_t>> shards() const;
  // The layer-wise distributed optimizer (without the distributed optimizer's sharding): the
  // buffer's parameters in order are cut into one run of whole parameters per rank, of about
  // equal element counts; each rank steps its run and gather_params() broadcasts every run from
  // its owner. Identical on ranks with the same buffer layout (TP and expert-TP peers).
  void own_whole_params();

  // Launches every bucket not yet launched whose parameters all sit at or above `offset`.
  void ready(int64_t offset);
  // Launches the rest, waits for everything; the gradients are then reduced (in this rank's
  // shards). Resets for the next step.
  void finish();
  // After an optimizer step on the shards: gathers every bucket's updated master weights (and
  // refreshes their compute copy). overlap: only launch; wait_params() completes.
  void gather_params(bool overlap);
  // Completes the gathers of the buckets that hold buffer elements [begin, end).
  void wait_params(int64_t begin, int64_t end);
  void wait_all_params() { wait_params(0, p_.size()); }
  bool params_pending() const { return pending_params_; }

  // FSDP's optim_grads_params (ZeRO-3): outside the parts of a pass that read them, a bucket's
  // parameters beyond this rank's shard are not held. shard_params() drops them (after
  // initialisation, a checkpoint load and every optimizer step, when this rank's shard is the
  // current one); use_params() all-gathers the buckets holding elements [begin, end) from every
  // rank's shard of the fp32 master weights and narrows their compute copy (the model reads both
  // in mixed precision: embeddings, norms and biases the master, GEMMs the copy), as
  // gather_params() does; release_params() drops them again once no part uses them. On the CPU
  // the dropped pages go back to the system (device_discard); on CUDA the granules of the
  // buffers (discardable: ParamBuffer::allocate) wholly inside them, until use_params() or a
  // gather backs them again.
  // prefetch_params() starts the all-gathers of the buckets holding [begin, end) that are not
  // held, without waiting: use_params() completes them (--overlap-param-gather: the next part's
  // gather runs while the current part computes; a rank then holds about two parts' parameters).
  void shard_params();
  void use_params(int64_t begin, int64_t end);
  void prefetch_params(int64_t begin, int64_t end);
  void release_params(int64_t begin, int64_t end);
  // Gathers every bucket and holds them until the next shard_params(): for reads of the whole
  // model (generation, export).
  void gather_all_params();
  bool params_sharded() const { return sharded_; }

  // FSDP's optim_grads and optim_grads_params: the gradients are sharded too. After
  // shard_grads(), scatter(offset) is called as each micro-batch's backward completes the
  // gradients at or above `offset`: it reduce-scatters the buckets there not yet reduced in this
  // micro-batch into this rank's shard, which holds the sum of the step's micro-batches (in the
  // buffer: the other ranks' zeroed parts make the reduction add to it; with bf16 reduction in a
  // separate fp32 sum that finish() writes back), and zeroes the rest of the bucket (dropping its
  // pages on the CPU, its granules on CUDA: device_discard), so a rank holds the whole gradients of
  // about one layer at a time besides its shards. A deferred bucket (tied embeddings split over
  // pipeline stages) is reduced once per step as without.
  // overlap (--overlap-grad-reduce): a part's reduce-scatters complete after the next part's
  // backward has been issued (on CUDA they run on NCCL's stream during it), each micro-batch's
  // last ones at its end; a rank then holds about two parts' gradients whole.
  void shard_grads(bool overlap = false);
  bool grads_sharded() const { return grads_sharded_; }
  void scatter(int64_t offset);
  // Sharded gradients: backs the gradient elements [begin, end) that scatter() returned (zero),
  // before a part's backward writes them (discardable buffers: a GPU faults on the others).
  void use_grads(int64_t begin, int64_t end);
  // Zeroes the gradients for the next step: the whole buffer, or with sharded gradients what is
  // not zero already (this rank's shards and the deferred buckets).
  void zero_grad();

 private:
  void launch(size_t b);
  // Starts bucket i's all-gather of the master weights; completes it and narrows the compute copy.
  void launch_gather(size_t i);
  void complete_gather(size_t i);
  // Gathers the buckets (launched together) and marks them held.
  void gather(const std::vector<size_t>& buckets);
  // Drops bucket i's other shards of the master weights and of their compute copy.
  void drop(size_t i);
  // A reduce-scatter of one bucket's gradients of one micro-batch in flight, with its buffers.
  struct Scatter {
    size_t bucket = 0;
    std::unique_ptr<Request> req;
    Tensor part;            // the rank's shard of the sum (the largest bucket's size)
    Tensor send16, recv16;  // bf16 reduction: the bucket and its shard
  };
  // Launches bucket i's reduce-scatter; complete_scatter adds it into the shard's sum over the
  // micro-batches and zeroes the bucket's gradients (returning what device_discard can).
  void launch_scatter(size_t i);
  void complete_scatter(Scatter& sc);
  // Zeroes gradient elements [begin, end), returning their whole pages on the CPU.
  void zero_grads(int64_t begin, int64_t end);

  model::ParamBuffer& p_;
  Comm& dp_;
  bool distributed_;
  bool bf16_;                                       // bf16 reduction (at DP > 1)
  std::vector<std::pair<int64_t, int64_t>> owned_;  // layer-wise: each rank's run of elements
  std::vector<bool> launched_;
  std::vector<std::unique_ptr<Request>> requests_;  // per bucket (null when not in flight)
  std::vector<Tensor> scattered_;                   // reduce-scatter outputs per bucket
  std::vector<Tensor> bf16_send_, bf16_recv_;       // bf16 reduction: per bucket
  std::vector<std::unique_ptr<Request>> gathers_;   // per bucket, in flight
  bool pending_params_ = false;
  bool sharded_ = false, hold_all_ = false;
  std::vector<int> uses_;   // per bucket: parts using it now (sharded)
  std::vector<bool> held_;  // per bucket: gathered (sharded)
  bool grads_sharded_ = false;
  std::vector<Tensor> sums_;   // per bucket, bf16 reduction: the shard's sum over micro-batches
  std::vector<bool> summed_;   // per bucket: sums_ holds a micro-batch of this step
  std::vector<bool> reduced_;  // per bucket: reduced in the current micro-batch
  bool overlap_scatter_ = false;
  int64_t largest_ = 1, largest_shard_ = 1;  // elements: the largest bucket and shard
  std::vector<Scatter> flying_, spare_;      // launched, not completed; buffers to reuse
};

}  // namespace mtron::train
