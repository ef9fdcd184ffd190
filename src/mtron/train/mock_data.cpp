#include "mtron/train/mock_data.h"

#include "mtron/core/philox.h"

namespace mtron::train {

MockData::MockData(uint64_t seed, int64_t vocab_size, int64_t seq_length)
    : seed_(seed), vocab_(vocab_size), seq_(seq_length) {}

void MockData::sample(int64_t index, int32_t* out) const {
  const PhiloxKey key = rng_key(seed_, "mock-data");
  const uint64_t base = uint64_t(index) * uint64_t(seq_ + 3);
  const int64_t start = int64_t(u64_at(key, base) % uint64_t(vocab_));
  const int64_t stride = 1 + int64_t(u64_at(key, base + 1) % 7);
  for (int64_t t = 0; t <= seq_; ++t) {
    const uint64_t r = u64_at(key, base + 2 + uint64_t(t));
    out[t] = (r & 15) == 0 ? int32_t((r >> 4) % uint64_t(vocab_))
                           : int32_t((start + t * stride) % vocab_);
  }
}

}  // namespace mtron::train
