#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "mtron/core/philox.h"

namespace mtron {
namespace {

TEST(Philox, KnownAnswer) {
  // Random123's known-answer test for philox4x32_10: key 0, counter 0.
  auto r = philox4x32({0, 0}, {0, 0, 0, 0});
  EXPECT_EQ(r[0], 0x6627e8d5u);
  EXPECT_EQ(r[1], 0xe169c58du);
  EXPECT_EQ(r[2], 0xbc57ac4cu);
  EXPECT_EQ(r[3], 0x9b00dbd8u);
}

TEST(Philox, KeysDifferByNameAndSeed) {
  auto a = rng_key(1234, "layers.0.qkv.weight");
  auto b = rng_key(1234, "layers.1.qkv.weight");
  auto c = rng_key(1235, "layers.0.qkv.weight");
  EXPECT_NE(normal_at(a, 0), normal_at(b, 0));
  EXPECT_NE(normal_at(a, 0), normal_at(c, 0));
  EXPECT_EQ(normal_at(a, 7), normal_at(rng_key(1234, "layers.0.qkv.weight"), 7));
}

TEST(Philox, NormalMoments) {
  auto k = rng_key(7, "moments");
  const int n = 200000;
  double s = 0, s2 = 0;
  for (int i = 0; i < n; ++i) {
    double x = normal_at(k, i);
    s += x;
    s2 += x * x;
  }
  EXPECT_NEAR(s / n, 0.0, 0.01);
  EXPECT_NEAR(s2 / n, 1.0, 0.02);
}

// The property layout invariance rests on: a shard equals the slice of the full tensor.
TEST(Philox, ShardEqualsSliceOfFullTensor) {
  auto k = rng_key(1234, "w");
  const Shape global = {3, 8, 5};
  std::vector<float> full(numel(global));
  fill_normal_shard(full.data(), k, 0.02f, global, -1, 0, 0);
  for (int dim = 0; dim < 3; ++dim) {
    for (int64_t off = 0; off < global[dim]; ++off) {
      for (int64_t ext = 1; off + ext <= global[dim]; ext += 2) {
        Shape local = global;
        local[dim] = ext;
        std::vector<float> shard(numel(local));
        fill_normal_shard(shard.data(), k, 0.02f, global, dim, off, ext);
        for (int64_t i = 0; i < local[0]; ++i)
          for (int64_t j = 0; j < local[1]; ++j)
            for (int64_t l = 0; l < local[2]; ++l) {
              int64_t gi = i + (dim == 0 ? off : 0), gj = j + (dim == 1 ? off : 0),
                      gl = l + (dim == 2 ? off : 0);
              ASSERT_EQ(shard[(i * local[1] + j) * local[2] + l],
                        full[(gi * global[1] + gj) * global[2] + gl]);
            }
      }
    }
  }
}

}  // namespace
}  // namespace mtron
