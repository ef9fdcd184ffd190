// defines: ParallelConfig
//
// A parallel layout and batch split: sizes of the five parallel dimensions, the virtual pipeline,
// the optimizer sharding, micro/global batch. finalize() applies Megatron's validation rules
// (arguments.py's validate_args) before anything large is allocated. The trainer and the
// planner share it, so a layout the planner proposes is one the trainer accepts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mtron/core/model_config.h"

namespace mtron {

// How context parallelism moves attention's inputs (Megatron's --cp-comm-type): K/V blocks round
// a ring (p2p), K/V all-gathered (all_gather), heads exchanged all-to-all for the whole sequence
// (a2a, DeepSpeed-Ulysses), or all-to-all inside groups of adjacent CP ranks and a ring across
// them (a2a+p2p, with --hierarchical-context-parallel-sizes).
enum class CpCommType { kP2P, kAllGather, kA2A, kA2AP2P };
const char* cp_comm_name(CpCommType t);
// The types of --cp-comm-type's words (arguments may hold several, separated by spaces;
// "allgather", as Megatron's help spells it, is all_gather); throws mtron::Error naming an
// unknown word or an empty list.
std::vector<CpCommType> parse_cp_comm_types(const std::vector<std::string>& args);
// Whether the heads' all-to-all over a ranks fits m at tensor-parallel size tp: the heads and the
// query groups per TP rank are multiples of a.
bool cp_heads_divide(const ModelConfig& m, int64_t tp, int64_t a);

struct ParallelConfig {
  int64_t world_size = 1;
  int64_t tensor_model_parallel_size = 1;
  int64_t pipeline_model_parallel_size = 1;
  int64_t context_parallel_size = 1;
  int64_t expert_model_parallel_size = 1;
  int64_t expert_tensor_parallel_size = 0;            // 0: equal to TP (Megatron's default)
  int64_t num_layers_per_virtual_pipeline_stage = 0;  // 0: no interleaving
  int64_t num_virtual_stages_per_pipeline_rank = 0;   // alternative way to set VPP
  int64_t microbatch_group_size_per_vp_stage = 0;     // interleaved: 0 means PP (Megatron's)
  int64_t decoder_first_pipeline_num_layers = 0;      // 0: even split (uneven PP otherwise)
  int64_t decoder_last_pipeline_num_layers = 0;       // 0: even split
  // Count the embedding / the output layer and loss as one layer each in the even split.
  bool account_for_embedding_in_pipeline_split = false;
  bool account_for_loss_in_pipeline_split = false;
  std::string pipeline_model_parallel_layout;  // Megatron's layout string (pipeline_layout.h)
  bool sequence_parallel = false;
  bool use_distributed_optimizer = false;
  bool overlap_grad_reduce = false;
  bool overlap_param_gather = false;
  bool use_tp_pp_dp_mapping = false;  // order tp-cp-ep-pp-dp instead of tp-cp-ep-dp-pp
  // Fully sharded data parallelism: Megatron-FSDP (--use-megatron-fsdp) with
  // --data-parallel-sharding-strategy no_shard (DDP), optim (the distributed optimizer),
  // optim_grads or optim_grads_params (the parameters sharded too: ZeRO-3), or PyTorch's FSDP2
  // (--use-torch-fsdp2: ZeRO-3). finalize() derives use_distributed_optimizer from them.
  bool use_megatron_fsdp = false;
  bool use_torch_fsdp2 = false;
  std::string data_parallel_sharding_strategy = "optim_grads_params";
  int64_t micro_batch_size = 0;
  int64_t global_batch_size = 0;  // 0: micro_batch_size * DP
  // --cp-comm-type: one word for every layer or one per transformer layer (p2p, all_gather, a2a,
  // a2a+p2p; "allgather", as Megatron's help spells it, is all_gather); words may come as one
  // argument separated by spaces. --hierarchical-context-parallel-sizes: the CP group's levels
  // (a2a+p2p: all-to-all over the first, sizes[0] adjacent CP ranks; a ring over the second).
  std::vector<std::string> cp_comm_type = {"p2p"};
  std::vector<int64_t> hierarchical_context_parallel_sizes;

  // Derives DP, VPP and the number of micro-batches and checks every rule, throwing
  // mtron::Error with Megatron's message (naming the flags). Needs a finalized model.
  void finalize(const ModelConfig& model);

  int64_t tp() const { return tensor_model_parallel_size; }
  int64_t pp() const { return pipeline_model_parallel_size; }
  int64_t cp() const { return context_parallel_size; }
  int64_t ep() const { return expert_model_parallel_size; }
  int64_t etp() const { return expert_tensor_parallel_size; }
  int64_t dp() const { return world_size / (tp() * pp() * cp()); }
  int64_t edp() const { return world_size / (etp() * ep() * pp()); }
  // The layers' CP communication, one per transformer layer or one for all ({p2p} at CP 1).
  // Needs finalize().
  const std::vector<CpCommType>& cp_comms() const { return cp_comm_; }
  // Whether any layer's CP communication is `t`.
  bool uses_cp_comm(CpCommType t) const;
  // The heads' all-to-all group of a layer communicating by `t`: all of CP for a2a, the first
  // hierarchical level for a2a+p2p, 1 (no all-to-all) otherwise.
  int64_t cp_a2a_size(CpCommType t) const;
  int64_t vpp() const { return vpp_; }  // model chunks per pipeline rank (1: not interleaved)
  bool fsdp() const { return use_megatron_fsdp || use_torch_fsdp2; }
  // Whether each rank reduce-scatters every micro-batch's gradients into its shard (ZeRO-2).
  bool shard_grads() const {
    return use_torch_fsdp2 ||
           (use_megatron_fsdp && (data_parallel_sharding_strategy == "optim_grads" ||
                                  data_parallel_sharding_strategy == "optim_grads_params"));
  }
  // Whether each rank holds only its shard of the parameters between their uses (ZeRO-3).
  bool shard_params() const {
    return use_torch_fsdp2 ||
           (use_megatron_fsdp && data_parallel_sharding_strategy == "optim_grads_params");
  }
  int64_t num_microbatches() const { return num_microbatches(global_batch_size); }
  // Micro-batches per DP rank of a global batch of `batch` sequences (a rampup's, evaluation's).
  int64_t num_microbatches(int64_t batch) const { return batch / (micro_batch_size * dp()); }
  // The interleaved schedule's contiguous micro-batches per virtual stage (N).
  int64_t microbatch_group() const {
    return microbatch_group_size_per_vp_stage > 0 ? microbatch_group_size_per_vp_stage : pp();
  }
  // Megatron's rules for M micro-batches under the interleaved schedule (none without it):
  // PP <= N <= M, and M % N either 0 or at least PP (a shorter last group leaves dependency
  // bubbles); throws mtron::Error with Megatron's message.
  void check_microbatch_groups(int64_t M) const;
  // Transformer layers held by pipeline stage `stage` (all its virtual chunks together).
  int64_t num_layers_in_stage(int64_t stage) const;
  // The transformer layers [first_layer, first_layer + num_layers) of virtual stage `vs` (model
  // chunk vs / PP of pipeline rank vs % PP). Virtual stage 0 also holds the embedding, the last
  // one the output layer, the loss and the MTP layers; a stage may hold no transformer layer.
  struct StageLayers {
    int64_t first_layer = 0, num_layers = 0;
  };
  StageLayers virtual_stage_layers(int64_t vs) const;
  // Whether the stages differ from the even split of num-layers / (PP x VPP) layers each.
  bool uneven_stages() const;
  std::string order() const { return use_tp_pp_dp_mapping ? "tp-cp-ep-pp-dp" : "tp-cp-ep-dp-pp"; }
  std::string summary() const;
  // The CP communication where it is not p2p everywhere ("a2a*2 p2p*2", "a2a+p2p (all-to-all
  // over 2, ring over 4)", brief: "a2a+p2p 2x4"); "" at CP 1 or with the ring in every layer.
  std::string cp_comm_summary(bool brief = false) const;

 private:
  // Derives stage_layers_ from the split flags, checking Megatron's rules.
  void split_layers(const ModelConfig& m);

  // Checks --cp-comm-type and --hierarchical-context-parallel-sizes, deriving cp_comm_.
  void check_cp_comm(const ModelConfig& m);

  int64_t vpp_ = 1;
  std::vector<CpCommType> cp_comm_;    // one per layer, or one for all
  std::vector<int64_t> stage_layers_;  // transformer layers of each virtual stage, in order
};

}  // namespace mtron
