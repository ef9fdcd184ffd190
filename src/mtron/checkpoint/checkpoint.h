// defines: FlatRange, ChunkState, RunInfo, Progress, RankGroups, iteration_dir_name,
// save_checkpoint,
//          load_checkpoint, find_checkpoint, is_vocab_parameter, add_expert_bias_states
//
// Sharded, reshardable checkpoints (docs/checkpoints.md):
//
//   <save>/latest_checkpointed_iteration.txt      "100": the commit point
//   <save>/iter_0000100/manifest.json             manifest.h
//   <save>/iter_0000100/rank_00003.safetensors    what rank 3 wrote
//
// Every tensor is stored as pieces of its *global* tensor (region.h), keyed by its Megatron-Core
// name: the fp32 master weight under the parameter's name, Adam's moments under
// "optimizer.exp_avg.<name>" and "optimizer.exp_avg_sq.<name>". So the optimizer state reshards
// exactly like the weights. Who writes what: each rank's model shard (its TP rank, its pipeline
// stage's chunks) is split over the ranks that hold replicas of it (the DP x CP group): with the
// distributed optimizer each rank writes its optimizer shards (an equal part of every gradient
// bucket), otherwise an equal range of each chunk's flat buffer. The ranges cut across parameter
// boundaries, so a piece is a (parameter, element range). TP-replicated parameters are written by
// TP rank 0, and the last stage's replica of tied embeddings is not written at all (it is the same
// tensor).
//
// Loading reads, under any layout, exactly the elements each rank holds: the master weights of
// its whole model shard (every data-parallel replica holds them) and the moments of its
// optimizer shards.
//
// Commit protocol (crash safety): ranks write into <save>/.tmp.iter_0000100/ and fsync; rank 0
// then writes the manifest, fsyncs the directory, renames it to iter_0000100 (moving an older
// directory of the same iteration aside first), fsyncs <save>, and finally replaces the marker
// atomically. A checkpoint exists once the marker names it; a crash at any moment leaves the
// previous one loadable.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mtron/checkpoint/manifest.h"
#include "mtron/comm/comm.h"
#include "mtron/model/gpt.h"
#include "mtron/model/params.h"
#include "mtron/optim/optimizer.h"

namespace mtron::checkpoint {

// A range [begin, end) of a chunk's flat buffer (the optimizer's shards are such ranges).
using FlatRange = optim::OptimBuffer::Shard;

// A small tensor every rank of a chunk's replica group holds whole and alike (the FP8 scaling
// state of its linear layers): written whole by the group's first rank (TP rank 0 of DP x CP
// rank 0; EDP and expert-TP rank 0 for experts), read whole by every rank that has it under any
// layout. A checkpoint without it leaves `data` as it is.
struct StateTensor {
  std::string name;
  Shape shape;
  float* data = nullptr;  // on the host
};

// The state of one of this rank's parameter buffers: a model chunk's dense parameters, or its
// routed experts (this EP rank's experts, named by global expert index, ETP shards).
struct ChunkState {
  model::ParamBuffer* params = nullptr;
  // Adam's moments of the flat ranges `opt_shards` of the chunk's buffer (the distributed
  // optimizer's shards, one per gradient bucket, or the whole buffer), stored one after another,
  // on the chunk's device or, offloaded, in host memory; empty when there is no optimizer state.
  optim::MomentSplit exp_avg;
  optim::MomentSplit exp_avg_sq;
  std::vector<FlatRange> opt_shards;
  // The routed experts' buffer: replicated over expert data parallel (RankGroups::edp), not
  // DP x CP.
  bool experts = false;
  std::vector<StateTensor> states;  // the chunk's FP8 scaling state (--fp8-format)
  // FSDP's sharded parameters (ZeRO-3): the rank holds only the master weights of opt_shards,
  // and a load reads only those.
  bool params_sharded = false;
};

// What the manifest records about the run.
struct RunInfo {
  ModelConfig model;
  LayoutRecord layout;
  Precision precision = Precision::kFP32;
  optim::AdamWConfig adam;
  std::optional<optim::MuonConfig> muon;  // --optimizer muon (its momenta are the exp_avg tensors)
  std::optional<optim::LrSchedule> lr_schedule;
  std::optional<uint64_t> seed;
  TokenizerRecord tokenizer;
};

struct Progress {
  int64_t iteration = 0, consumed_samples = 0, optimizer_steps = 0;
  int64_t lr_samples = 0;                             // the learning-rate schedule's position
  std::optional<optim::GradScalerState> grad_scaler;  // a dynamic loss scaler's state
};

// The groups a save or load runs over (single-process tools pass one single Comm for both).
struct RankGroups {
  Comm* world = nullptr;  // every rank: barriers, gathering the file list
  Comm* dp_cp = nullptr;  // the ranks holding replicas of this rank's model shard
  int tp_rank = 0;        // TP-replicated parameters are written by TP rank 0
  // The ranks holding replicas of this rank's experts (EDP) and the expert-TP rank (null / 0
  // without MoE).
  Comm* edp = nullptr;
  int etp_rank = 0;
};

// "iter_0000100"
std::string iteration_dir_name(int64_t iteration);

// True for the tensors whose dimension 0 is the padded vocabulary (its padding depends on TP).
bool is_vocab_parameter(const std::string& name);

// Which earlier checkpoints a save deletes once it is committed.
struct Retention {
  int64_t keep_last_n = 0;  // > 0: all but the newest keep_last_n committed checkpoints
  // > 0 (--save-retain-interval, Megatron's rule): the previous latest checkpoint unless its
  // iteration is a multiple of it (or it is a symbolic link)
  int64_t retain_interval = 0;
};

// Collective over g.world. Writes and commits <save_dir>/iter_NNNNNNN, then deletes what `keep`
// says. Returns the directory.
std::string save_checkpoint(const std::string& save_dir,
                            const std::vector<ChunkState>& chunks,
                            const RunInfo& info,
                            const Progress& progress,
                            const RankGroups& g,
                            const Retention& keep);

// Collective over g.world. Fills the chunks' master weights (refreshing their compute copies) and,
// with load_optimizer, the moments, from the checkpoint directory `dir` (holding
// manifest.json). The caller checks the manifest's compatibility first (it is returned).
Manifest load_checkpoint(const std::string& dir,
                         const std::vector<ChunkState>& chunks,
                         const RankGroups& g,
                         bool load_optimizer);

// The checkpoint directory `load_dir` designates: itself if it holds manifest.json, else the
// iteration named by its latest_checkpointed_iteration.txt; nullopt when it has no marker.
// Throws when the marker names a missing or incomplete directory.
std::optional<std::string> find_checkpoint(const std::string& load_dir);

// The chunk's expert biases (--moe-router-enable-expert-bias) into c.states (its dense buffer's
// state, replicated over TP and DP x CP): "<layer>.mlp.router.expert_bias", Megatron's name,
// shape [E].
void add_expert_bias_states(ChunkState& c, model::GPTChunk& chunk);

}  // namespace mtron::checkpoint
