#include "mtron/data/sampler.h"

#include "mtron/core/error.h"

namespace mtron::data {

TokenRows sample_rows(const SampleDataset& ds,
                      Split split,
                      int64_t base,
                      int64_t j,
                      int64_t B,
                      int64_t dp,
                      int64_t dp_rank,
                      const std::vector<int64_t>& positions) {
  const int64_t first = base + j * B * dp + dp_rank * B;
  const int64_t Sl = int64_t(positions.size());
  TokenRows t;
  t.B = B;
  t.S = Sl;
  t.first = first;
  t.tokens.resize(size_t(Sl * B));
  t.labels.resize(size_t(Sl * B));
  t.pos.resize(size_t(Sl * B));
  std::vector<int32_t> sample(size_t(ds.sample_length()));
  for (int64_t b = 0; b < B; ++b) {
    MT_CHECK(first + b < ds.size(), "the ", split_name(split), " split has ", ds.size(),
             " samples; sample ", first + b, " was asked for");
    ds.get(first + b, sample.data());
    for (int64_t s = 0; s < Sl; ++s) {
      const int64_t g = positions[size_t(s)];
      t.tokens[size_t(s * B + b)] = sample[size_t(g)];
      t.labels[size_t(s * B + b)] = sample[size_t(g + 1)];
      t.pos[size_t(s * B + b)] = int32_t(g);
    }
  }
  return t;
}

}  // namespace mtron::data
