// defines: optim_ranges, ddp_bucket_elems, DdpOptions, ddp_buffer, finalize_model_grads
//
// Data-parallel ownership of the parameters and their gradients (Megatron's distributed data
// parallel): the buckets, the shard count and the GradSync of each parameter buffer
// (ddp_buffer), which rank counts each parameter in the global gradient norm and which learning
// rate it takes (optim_ranges), and, after a step's backward, every reduction that completes the
// gradients (finalize_model_grads, as Megatron's function of that name): the embedding group's
// all-reduce of tied embeddings split over pipeline stages, the bucketed data-parallel reduction
// (GradSync), and the TP all-reduce of the sequence-parallel parameters' gradients.
#pragma once

#include <memory>
#include <vector>

#include "mtron/model/gpt.h"
#include "mtron/optim/optimizer.h"
#include "mtron/parallel/parallel_state.h"
#include "mtron/train/grad_sync.h"

namespace mtron::train {

// Megatron's DDP bucket size in elements (resolve_ddp_bucket_size): 0 (one bucket) without
// overlapping the reduction with backward; else the rank's parameters (all its model chunks,
// experts included) over `num_buckets` (--ddp-num-buckets) when set, else `flag`
// (--ddp-bucket-size) when set, else max(40M, 1M x DP).
int64_t ddp_bucket_elems(int64_t flag,
                         int64_t num_buckets,
                         int64_t rank_params,
                         bool overlap_grad_reduce,
                         int64_t dp_size);

struct DdpOptions {
  int64_t bucket_elems = 0;  // ddp_bucket_elems
  bool grad_reduce_in_bf16 = false;
  bool decoupled_lr = false;  // --decoupled-lr (the dense buffers' embedding and output layer)
  bool unit_buckets = false;  // FSDP: a bucket per layer (dense buffers), as Megatron-FSDP's
  // FSDP's sharded gradients (ZeRO-2 and -3, DP > 1): the dense buffers are discardable device
  // memory (ParamBuffer::allocate), so that what a rank does not hold is returned on CUDA too.
  bool discardable = false;
  // FSDP's sharded parameters (ZeRO-3): each rank initialises only its shards of the dense
  // buffer's master weights (the others are gathered when used).
  bool shard_params = false;
  const optim::MuonConfig* muon = nullptr;  // --optimizer muon
  std::vector<int64_t> qkv_rows;            // a fused QKV weight's q, k, v rows per query group
  bool layer_wise = false;  // the layer-wise distributed optimizer (GradSync::own_whole_params)
  bool wd_qk_layernorm = false;  // --apply-wd-to-qk-layernorm
};

// Whether Muon steps parameter `s`, as Megatron picks them: the weights that are matrices
// (SwiGLU's [2, F, h] fc1 is Megatron's [2F, h]) other than the word embeddings and the output
// layer (the learned position embeddings are Muon's, as in Megatron).
bool muon_steps(const model::ParamSpec& s);

// The optimizer's view of buffer `p` (a chunk's dense parameters, or its routed experts'):
// one range per parameter. The global gradient norm sums over the world, so each replica is
// counted on one rank only: TP-replicated parameters on TP rank 0, the last stage's tied
// embedding copy not at all (the first stage counts it), and, unless the distributed optimizer
// shards them or the layer-wise one gives them to their owners, parameters on replica 0 of their
// data-parallel group (DP x CP; EDP for the routed experts). With o.decoupled_lr (dense buffers)
// the word embeddings and the output layer (both copies when tied across stages) take the
// decoupled learning rate, as Megatron's is_embedding_or_output_parameter. With o.muon the weights
// Muon steps (muon_steps) are marked. With o.wd_qk_layernorm the q and k layernorms' weights and
// biases take weight decay, as Megatron's "q_layernorm." / "k_layernorm." name test.
std::vector<optim::OptimRange> optim_ranges(const model::ParamBuffer& p,
                                            const ParallelState& ps,
                                            bool experts,
                                            const DdpOptions& o);

// Makes buffer `p` of a chunk (its dense parameters, or with `experts` its routed experts)
// ready for data parallelism over its group (DP x CP, or EDP for the experts): allocates it in
// the run's precision (sharded over the group with the distributed optimizer), initialises it
// from `seed`, appends its GradSync to `syncs`, and returns the optimizer's view of it.
optim::OptimBuffer ddp_buffer(const model::RunCtx& rc,
                              const ParallelState& ps,
                              const DdpOptions& o,
                              model::ParamBuffer& p,
                              bool experts,
                              uint64_t seed,
                              std::vector<std::unique_ptr<GradSync>>& syncs);

// Sums the micro-batches' gradients of this rank's chunks across ranks as the layout needs:
// tied embeddings over the embedding group (before the data-parallel reduction: the two
// stages' buffers are laid out differently), then each GradSync's bucketed reduction (dense
// and expert), then the sequence-parallel parameters' gradients over TP.
void finalize_model_grads(const model::RunCtx& rc,
                          const ParallelState& ps,
                          std::vector<std::unique_ptr<model::GPTChunk>>& chunks,
                          std::vector<std::unique_ptr<GradSync>>& grad_syncs,
                          std::vector<std::unique_ptr<GradSync>>& expert_syncs);

}  // namespace mtron::train
