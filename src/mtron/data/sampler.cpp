#include "mtron/data/sampler.h"

#include <algorithm>

#include "mtron/core/error.h"

namespace mtron::data {

TokenRows sample_rows(const SampleDataset& ds,
                      Split split,
                      int64_t base,
                      int64_t j,
                      int64_t B,
                      int64_t dp,
                      int64_t dp_rank,
                      const std::vector<int64_t>& positions,
                      int64_t ahead,
                      int32_t reset_eod) {
  const int64_t first = base + j * B * dp + dp_rank * B;
  const int64_t Sl = int64_t(positions.size());
  TokenRows t;
  t.B = B;
  t.S = Sl;
  t.first = first;
  t.tokens.resize(size_t(Sl * B));
  t.labels.resize(size_t(Sl * B));
  t.pos.resize(size_t(Sl * B));
  t.ahead_tokens.resize(size_t(ahead * Sl * B));
  t.ahead_labels.resize(size_t(ahead * Sl * B));
  t.embed_pos.resize(size_t(Sl * B));
  const int64_t S = ds.sample_length() - 1;  // a sample holds S + 1 tokens
  std::vector<int32_t> sample(size_t(ds.sample_length())), epos(static_cast<size_t>(S));
  for (int64_t b = 0; b < B; ++b) {
    MT_CHECK(first + b < ds.size(), "the ", split_name(split), " split has ", ds.size(),
             " samples; sample ", first + b, " was asked for");
    ds.get(first + b, sample.data());
    for (int64_t g = 0, start = 0; g < S; ++g) {
      epos[size_t(g)] = int32_t(g - start);
      if (reset_eod >= 0 && sample[size_t(g)] == reset_eod) start = g + 1;
    }
    for (int64_t s = 0; s < Sl; ++s) {
      const int64_t g = positions[size_t(s)];
      t.tokens[size_t(s * B + b)] = sample[size_t(g)];
      t.labels[size_t(s * B + b)] = sample[size_t(g + 1)];
      t.pos[size_t(s * B + b)] = int32_t(g);
      t.embed_pos[size_t(s * B + b)] = epos[size_t(g)];
      for (int64_t d = 1; d <= ahead; ++d) {
        const size_t at = size_t(((d - 1) * Sl + s) * B + b);
        t.ahead_tokens[at] = g + d < S ? sample[size_t(g + d)] : 0;
        t.ahead_labels[at] = g + d < S ? sample[size_t(g + d + 1)] : 0;
      }
    }
  }
  return t;
}

std::vector<int64_t> loss_token_counts(
    const SampleDataset& ds, Split split, int64_t base, int64_t batch, int32_t eod, int64_t ahead) {
  const int64_t S = ds.sample_length() - 1;
  std::vector<int64_t> counts(size_t(1 + ahead));
  for (int64_t d = 0; d <= ahead; ++d) counts[size_t(d)] = batch * std::max<int64_t>(0, S - d);
  if (eod < 0) return counts;
  std::vector<int32_t> sample(size_t(ds.sample_length()));
  for (int64_t i = base; i < base + batch; ++i) {
    MT_CHECK(i < ds.size(), "the ", split_name(split), " split has ", ds.size(),
             " samples; sample ", i, " was asked for");
    ds.get(i, sample.data());
    for (int64_t s = 0; s < S; ++s) {
      if (sample[size_t(s)] != eod) continue;
      // The input token at s is masked at every depth d <= s (position s - d).
      for (int64_t d = 0; d <= std::min(ahead, s); ++d) --counts[size_t(d)];
    }
  }
  return counts;
}

}  // namespace mtron::data
