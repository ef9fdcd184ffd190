// NumpyRandomState against numpy.random.RandomState (Debian's numpy, via the Python reference):
// successive shuffles from one state, awkward sizes, seeds at the ends of the 32-bit range.
#include <gtest/gtest.h>

#include "mtron/data/numpy_random.h"
#include "test_util.h"

namespace mtron::data {
namespace {

using testing::python_reference;

TEST(NumpyRandomState, ShufflesMatchNumpy) {
  const std::vector<int64_t> sizes = {0, 1, 2, 3, 31, 32, 33, 1000, 4097, 1};
  for (uint32_t seed : {0u, 1u, 1234u, 4294967295u}) {
    const auto ref = python_reference("shuffle", {{"seed", seed}, {"sizes", sizes}});
    ASSERT_EQ(ref.size(), sizes.size());
    NumpyRandomState rs(seed);
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      std::vector<int64_t> a(static_cast<std::size_t>(sizes[k]));
      for (int64_t i = 0; i < sizes[k]; ++i) a[std::size_t(i)] = i;
      rs.shuffle(std::span(a));
      EXPECT_EQ(a, ref[k].get<std::vector<int64_t>>()) << "seed " << seed << " shuffle " << k;
    }
  }
}

TEST(NumpyRandomState, IntervalStaysInRangeAndUses64BitDrawsAboveUint32) {
  NumpyRandomState rs(7);
  for (uint64_t max :
       {1ull, 2ull, 31ull, 32ull, 33ull, 0xffffffffull, 0x100000000ull, 0x123456789abull}) {
    for (int i = 0; i < 1000; ++i) ASSERT_LE(rs.interval(max), max);
  }
  // A 64-bit bound consumes two 32-bit outputs per draw (numpy's random_interval).
  NumpyRandomState a(3), b(3);
  (void)a.interval(0x1ffffffffull);
  b.next_uint32();
  b.next_uint32();
  EXPECT_EQ(a.next_uint32(), b.next_uint32());  // mask == max: never rejected
}

TEST(NumpyRandomState, Mt19937ReferenceOutput) {
  // The 10000th output of MT19937 seeded with 5489 (C++ standard [rand.predef]).
  NumpyRandomState rs(5489);
  uint32_t v = 0;
  for (int i = 0; i < 10000; ++i) v = rs.next_uint32();
  EXPECT_EQ(v, 4123659995u);
}

}  // namespace
}  // namespace mtron::data
