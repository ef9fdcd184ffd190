// defines: GroupKind, kGroupKinds, group_name, RankCoords, RankMap, format_layout
//
// Megatron's rank -> group mapping (parallel_state.py's RankGenerator), as a pure function of a
// finalized ParallelConfig: no communication, so it can be printed (`mtron train --print-layout`),
// tested, and used by the planner.
//
// RankGenerator semantics: the order string (tp-cp-ep-dp-pp, or tp-cp-ep-pp-dp with
// --use-tp-pp-dp-mapping) is a mixed-radix number with the leftmost dimension fastest,
// rank = sum_k idx_k * prod_{j<k} size_j. A group of kind "a-b" varies a and b (leftmost fastest)
// and fixes every other coordinate; a rank's position in the member list is its group rank.
// Two generators share the order: the decoder one (tp, cp, dp, pp; ep = 1) and the expert one
// (etp as tp, ep, edp as dp, pp; cp = 1). Both must give the same pipeline groups.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "mtron/core/parallel_config.h"

namespace mtron {

enum class GroupKind {
  kTP,         // tensor parallel
  kCP,         // context parallel
  kDP,         // data parallel
  kDPCP,       // data x context parallel: gradient reduction, distributed-optimizer shards
  kPP,         // pipeline parallel, ordered by stage
  kTPPP,       // tensor x pipeline = Megatron's "model parallel" group
  kTPCP,       // tensor x context
  kTPDPCP,     // tensor x data x context (everything but pipeline)
  kEmbedding,  // first and last stage of each pipeline group (tied embedding / LM head)
  kEP,         // expert parallel (expert generator)
  kETP,        // expert tensor parallel
  kTPEP,       // expert tensor x expert parallel
  kEDP,        // expert data parallel
};
inline constexpr int kGroupKinds = 13;

// "tp", "cp", "dp", "dp-cp", "pp", "tp-pp", "tp-cp", "tp-dp-cp", "embedding", "ep", "etp",
// "tp-ep", "edp".
std::string_view group_name(GroupKind k);

// A rank's coordinate along each dimension (= its rank in the one-dimensional group).
struct RankCoords {
  int tp = 0, cp = 0, dp = 0, pp = 0;  // decoder generator
  int etp = 0, ep = 0, edp = 0;        // expert generator
};

class RankMap {
 public:
  // cfg must be finalized (ParallelConfig::finalize). Throws mtron::Error with Megatron's
  // message when the expert layout is incompatible with the order.
  explicit RankMap(const ParallelConfig& cfg);

  int world_size() const { return world_; }
  // "tp-cp-ep-dp-pp" or "tp-cp-ep-pp-dp".
  const std::string& order() const { return order_; }

  // Every group of a kind, each a member list in group-rank order. All groups of a kind have
  // the same size; the embedding groups cover only first- and last-stage ranks.
  const std::vector<std::vector<int>>& groups(GroupKind k) const { return groups_[idx(k)]; }
  // Index into groups(k) of the group holding rank, or -1 (embedding group, middle stages).
  int group_index(GroupKind k, int rank) const { return member_of_[idx(k)][size_t(rank)]; }
  // The member list of rank's group of kind k; nullptr when rank is in none.
  const std::vector<int>* group_of(GroupKind k, int rank) const;
  // Position of rank in its group of kind k (its group rank), or -1.
  int group_rank(GroupKind k, int rank) const;

  const RankCoords& coords(int rank) const { return coords_[size_t(rank)]; }

 private:
  static size_t idx(GroupKind k) { return size_t(k); }

  int world_ = 1;
  std::string order_;
  std::array<std::vector<std::vector<int>>, kGroupKinds> groups_;
  std::array<std::vector<int>, kGroupKinds> member_of_;
  std::vector<RankCoords> coords_;
};

// A human-readable rank map: the rank formula, every rank's coordinates and every group's
// members (as Megatron's worked example). Long lists are cut after max_items entries.
std::string format_layout(const ParallelConfig& cfg, int max_items = 64);

}  // namespace mtron
