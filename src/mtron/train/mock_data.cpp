#include "mtron/train/mock_data.h"

#include <string>

#include "mtron/core/philox.h"

namespace mtron::train {

MockData::MockData(uint64_t seed, int64_t vocab_size, int64_t seq_length, data::Split split)
    : seed_(seed), vocab_(vocab_size), seq_(seq_length), split_(split) {}

void MockData::get(int64_t index, int32_t* out) const {
  const PhiloxKey key = rng_key(seed_, std::string("mock-data/") + data::split_name(split_));
  const PhiloxKey table = rng_key(seed_, "mock-data-successor");
  const uint64_t base = uint64_t(index) * uint64_t(seq_ + 1);
  uint64_t prev = u64_at(key, base) % uint64_t(vocab_);
  out[0] = int32_t(prev);
  for (int64_t t = 1; t <= seq_; ++t) {
    const uint64_t r = u64_at(key, base + uint64_t(t));
    prev = (r & 15) == 0 ? (r >> 4) % uint64_t(vocab_) : u64_at(table, prev) % uint64_t(vocab_);
    out[t] = int32_t(prev);
  }
}

}  // namespace mtron::train
