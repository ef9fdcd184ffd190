// RankMap (the pure rank -> group function) against Megatron's worked example (the docstring
// of parallel_state.initialize_model_parallel: 16 GPUs, TP 2, PP 4), both orders, and an
// independent brute-force definition of every group over many layouts.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "mtron/core/error.h"
#include "mtron/core/parallel_config.h"
#include "mtron/parallel/rank_map.h"
#include "test_helpers.h"

namespace mtron {
namespace {

using Groups = std::vector<std::vector<int>>;

// A model every layout below accepts: 8 heads and query groups, 8 layers, 16 experts.
ModelConfig model(bool moe) {
  ModelConfig m = tests::model_shape(8, 64, 8, 32, 100);
  if (moe) {
    m.num_experts = 16;
    m.moe_ffn_hidden_size = 64;
  }
  m.finalize();
  return m;
}

ParallelConfig layout(
    int world, int tp, int cp, int pp, int ep = 1, int etp = 0, bool tp_pp_dp = false) {
  ParallelConfig c =
      tests::layout({.world = world, .tp = tp, .pp = pp, .cp = cp, .ep = ep, .etp = etp, .mbs = 1});
  c.use_tp_pp_dp_mapping = tp_pp_dp;
  c.finalize(model(ep > 1 || (etp != 0 && etp != tp)));
  return c;
}

TEST(RankMap, MegatronWorkedExample16) {
  // world=16, TP=2, CP=2, DP=2, PP=2: rank = tp + 2cp + 4dp + 8pp.
  const RankMap m(layout(16, 2, 2, 2));
  EXPECT_EQ(m.order(), "tp-cp-ep-dp-pp");
  EXPECT_EQ(m.groups(GroupKind::kTP),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(m.groups(GroupKind::kCP),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(m.groups(GroupKind::kDP),
            (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  EXPECT_EQ(m.groups(GroupKind::kDPCP),
            (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  const Groups pp{{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}};
  EXPECT_EQ(m.groups(GroupKind::kPP), pp);
  EXPECT_EQ(m.groups(GroupKind::kEmbedding), pp);  // first and last stage = the PP group at PP 2
  EXPECT_EQ(m.groups(GroupKind::kTPPP),
            (Groups{{0, 1, 8, 9}, {2, 3, 10, 11}, {4, 5, 12, 13}, {6, 7, 14, 15}}));
  EXPECT_EQ(m.groups(GroupKind::kTPCP),
            (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}));
  EXPECT_EQ(m.groups(GroupKind::kTPDPCP),
            (Groups{{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}}));
  // Rank 13 has tp 1, cp 0, dp 1, pp 1.
  const RankCoords& c = m.coords(13);
  EXPECT_EQ(c.tp, 1);
  EXPECT_EQ(c.cp, 0);
  EXPECT_EQ(c.dp, 1);
  EXPECT_EQ(c.pp, 1);
  // DP x CP group rank = cp + 2 dp.
  for (int r = 0; r < 16; ++r)
    EXPECT_EQ(m.group_rank(GroupKind::kDPCP, r), m.coords(r).cp + 2 * m.coords(r).dp) << r;
  // Experts default to ETP = TP, EP = 1: EDP = 16 / (2 * 2) = 4.
  EXPECT_EQ(m.groups(GroupKind::kETP), m.groups(GroupKind::kTP));
  EXPECT_EQ(m.groups(GroupKind::kEDP), m.groups(GroupKind::kDPCP));
}

TEST(RankMap, MegatronWorkedExampleWithExperts) {
  // Adding EP=2 and ETP=1 gives EDP=4, EP groups [0,1] [2,3] ..., EDP groups [0,2,4,6] ...
  const RankMap m(layout(16, 2, 2, 2, /*ep=*/2, /*etp=*/1));
  EXPECT_EQ(m.groups(GroupKind::kEP),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(m.groups(GroupKind::kEDP),
            (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  Groups singles;
  for (int r = 0; r < 16; ++r) singles.push_back({r});
  EXPECT_EQ(m.groups(GroupKind::kETP), singles);
  EXPECT_EQ(m.groups(GroupKind::kTPEP), m.groups(GroupKind::kEP));  // ETP 1
  EXPECT_EQ(m.coords(13).ep, 1);
  EXPECT_EQ(m.coords(13).edp, 2);
  EXPECT_EQ(m.coords(13).etp, 0);
}

TEST(RankMap, TpPpDpOrder) {
  // --use-tp-pp-dp-mapping: order tp-cp-ep-pp-dp, rank = tp + 2pp + 4dp.
  const RankMap m(layout(8, 2, 1, 2, 1, 0, /*tp_pp_dp=*/true));
  EXPECT_EQ(m.order(), "tp-cp-ep-pp-dp");
  EXPECT_EQ(m.groups(GroupKind::kTP), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(m.groups(GroupKind::kPP), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(m.groups(GroupKind::kDP), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(m.groups(GroupKind::kTPPP), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(m.coords(6).pp, 1);
  EXPECT_EQ(m.coords(6).dp, 1);
  // The default order on the same sizes puts the pipeline outermost instead.
  const RankMap d(layout(8, 2, 1, 2));
  EXPECT_EQ(d.groups(GroupKind::kPP), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(d.groups(GroupKind::kDP), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
}

TEST(RankMap, EmbeddingGroupIsFirstAndLastStage) {
  const RankMap m(layout(8, 1, 1, 4));  // DP 2, PP 4: pp groups [0,2,4,6] [1,3,5,7]
  EXPECT_EQ(m.groups(GroupKind::kPP), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(m.groups(GroupKind::kEmbedding), (Groups{{0, 6}, {1, 7}}));
  EXPECT_EQ(m.group_of(GroupKind::kEmbedding, 2), nullptr);
  EXPECT_EQ(m.group_rank(GroupKind::kEmbedding, 7), 1);
  const RankMap one(layout(4, 2, 1, 1));  // PP 1: every rank holds both ends alone
  EXPECT_EQ(one.groups(GroupKind::kEmbedding), (Groups{{0}, {1}, {2}, {3}}));
}

TEST(RankMap, PpNotLastNeedsEqualDataParallelSizes) {
  // TP 2, PP 2, DP 2 with EP 4, ETP 1 -> EDP 1 != DP 2 under tp-cp-ep-pp-dp: Megatron rejects it.
  try {
    RankMap m(layout(8, 2, 1, 2, /*ep=*/4, /*etp=*/1, /*tp_pp_dp=*/true));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("When not using pp-last rank ordering"),
              std::string::npos);
  }
  EXPECT_NO_THROW(RankMap(layout(8, 2, 1, 2, 4, 1, /*tp_pp_dp=*/false)));
}

// Independent definition: the group of kind K holding r is every rank that agrees with r on all
// dimensions outside K, ordered by K's coordinates read as a number with the first-named
// dimension of the order fastest.
Groups brute_force(const ParallelConfig& c, bool expert, std::vector<std::string> dims) {
  const int W = int(c.world_size);
  const std::vector<std::string> order =
      c.use_tp_pp_dp_mapping ? std::vector<std::string>{"tp", "cp", "ep", "pp", "dp"}
                             : std::vector<std::string>{"tp", "cp", "ep", "dp", "pp"};
  std::map<std::string, int> size = {{"tp", int(expert ? c.etp() : c.tp())},
                                     {"cp", int(expert ? 1 : c.cp())},
                                     {"ep", int(expert ? c.ep() : 1)},
                                     {"dp", int(expert ? c.edp() : c.dp())},
                                     {"pp", int(c.pp())}};
  std::vector<std::map<std::string, int>> coords(static_cast<size_t>(W));
  for (int r = 0; r < W; ++r) {
    int x = r;
    for (const auto& d : order) {
      coords[size_t(r)][d] = x % size[d];
      x /= size[d];
    }
  }
  auto coord = [&](int r) -> std::map<std::string, int>& { return coords[size_t(r)]; };
  auto in = [&](const std::string& d) { return std::count(dims.begin(), dims.end(), d) > 0; };
  auto key = [&](int r) {  // K's coordinates, order's first dimension fastest
    int k = 0, stride = 1;
    for (const auto& d : order)
      if (in(d)) {
        k += coord(r)[d] * stride;
        stride *= size[d];
      }
    return k;
  };
  Groups out;
  std::vector<bool> seen(size_t(W), false);
  for (int r = 0; r < W; ++r) {
    if (seen[size_t(r)]) continue;
    std::vector<int> g;
    for (int s = 0; s < W; ++s) {
      bool same = true;
      for (const auto& d : order)
        if (!in(d) && coord(s)[d] != coord(r)[d]) same = false;
      if (same) g.push_back(s);
    }
    std::sort(g.begin(), g.end(), [&](int a, int b) { return key(a) < key(b); });
    for (int s : g) seen[size_t(s)] = true;
    out.push_back(g);
  }
  return out;
}

Groups sorted(Groups g) {
  std::sort(g.begin(), g.end());
  return g;
}

TEST(RankMap, EveryGroupMatchesBruteForceOverManyLayouts) {
  int checked = 0;
  for (int world : {1, 2, 4, 6, 8, 12, 16, 24})
    for (int tp : {1, 2, 4})
      for (int cp : {1, 2})
        for (int pp : {1, 2, 3, 4})
          for (int ep : {1, 2, 4})
            for (int etp : {0, 1, 2})
              for (bool tp_pp_dp : {false, true}) {
                if (world % (tp * cp * pp) != 0) continue;
                const int etp_v = etp == 0 ? tp : etp;
                if (world % (etp_v * ep * pp) != 0) continue;
                if (8 % pp != 0) continue;  // 8 layers
                ParallelConfig c = layout(world, tp, cp, pp, ep, etp, tp_pp_dp);
                if (tp_pp_dp && pp > 1 && c.edp() != c.dp()) continue;
                const RankMap m(c);
                SCOPED_TRACE(c.summary() + " order " + m.order());
                struct Kind {
                  GroupKind k;
                  bool expert;
                  std::vector<std::string> dims;
                };
                const std::vector<Kind> kinds = {
                    {GroupKind::kTP, false, {"tp"}},
                    {GroupKind::kCP, false, {"cp"}},
                    {GroupKind::kDP, false, {"dp"}},
                    {GroupKind::kDPCP, false, {"dp", "cp"}},
                    {GroupKind::kPP, false, {"pp"}},
                    {GroupKind::kTPPP, false, {"tp", "pp"}},
                    {GroupKind::kTPCP, false, {"tp", "cp"}},
                    {GroupKind::kTPDPCP, false, {"tp", "dp", "cp"}},
                    {GroupKind::kEP, true, {"ep"}},
                    {GroupKind::kETP, true, {"tp"}},
                    {GroupKind::kTPEP, true, {"tp", "ep"}},
                    {GroupKind::kEDP, true, {"dp"}},
                };
                for (const Kind& k : kinds) {
                  EXPECT_EQ(sorted(m.groups(k.k)), sorted(brute_force(c, k.expert, k.dims)))
                      << group_name(k.k);
                }
                EXPECT_EQ(brute_force(c, false, {"pp"}), brute_force(c, true, {"pp"}));
                // Coordinates are the positions in the one-dimensional groups.
                for (int r = 0; r < world; ++r) {
                  const RankCoords& x = m.coords(r);
                  EXPECT_EQ(m.group_rank(GroupKind::kTP, r), x.tp);
                  EXPECT_EQ(m.group_rank(GroupKind::kCP, r), x.cp);
                  EXPECT_EQ(m.group_rank(GroupKind::kDP, r), x.dp);
                  EXPECT_EQ(m.group_rank(GroupKind::kPP, r), x.pp);
                  EXPECT_EQ(m.group_rank(GroupKind::kETP, r), x.etp);
                  EXPECT_EQ(m.group_rank(GroupKind::kEP, r), x.ep);
                  EXPECT_EQ(m.group_rank(GroupKind::kEDP, r), x.edp);
                  EXPECT_EQ(m.group_of(GroupKind::kEmbedding, r) != nullptr,
                            x.pp == 0 || x.pp == pp - 1);
                }
                ++checked;
              }
  EXPECT_GT(checked, 100);
}

TEST(RankMap, FormatLayout) {
  const std::string s = format_layout(layout(16, 2, 2, 2));
  EXPECT_NE(s.find("world 16 = TP 2 x CP 2 x DP 2 x PP 2"), std::string::npos) << s;
  EXPECT_NE(s.find("rank = tp + 2*cp + 4*dp + 8*pp"), std::string::npos) << s;
  EXPECT_NE(s.find("   13    1    0    1    1  last"), std::string::npos) << s;
  EXPECT_NE(s.find("dp-cp          4      4  [0,2,4,6] [1,3,5,7] [8,10,12,14] [9,11,13,15]"),
            std::string::npos)
      << s;
  EXPECT_EQ(s.find("edp"), std::string::npos) << s;  // no expert section without experts
  const std::string e = format_layout(layout(16, 2, 2, 2, 2, 1));
  EXPECT_NE(e.find("experts: rank = ep + 2*edp + 8*pp"), std::string::npos) << e;
  EXPECT_NE(e.find("edp            4      4  [0,2,4,6]"), std::string::npos) << e;
  const std::string big = format_layout(layout(24, 1, 1, 1), 4);
  EXPECT_NE(big.find("... 20 more ranks"), std::string::npos) << big;
}

}  // namespace
}  // namespace mtron
