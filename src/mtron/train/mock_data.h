// defines: MockData
//
// --mock-data: synthetic samples that are a pure function of (seed, sample index), so every
// layout and every resume sees exactly the same tokens. A sample starts at a random token and
// follows a fixed random successor function (a bigram table drawn from the seed), with 1 token
// in 16 replaced by noise: a model learns the table quickly, so the loss falls from log(V)
// towards the noise floor (about 0.6 nats for V = 300), the structured data the foundation
// issue asks for.
#pragma once

#include <cstdint>

namespace mtron::train {

class MockData {
 public:
  MockData(uint64_t seed, int64_t vocab_size, int64_t seq_length);
  // Writes the seq_length + 1 tokens of sample `index`.
  void sample(int64_t index, int32_t* out) const;

 private:
  uint64_t seed_;
  int64_t vocab_, seq_;
};

}  // namespace mtron::train
