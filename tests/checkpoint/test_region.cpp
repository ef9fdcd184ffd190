// region_runs against a per-element brute force on random regions of awkward sizes; tiling.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "mtron/checkpoint/region.h"
#include "mtron/core/error.h"

namespace mtron::checkpoint {
namespace {

// Global coordinate -> index within the region's held elements, for every held element.
std::map<Shape, int64_t> held(const Region& r) {
  std::map<Shape, int64_t> m;
  const size_t nd = r.block.size();
  for (int64_t k = r.flat_begin; k < r.flat_end; ++k) {
    Shape g(nd);
    int64_t rem = k;
    for (size_t d = nd; d-- > 0;) {
      g[d] = r.offset[d] + rem % r.block[d];
      rem /= r.block[d];
    }
    m[g] = k - r.flat_begin;
  }
  return m;
}

Region random_region(std::mt19937& rng, const Shape& global) {
  Region r;
  r.global = global;
  for (int64_t g : global) {
    if (rng() % 2) {  // whole dimension (as unsharded dims are)
      r.offset.push_back(0);
      r.block.push_back(g);
      continue;
    }
    const int64_t a = int64_t(rng() % uint64_t(g)), b = a + 1 + int64_t(rng() % uint64_t(g - a));
    r.offset.push_back(a);
    r.block.push_back(b - a);
  }
  const int64_t n = numel(r.block);
  r.flat_begin = rng() % 3 == 0 ? 0 : int64_t(rng() % uint64_t(n));
  r.flat_end = rng() % 3 == 0 ? n : r.flat_begin + int64_t(rng() % uint64_t(n - r.flat_begin + 1));
  return r;
}

TEST(Region, RunsMatchBruteForce) {
  std::mt19937 rng(1234);
  const std::vector<Shape> shapes = {{1},     {31},       {33},       {1, 1},      {32, 3},
                                     {5, 33}, {2, 7, 31}, {3, 1, 32}, {4, 5, 6, 7}};
  int64_t checked = 0;
  for (const Shape& g : shapes) {
    for (int trial = 0; trial < 200; ++trial) {
      const Region a = random_region(rng, g), b = random_region(rng, g);
      validate_region(a, "a");
      validate_region(b, "b");
      const auto ha = held(a), hb = held(b);
      std::map<int64_t, int64_t> want;  // index in a -> index in b
      for (const auto& [coord, ia] : ha) {
        const auto it = hb.find(coord);
        if (it != hb.end()) want[ia] = it->second;
      }
      std::map<int64_t, int64_t> got;
      int64_t last_end = -1;
      region_runs(a, b, [&](int64_t s, int64_t t, int64_t n) {
        ASSERT_GT(n, 0);
        ASSERT_GT(s, last_end - 1) << "runs out of order";
        last_end = s + n;
        for (int64_t i = 0; i < n; ++i) got[s + i] = t + i;
      });
      ASSERT_EQ(got, want) << shape_str(g) << " trial " << trial;
      checked += int64_t(want.size());
    }
  }
  EXPECT_GT(checked, 5000);  // the random cases do overlap
}

TEST(Region, ContiguousRowsMergeIntoOneRun) {
  // Two TP shards along dim 0 of a [8, 5] tensor: the overlap of [0,6) and [4,8) is one run.
  Region a{{8, 5}, {0, 0}, {6, 5}, 0, 30}, b{{8, 5}, {4, 0}, {4, 5}, 0, 20};
  int runs = 0;
  region_runs(a, b, [&](int64_t s, int64_t t, int64_t n) {
    ++runs;
    EXPECT_EQ(s, 20);
    EXPECT_EQ(t, 0);
    EXPECT_EQ(n, 10);
  });
  EXPECT_EQ(runs, 1);
}

TEST(Region, TilingDetectsGapsAndOverlaps) {
  const Shape g = {4, 6};
  // Two column shards, the second split in two flat ranges (a distributed-optimizer cut).
  Region a{g, {0, 0}, {4, 3}, 0, 12}, b1{g, {0, 3}, {4, 3}, 0, 5}, b2{g, {0, 3}, {4, 3}, 5, 12};
  EXPECT_TRUE(regions_tile({&a, &b1, &b2}));
  EXPECT_FALSE(regions_tile({&a, &b1}));  // gap
  Region b2o = b2;
  b2o.flat_begin = 4;  // overlaps b1 by one element...
  Region a_short = a;
  a_short.flat_end = 11;  // ...while a misses one: the sizes still add up
  EXPECT_FALSE(regions_tile({&a_short, &b1, &b2o}));
  Region other = a;
  other.global = {4, 7};
  EXPECT_FALSE(regions_tile({&other, &b1, &b2}));
  const Region scalar = Region::whole({});
  EXPECT_TRUE(regions_tile({&scalar}));
}

TEST(Region, ValidateRejectsOutOfBounds) {
  EXPECT_THROW(validate_region(Region{{4}, {2}, {3}, 0, 3}, "r"), Error);
  EXPECT_THROW(validate_region(Region{{4}, {0}, {4}, 2, 5}, "r"), Error);
  EXPECT_THROW(validate_region(Region{{4}, {0, 0}, {4}, 0, 4}, "r"), Error);
  EXPECT_NO_THROW(validate_region(Region{{4, 0}, {0, 0}, {4, 0}, 0, 0}, "r"));
}

}  // namespace
}  // namespace mtron::checkpoint
