// ParallelState under mpirun: for every layout the world size allows, each group's Comm has
// exactly the members RankMap lists, in order, and the pipeline neighbours are right.
#include <gtest/gtest.h>

#include <vector>

#include "mpi_test_main.h"
#include "mtron/parallel/parallel_state.h"
#include "test_helpers.h"

namespace mtron {
namespace {

ModelConfig model(bool moe) {
  ModelConfig m = tests::model_shape(24, 96, 24, 48, 100);
  if (moe) {
    m.num_experts = 24;
    m.moe_ffn_hidden_size = 96;
  }
  m.finalize();
  return m;
}

std::vector<ParallelConfig> layouts(int world) {
  std::vector<ParallelConfig> out;
  for (int tp : {1, 2, 3, 4, 8})
    for (int cp : {1, 2, 3})
      for (int pp : {1, 2, 3, 4})
        for (int ep : {1, 2, 3, 4})
          for (int etp : {0, 1})
            for (bool tp_pp_dp : {false, true}) {
              const int etp_v = etp == 0 ? tp : etp;
              if (world % (tp * cp * pp) || world % (etp_v * ep * pp)) continue;
              ParallelConfig c = tests::layout(
                  {.world = world, .tp = tp, .pp = pp, .cp = cp, .ep = ep, .etp = etp, .mbs = 1});
              c.use_tp_pp_dp_mapping = tp_pp_dp;
              c.finalize(model(ep > 1 || etp_v != tp));
              if (tp_pp_dp && pp > 1 && c.edp() != c.dp()) continue;
              out.push_back(c);
            }
  return out;
}

TEST(ParallelState, GroupCommsMatchTheRankMap) {
  Comm& world = mpi_test_launch().world();
  const int me = world.rank();
  const auto all = layouts(world.size());
  EXPECT_GE(all.size(), world.size() == 1 ? 1u : 10u);
  for (const ParallelConfig& cfg : all) {
    const ParallelState ps(cfg, world);
    const RankMap& map = ps.rank_map();
    SCOPED_TRACE(cfg.summary() + " order " + map.order());
    for (int k = 0; k < kGroupKinds; ++k) {
      const GroupKind kind = GroupKind(k);
      const std::vector<int>* members = map.group_of(kind, me);
      if (kind == GroupKind::kEmbedding) {
        EXPECT_EQ(ps.in_embedding_group(), members != nullptr);
      }
      if (!members) continue;
      Comm& c = ps.group(kind);
      EXPECT_EQ(c.name(), group_name(kind));
      EXPECT_EQ(c.size(), int(members->size())) << group_name(kind);
      EXPECT_EQ(c.rank(), map.group_rank(kind, me)) << group_name(kind);
      // The communicator holds exactly these world ranks, in this order.
      const int64_t mine = me;
      std::vector<int64_t> got(members->size(), -1);
      c.all_gather(&mine, got.data(), 1, DType::kI64);
      EXPECT_EQ(std::vector<int64_t>(members->begin(), members->end()), got) << group_name(kind);
    }
    EXPECT_EQ(ps.tp().rank(), ps.tp_rank());
    EXPECT_EQ(ps.dp_cp().rank(), ps.cp_rank() + ps.cp_size() * ps.dp_rank());
    EXPECT_EQ(ps.edp().size(), ps.edp_size());
    EXPECT_EQ(ps.is_first_pp_stage(), ps.pp_rank() == 0);
    EXPECT_EQ(ps.is_last_pp_stage(), ps.pp_rank() == ps.pp_size() - 1);
    // Pipeline ring: send my world rank forward, receive the previous stage's.
    if (ps.pp_size() > 1) {
      const int64_t mine = me;
      int64_t from_prev = -1;
      auto r = ps.pp().irecv(&from_prev, 1, DType::kI64, ps.pp_prev(), 0);
      ps.pp().send(&mine, 1, DType::kI64, ps.pp_next(), 0);
      r->wait();
      EXPECT_EQ(from_prev, ps.pp_prev_world());
      EXPECT_EQ(map.coords(ps.pp_next_world()).pp, ps.pp_next());
    }
  }
}

}  // namespace
}  // namespace mtron
