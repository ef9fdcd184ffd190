// defines: Split, SampleDataset, GPTDatasetConfig, GPTIndices, build_gpt_indices, GPTDataset
//
// Megatron-Core's GPTDataset (megatron/core/datasets/gpt_dataset.py + helpers.cpp), with the
// same indices for the same inputs, so that data indexed by either tool is read in the same
// order:
//
// - The dataset covers sequences [begin, end) of an IndexedDataset (one sequence = one
//   document for GPT data); tokens_per_epoch is their total length.
// - num_epochs is the smallest E with E * tokens_per_epoch >= num_samples * seq_length + 1
//   (1 when num_samples is not given).
// - document_index (int32): the sequence ids tiled E times and shuffled by
//   numpy.random.RandomState(seed). If E > 1 and the last epoch supplies fewer than
//   int(0.8 * samples_per_epoch) samples, the first E-1 epochs and the last one are shuffled
//   separately (so the last epoch's partial use is still a uniform subset).
// - sample_index ([n+1, 2], int32 when every entry fits, else int64): sample i starts at token
//   sample_index[i][1] of document document_index[sample_index[i][0]]; samples of seq_length+1
//   tokens are cut from the concatenated documents with a stride of seq_length (consecutive
//   samples share one token); n = (E * tokens_per_epoch - 1) // seq_length.
// - shuffle_index (uint32, int64 for >= 2^32-1 samples): a permutation of [0, n) from the same
//   RandomState; with a separate last epoch, the samples before and from the last epoch are
//   permuted separately.
//
// Sample idx of the dataset is sample shuffle_index[idx]: seq_length + 1 token ids (int32).
// get() is const and thread-safe.
//
// The indices are cached as .npy files (numpy can read them) in
//   <cache>/<hash>-GPTDataset-<split>-{document_index,sample_index,shuffle_index}.npy
// plus <hash>-GPTDataset-<split>-description.txt (written last, it marks a complete cache),
// where <cache> is GPTDatasetConfig::cache_path or, as in Megatron,
// <prefix>/cache/GPTDataset_indices. The description names the dataset (its path and size), the
// sequence range, num_samples, seed and seq_length; a cache whose description differs is ignored.
// Loaded indices are validated against the dataset before use. Megatron's own cache files are named
// by an MD5 of a description that includes its tokenizer object, so they are not shared; the
// indices are the same.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "mtron/data/indexed_dataset.h"
#include "mtron/data/int_array.h"

namespace mtron::data {

enum class Split { kTrain = 0, kValid = 1, kTest = 2 };
const char* split_name(Split s);  // "train", "valid", "test"

// A dataset of fixed-length samples addressed by a global sample index.
class SampleDataset {
 public:
  virtual ~SampleDataset() = default;
  virtual int64_t size() const = 0;
  // Tokens per sample: seq_length + 1 (inputs are [0, seq), labels [1, seq + 1)).
  virtual int64_t sample_length() const = 0;
  // Writes sample idx (0 <= idx < size()) into out[0, sample_length()). Thread-safe.
  virtual void get(int64_t idx, int32_t* out) const = 0;
};

struct GPTDatasetConfig {
  int64_t seq_length = 0;
  uint32_t seed = 1234;     // --seed
  std::string cache_path;   // --data-cache-path; empty: beside the data
  bool write_cache = true;  // false on ranks that must only read the cache
};

struct GPTIndices {
  IntArray document_index;  // int32 [E * num_sequences]
  IntArray sample_index;    // int32/int64 [n + 1, 2]
  IntArray shuffle_index;   // uint32/int64 [n]
  int64_t num_epochs = 0;
};

// Builds the three indices (no cache) for sequences [begin, end) of `data`; `split` only
// names the split in errors.
GPTIndices build_gpt_indices(const IndexedDataset& data,
                             int64_t begin,
                             int64_t end,
                             std::optional<int64_t> num_samples,
                             int64_t seq_length,
                             uint32_t seed,
                             Split split = Split::kTrain);

class GPTDataset final : public SampleDataset {
 public:
  // Loads the indices from the cache or builds them (and caches them when write_cache).
  GPTDataset(std::shared_ptr<const IndexedDataset> data,
             int64_t begin,
             int64_t end,
             std::optional<int64_t> num_samples,
             Split split,
             const GPTDatasetConfig& cfg);

  int64_t size() const override { return indices_.shuffle_index.size(); }
  int64_t sample_length() const override { return seq_length_ + 1; }
  void get(int64_t idx, int32_t* out) const override;

  const GPTIndices& indices() const { return indices_; }
  const IndexedDataset& data() const { return *data_; }
  Split split() const { return split_; }
  bool loaded_from_cache() const { return from_cache_; }
  // The description file that keys the cache (empty when not cached).
  const std::string& cache_description_path() const { return description_path_; }

 private:
  std::shared_ptr<const IndexedDataset> data_;
  Split split_;
  int64_t seq_length_;
  GPTIndices indices_;
  bool from_cache_ = false;
  std::string description_path_;
};

}  // namespace mtron::data
