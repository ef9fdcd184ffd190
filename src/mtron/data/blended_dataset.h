// defines: numpy_normalize, build_blending_indices, BlendedDataset
//
// Megatron's BlendedDataset: a weighted mixture of datasets. Sample j goes to the dataset i with
// the largest error weights[i] * max(j, 1) - taken[i] (ties to the lowest i), and is that
// dataset's taken[i]-th sample (helpers.cpp build_blending_indices). Over any prefix of the
// blend, each dataset's share stays within a sample of its weight.
#pragma once

#include <memory>
#include <vector>

#include "mtron/data/gpt_dataset.h"
#include "mtron/data/int_array.h"

namespace mtron::data {

// numpy's w / w.sum() (with numpy's pairwise summation), which is Megatron's normalize(): the
// weights must match to the last bit for the greedy assignment to match.
std::vector<double> numpy_normalize(const std::vector<double>& w);

// dataset_index (int16) and dataset_sample_index (int64), `size` entries each; `weights` must be
// normalized.
void build_blending_indices(const std::vector<double>& weights,
                            int64_t size,
                            std::vector<int16_t>& dataset_index,
                            std::vector<int64_t>& dataset_sample_index);

class BlendedDataset final : public SampleDataset {
 public:
  // `weights` are normalized here. Throws if the blend asks a dataset for more samples than it
  // holds (Megatron's "oversamples the contributing datasets" error).
  BlendedDataset(std::vector<std::shared_ptr<const SampleDataset>> datasets,
                 std::vector<double> weights,
                 int64_t size);

  int64_t size() const override { return int64_t(dataset_index_.size()); }
  int64_t sample_length() const override { return datasets_[0]->sample_length(); }
  void get(int64_t idx, int32_t* out) const override;

  // Which dataset sample idx comes from.
  int dataset_of(int64_t idx) const { return dataset_index_[std::size_t(idx)]; }
  const std::vector<double>& weights() const { return weights_; }
  const std::vector<std::shared_ptr<const SampleDataset>>& datasets() const { return datasets_; }

 private:
  std::vector<std::shared_ptr<const SampleDataset>> datasets_;
  std::vector<double> weights_;
  std::vector<int16_t> dataset_index_;
  std::vector<int64_t> dataset_sample_index_;
};

}  // namespace mtron::data
