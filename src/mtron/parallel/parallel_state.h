// defines: ParallelState
//
// This rank's place in a parallel layout and a communicator for each of its groups, built once
// at start-up from a finalized ParallelConfig and the world Comm and then passed down (no
// globals, unlike Megatron's parallel_state.py). The member lists come from RankMap
// (rank_map.h: Megatron's RankGenerator, order tp-cp-ep-dp-pp); each group's Comm is made with
// world.split(group index, position), so a rank's rank in a group Comm is its position in the
// member list (e.g. tp().rank() == tp_rank(), dp_cp().rank() == cp_rank + CP * dp_rank).
// Groups of size 1 get the single-process backend: their collectives cost nothing.
#pragma once

#include <array>
#include <memory>

#include "mtron/comm/comm.h"
#include "mtron/core/parallel_config.h"
#include "mtron/parallel/rank_map.h"

namespace mtron {

class ParallelState {
 public:
  // Collective over world. cfg must be finalized and cfg.world_size == world.size().
  ParallelState(const ParallelConfig& cfg, Comm& world);

  const ParallelConfig& config() const { return cfg_; }
  const RankMap& rank_map() const { return map_; }
  Comm& world() const { return world_; }
  int rank() const { return world_.rank(); }

  // The Comm of this rank's group of kind k. For kEmbedding, only ranks of the first and last
  // pipeline stages have one (in_embedding_group()).
  Comm& group(GroupKind k) const;
  Comm& tp() const { return group(GroupKind::kTP); }
  Comm& cp() const { return group(GroupKind::kCP); }
  Comm& dp_cp() const { return group(GroupKind::kDPCP); }
  Comm& pp() const { return group(GroupKind::kPP); }
  Comm& tp_cp() const { return group(GroupKind::kTPCP); }
  Comm& embedding() const { return group(GroupKind::kEmbedding); }
  Comm& ep() const { return group(GroupKind::kEP); }
  Comm& etp() const { return group(GroupKind::kETP); }
  Comm& edp() const { return group(GroupKind::kEDP); }

  // Coordinates of this rank.
  const RankCoords& coords() const { return map_.coords(rank()); }
  int tp_rank() const { return coords().tp; }
  int cp_rank() const { return coords().cp; }
  int dp_rank() const { return coords().dp; }
  int pp_rank() const { return coords().pp; }
  int ep_rank() const { return coords().ep; }
  int etp_rank() const { return coords().etp; }
  int edp_rank() const { return coords().edp; }
  int tp_size() const { return int(cfg_.tp()); }
  int cp_size() const { return int(cfg_.cp()); }
  int pp_size() const { return int(cfg_.pp()); }
  int ep_size() const { return int(cfg_.ep()); }
  int etp_size() const { return int(cfg_.etp()); }
  int edp_size() const { return int(cfg_.edp()); }

  // With --cp-comm-type a2a+p2p, the hierarchical CP groups (level 0: the all-to-all over
  // adjacent CP ranks, level 1: the ring across those groups); else nullptr.
  Comm* cp_level(int level) const;

  bool is_first_pp_stage() const { return pp_rank() == 0; }
  bool is_last_pp_stage() const { return pp_rank() == pp_size() - 1; }
  bool in_embedding_group() const { return groups_[size_t(GroupKind::kEmbedding)] != nullptr; }

  // Pipeline neighbours (wrapping around: the last stage's next is the first), as ranks in the
  // pp() group and in the world.
  int pp_next() const { return (pp_rank() + 1) % pp_size(); }
  int pp_prev() const { return (pp_rank() + pp_size() - 1) % pp_size(); }
  int pp_next_world() const { return pp_members()[size_t(pp_next())]; }
  int pp_prev_world() const { return pp_members()[size_t(pp_prev())]; }

 private:
  const std::vector<int>& pp_members() const { return *map_.group_of(GroupKind::kPP, rank()); }

  ParallelConfig cfg_;
  RankMap map_;
  Comm& world_;
  std::array<std::unique_ptr<Comm>, kGroupKinds> groups_;
  std::array<std::unique_ptr<Comm>, 2> cp_levels_;
};

}  // namespace mtron
