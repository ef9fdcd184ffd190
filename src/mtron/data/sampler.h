// defines: TokenRows, sample_rows, loss_token_counts
//
// Megatron's pretraining sampler (MegatronPretrainingSampler) and the context-parallel slicing
// of its samples: one micro-batch as one data-parallel and context-parallel rank sees it.
#pragma once

#include <cstdint>
#include <vector>

#include "mtron/data/gpt_dataset.h"

namespace mtron::data {

// B sequences of S tokens each, sequence-major: row s * B + b is token s of sequence b.
struct TokenRows {
  int64_t B = 0, S = 0;
  int64_t first = 0;  // sample index of sequence 0 (sequence b is sample first + b)
  std::vector<int32_t> tokens, labels, pos;  // [S * B]; pos: the global sequence positions
  // With `ahead` > 0 (multi-token prediction), for d = 1..ahead: the tokens and labels d
  // positions further, [ahead, S * B] (depth d at (d - 1) S B); 0 where that position is past the
  // sequence (Megatron's roll fills 0 there).
  std::vector<int32_t> ahead_tokens, ahead_labels;
  // The learned position embedding's index of each row, [S * B]: the global position, or with
  // --reset-position-ids the position within its document (0 at the token after an
  // end-of-document token).
  std::vector<int32_t> embed_pos;
};

// Micro-batch j of the global batch that starts at sample `base` of `split` (dataset `ds`), for
// data-parallel rank dp_rank of dp: it takes samples [dp_rank B, (dp_rank + 1) B) of the j-th
// block of B dp samples. Local token s of each sequence is the sample's token at global position
// positions[s] (the context-parallel rank's chunks; 0, 1, ... without context parallelism), its
// label the token after it; `ahead`: TokenRows::ahead_tokens/ahead_labels; reset_eod >= 0: the
// end-of-document id after which TokenRows::embed_pos starts again (--reset-position-ids).
// Throws mtron::Error when the split has too few samples.
TokenRows sample_rows(const SampleDataset& ds,
                      Split split,
                      int64_t base,
                      int64_t j,
                      int64_t B,
                      int64_t dp,
                      int64_t dp_rank,
                      const std::vector<int64_t>& positions,
                      int64_t ahead = 0,
                      int32_t reset_eod = -1);

// The tokens whose loss counts in the global batch of `batch` samples at sample `base` of
// `split`: [0] for the loss, [d] for multi-token-prediction depth d = 1..ahead. A position s of
// a sample counts at depth d when s + d < S and its input token at s + d is not `eod`
// (--eod-mask-loss, Megatron's loss mask rolled d positions for depth d); eod < 0 masks nothing:
// batch (S - d) without reading a sample. Every rank computes the same numbers from the samples
// themselves, so the loss's normalisation needs no communication.
std::vector<int64_t> loss_token_counts(
    const SampleDataset& ds, Split split, int64_t base, int64_t batch, int32_t eod, int64_t ahead);

}  // namespace mtron::data
