// defines: NumpyRandomState
//
// A bit-exact re-implementation of the part of numpy.random.RandomState(seed) that Megatron's
// GPTDataset uses: MT19937 seeded from a 32-bit integer (init_genrand), numpy's legacy
// `random_interval` (mask-and-reject, 32-bit draws for bounds < 2^32, else two draws combined
// hi<<32|lo), and `shuffle` of a 1-D array (Fisher-Yates from the last element down to index 1).
// The same seed therefore gives the same document and shuffle indices as Megatron, so data
// indexed by either tool is consumed in the same order. Checked against /usr/bin/python3 numpy
// in tests/data/test_numpy_random.cpp.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>

namespace mtron::data {

class NumpyRandomState {
 public:
  // numpy accepts seeds in [0, 2^32); Megatron passes --seed (default 1234).
  explicit NumpyRandomState(uint32_t seed) : mt_(seed) {}

  uint32_t next_uint32() { return static_cast<uint32_t>(mt_()); }
  uint64_t next_uint64() {
    uint64_t hi = next_uint32();
    return (hi << 32) | next_uint32();
  }

  // Uniform integer in [0, max], numpy's legacy random_interval.
  uint64_t interval(uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max;
    for (int s = 1; s <= 32; s <<= 1) mask |= mask >> s;
    uint64_t v;
    if (max <= 0xffffffffULL) {
      do v = next_uint32() & mask;
      while (v > max);
    } else {
      do v = next_uint64() & mask;
      while (v > max);
    }
    return v;
  }

  // numpy.random.RandomState.shuffle of a 1-D array (the element type does not matter).
  template <typename T>
  void shuffle(std::span<T> a) {
    for (std::size_t i = a.size(); i-- > 1;) std::swap(a[i], a[interval(i)]);
  }

 private:
  std::mt19937 mt_;  // the standard fixes MT19937 and its init_genrand seeding bit for bit
};

}  // namespace mtron::data
