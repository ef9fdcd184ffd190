// defines: MockData
//
// --mock-data: synthetic samples that are a pure function of (seed, split, sample index), so
// every layout and every resume sees exactly the same tokens. A sample starts at a random
// token and follows a fixed random successor function (a bigram table drawn from the seed,
// shared by the splits), with 1 token in 16 replaced by noise: a model learns the table quickly,
// so the loss falls from log(V) towards the noise floor (about 0.6 nats for V = 300), the
// structured data the foundation issue asks for.
#pragma once

#include <cstdint>

#include "mtron/data/gpt_dataset.h"

namespace mtron::train {

class MockData final : public data::SampleDataset {
 public:
  MockData(uint64_t seed, int64_t vocab_size, int64_t seq_length, data::Split split);
  int64_t size() const override { return int64_t(1) << 48; }
  int64_t sample_length() const override { return seq_ + 1; }
  void get(int64_t index, int32_t* out) const override;

 private:
  uint64_t seed_;
  int64_t vocab_, seq_;
  data::Split split_;
};

}  // namespace mtron::train
