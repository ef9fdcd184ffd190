// defines: MockData
//
// --mock-data: synthetic samples that are a pure function of (seed, sample index), so every
// layout and every resume sees exactly the same tokens. Each sample is an arithmetic
// progression modulo the vocabulary with a per-sample start and stride, and 1 token in 16
// replaced by noise: a model can learn to continue it from context, so the loss falls well
// below log(V) (the structured data the foundation issue asks for).
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
