#include "mtron/parallel/parallel_state.h"

#include "mtron/comm/single.h"
#include "mtron/core/error.h"

namespace mtron {

ParallelState::ParallelState(const ParallelConfig& cfg, Comm& world)
    : cfg_(cfg), map_(cfg), world_(world) {
  MT_CHECK(world.size() == cfg.world_size, "the launcher started ", world.size(),
           " processes but the parallel layout is for a world of ", cfg.world_size);
  const int me = world.rank();
  for (int k = 0; k < kGroupKinds; ++k) {
    const GroupKind kind = GroupKind(k);
    const auto& groups = map_.groups(kind);
    const int g = map_.group_index(kind, me);
    const int pos = map_.group_rank(kind, me);
    std::unique_ptr<Comm>& c = groups_[size_t(k)];
    // Every group of a kind has the same size, so all ranks take the same branch: size-1 groups
    // need no collective call.
    if (groups.front().size() == 1) {
      if (g >= 0) c = make_single_comm();
    } else {
      c = world.split(g, pos);
    }
    if (!c) continue;
    c->set_name(std::string(group_name(kind)));
    MT_ASSERT(c->size() == int(groups[size_t(g)].size()) && c->rank() == pos, "group ",
              group_name(kind), ": communicator rank ", c->rank(), "/", c->size(),
              " does not match the rank map (", pos, "/", groups[size_t(g)].size(), ")");
  }
  if (cfg.cp() > 1 && cfg.uses_cp_comm(CpCommType::kA2AP2P)) {
    // Megatron's hierarchical CP groups: a adjacent CP ranks, then the ranks at one place in each
    const int a = int(cfg.cp_a2a_size(CpCommType::kA2AP2P)), r = cp_rank();
    cp_levels_[0] = cp().split(r / a, r % a);
    cp_levels_[1] = cp().split(r % a, r / a);
    cp_levels_[0]->set_name("cp-a2a");
    cp_levels_[1]->set_name("cp-ring");
  }
}

Comm* ParallelState::cp_level(int level) const {
  return cp_levels_.at(size_t(level)).get();
}

Comm& ParallelState::group(GroupKind k) const {
  const auto& c = groups_[size_t(k)];
  MT_ASSERT(c != nullptr, "rank ", rank(), " is not in a ", group_name(k), " group");
  return *c;
}

}  // namespace mtron
