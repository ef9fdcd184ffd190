#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>

#include "mtron/core/lru_cache.h"

namespace mtron {
namespace {

TEST(LruCache, MakesEachValueOnceAndKeepsTheMostRecentlyUsed) {
  LruCache<int, int> cache(3);
  int calls = 0;
  auto get = [&](int k) {
    return *cache.get(k, [&] {
      ++calls;
      return std::make_unique<int>(10 * k);
    });
  };
  EXPECT_EQ(get(1), 10);
  EXPECT_EQ(get(2), 20);
  EXPECT_EQ(get(3), 30);
  EXPECT_EQ(get(1), 10);  // a hit: 1 becomes the most recent
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(get(4), 40);  // evicts 2, the least recently used
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(calls, 4);
  get(1);
  get(3);
  get(4);
  EXPECT_EQ(calls, 4);  // all three still there
  get(2);               // made again, evicting 1
  EXPECT_EQ(calls, 5);
  get(3);
  get(4);
  EXPECT_EQ(calls, 5);
  get(1);
  EXPECT_EQ(calls, 6);
  EXPECT_EQ(cache.made(), 6);
  EXPECT_EQ(cache.size(), 3u);
}

TEST(LruCache, StaysWithinItsCapacityOverManyKeys) {
  LruCache<int, int> cache(16);
  for (int k = 0; k < 10000; ++k) cache.get(k % 1000, [&] { return std::make_shared<int>(k); });
  EXPECT_EQ(cache.size(), 16u);
  EXPECT_EQ(cache.made(), 10000);  // a cycle of 1000 keys never hits in 16 places
}

TEST(LruCache, AnEvictedValueLivesWhileItsCallerHoldsIt) {
  LruCache<int, int> cache(1);
  std::shared_ptr<int> first = cache.get(1, [] { return std::make_unique<int>(7); });
  cache.get(2, [] { return std::make_unique<int>(8); });  // evicts 1
  EXPECT_EQ(first.use_count(), 1);
  EXPECT_EQ(*first, 7);
}

TEST(LruCache, AMakeThatThrowsLeavesTheCacheAsItWas) {
  LruCache<int, int> cache(2);
  cache.get(1, [] { return std::make_unique<int>(1); });
  EXPECT_THROW(cache.get(2, []() -> std::unique_ptr<int> { throw std::runtime_error("no"); }),
               std::runtime_error);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.made(), 1);
  EXPECT_EQ(*cache.get(2, [] { return std::make_unique<int>(2); }), 2);
}

}  // namespace
}  // namespace mtron
