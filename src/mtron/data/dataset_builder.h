// defines: DataConfig, SampleCounts, megatron_sample_counts, Blend, parse_data_path, parse_split,
//          split_matrix, split_range, TrainValidTest, build_train_valid_test
//
// Megatron's BlendedMegatronDatasetBuilder for GPT data, from the training flags:
//
//   --data-path P | P1 P2 ... | W1 P1 W2 P2 ...    (weights are normalized)
//   --split 969,30,1                                (train/valid/test shares of each dataset's
//                                                    documents, contiguous, in that order)
//   --seq-length, --seed, --data-cache-path
//
// One prefix without a weight: one GPTDataset per split asking for the split's sample count.
// Weighted prefixes: dataset i of split s asks for ceil(ceil(N_s * w_i) * 1.005) samples and
// the split is a BlendedDataset of sum_i ceil(N_s * w_i) samples. Prefixes without weights: each
// dataset is one epoch and the blend weights are their lengths (size min(N_s, total)).
// A split whose share is 0 has no dataset (nullptr).
//
// Sample counts (megatron_sample_counts): train = train_iters * GBS,
// valid = (train_iters // eval_interval + 1) * eval_iters * EGBS, test = eval_iters * EGBS
// (EGBS: the evaluation's global batch size).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mtron/data/blended_dataset.h"
#include "mtron/data/gpt_dataset.h"

namespace mtron::data {

struct DataConfig {
  std::vector<std::string> data_path;  // --data-path, as the shell split it
  std::string split = "969, 30, 1";    // --split
  int64_t seq_length = 0;              // --seq-length
  uint32_t seed = 1234;                // --seed
  std::string cache_path;              // --data-cache-path (empty: beside each dataset)
  bool write_cache = true;             // false on ranks that only read the index cache
};

struct SampleCounts {
  int64_t train = 0, valid = 0, test = 0;
};

// Megatron's get_train_valid_test_num_samples (training.py); `train_samples` replaces
// train_iters * GBS when --train-samples is given.
SampleCounts megatron_sample_counts(int64_t train_iters,
                                    int64_t global_batch_size,
                                    int64_t eval_global_batch_size,
                                    int64_t eval_interval,
                                    int64_t eval_iters,
                                    std::optional<int64_t> train_samples = std::nullopt);

struct Blend {
  std::vector<std::string> prefixes;
  std::optional<std::vector<double>> weights;  // as given (not normalized)
};
// Megatron's get_blend_from_list.
Blend parse_data_path(const std::vector<std::string>& data_path);

// Megatron's parse_and_normalize_split: the numbers of "969, 30, 1", padded to 3, normalized.
std::array<double, 3> parse_split(const std::string& split);
// convert_split_vector_to_split_matrix: [lo, hi) per split, nullopt for an empty share.
std::array<std::optional<std::pair<double, double>>, 3> split_matrix(
    const std::array<double, 3>& v);
// The document range [round(lo * n), round(hi * n)) (Python's round: half to even).
std::pair<int64_t, int64_t> split_range(std::pair<double, double> bookends, int64_t n);

struct TrainValidTest {
  std::shared_ptr<const SampleDataset> train, valid, test;
  const std::shared_ptr<const SampleDataset>& operator[](Split s) const {
    return s == Split::kTrain ? train : s == Split::kValid ? valid : test;
  }
};

TrainValidTest build_train_valid_test(const DataConfig& cfg, const SampleCounts& counts);

}  // namespace mtron::data
