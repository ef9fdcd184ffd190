// defines: SearchOptions, Candidate, SearchResult, search_layouts, evaluate_layout,
//          split_pipeline_layers, balanced_pipeline_layout
//
// Every layout Megatron accepts (ParallelConfig::finalize is the judge) for a model on a
// cluster: TP inside an NVLink domain, CP, PP (uneven first/last stages when the layers do not
// divide), EP and expert TP, micro-batch size, VPP, recompute (none, selective, full; with
// multi-latent attention also selective of mla_up_proj alone), the distributed optimizer. Each
// is costed by the memory and time models; those that fit with the margin are ranked by
// predicted throughput. For the top plans the result says why, and it explains why the common
// alternatives (pure DP, TP = node, TP across nodes, PP instead of TP, ...) lose.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mtron/core/model_config.h"
#include "mtron/plan/layout.h"
#include "mtron/plan/memory_model.h"
#include "mtron/plan/time_model.h"

namespace mtron::plan {

struct SearchOptions {
  int64_t global_batch_size = 0;  // sequences per iteration (required)
  Precision precision = Precision::kBF16;
  // Fixed sizes; 0 searches. vpp 1 disables interleaving.
  int64_t tp = 0, pp = 0, cp = 0, ep = 0, etp = 0, vpp = 0, micro_batch_size = 0;
  std::optional<RecomputeGranularity> recompute;
  // With `recompute` fixed to selective, its modules (--recompute-modules; Megatron's default
  // core_attn).
  RecomputeModules recompute_modules;
  // A fixed split of the layers over the pipeline (ParallelConfig's): Megatron's layout string
  // (--pipeline-model-parallel-layout, with --pipeline-model-parallel-size; sets VPP), or the
  // embedding and the loss counted as layers. Without them the search tries even stages and
  // Megatron's lighter first and last stages.
  std::string pipeline_layout;
  bool account_for_embedding = false, account_for_loss = false;
  // --cp-comm-type for every layout with CP > 1 (ParallelConfig's words), and
  // --hierarchical-context-parallel-sizes; with a2a+p2p and no sizes each layout takes the
  // largest all-to-all group that divides the heads per TP rank and stays in the NVLink domain.
  std::vector<std::string> cp_comm_type = {"p2p"};
  std::vector<int64_t> hierarchical_cp;
  bool distributed_optimizer = true;  // use it wherever DP x CP > 1
  bool sequence_parallel = true;      // with TP > 1
  bool tp_comm_overlap = true;        // --tp-comm-overlap on GPUs (Megatron's recommended setting)
  bool ep_comm_overlap = false;       // --overlap-moe-expert-parallel-comm (with EP > 1)
  bool grads_fp32 = true;
  bool fp8_params = false;           // --fp8-param-gather (with fp8)
  int64_t fp8_amax_history_len = 1;  // --fp8-amax-history-len (with fp8)
  bool fp8_hybrid = true;            // --fp8-format hybrid (false: e4m3; with fp8)
  bool fused_attention = true;       // flash attention on GPUs (false: materialised scores)
  // --overlap-grad-reduce / --overlap-param-gather on GPUs (false: DP communication after the
  // backward pass, as Megatron without those flags)
  bool overlap_dp_comm = true;
  bool allow_cross_node_tp = false;
  double memory_margin = 0.10;  // fraction of device memory kept free
  int64_t max_micro_batch_size = 16;
  int top = 5;
};

struct Candidate {
  Layout layout;
  MemoryBreakdown memory;
  StepTime time;
  bool fits = false;
  std::vector<std::string> reasons;
};

struct SearchResult {
  std::vector<Candidate> plans;           // fitting, fastest first, one per parallel shape
  std::vector<Candidate> too_big;         // valid shapes that fit nowhere, least memory first
  std::vector<std::string> alternatives;  // why common alternatives lose to plans[0]
  int64_t evaluated = 0;                  // layouts costed
  int64_t invalid = 0;                    // layouts Megatron's rules reject
  std::string first_invalid_reason;       // an example, for the "nothing valid" error
};

SearchResult search_layouts(const ModelConfig& m,
                            const Cluster& c,
                            const PerfParams& perf,
                            const SearchOptions& o);

// Costs one layout (its ParallelConfig must be finalized).
Candidate evaluate_layout(const ModelConfig& m,
                          const Layout& l,
                          const Cluster& c,
                          const PerfParams& perf,
                          double memory_margin);

// Megatron's uneven pipeline split when `pp` does not divide the layers: equal middle stages
// and lighter first/last stages (they also hold the embedding and the loss). Returns false when
// no split exists. first = last = 0 for an even split.
bool split_pipeline_layers(int64_t layers, int64_t pp, int64_t vpp, int64_t* first, int64_t* last);

// Where no such split exists: Megatron's --pipeline-model-parallel-layout string that counts the
// embedding, each MTP depth and the loss as a layer each and gives the pp x vpp virtual stages
// equal counts, runs of equal stages written "(tt|)*30" (DeepSeek-V3 over PP8 x VP4:
// "Et|(tt|)*30mL"; Megatron's --account-for-embedding/loss-in-pipeline-split with the MTP
// depths counted too). Empty when the stages do not divide the count, or the last stage cannot
// hold the MTP depths and the loss together.
std::string balanced_pipeline_layout(const ModelConfig& m, int64_t pp, int64_t vpp);

}  // namespace mtron::plan
