#include "mtron/data/blended_dataset.h"

#include "mtron/core/error.h"

namespace mtron::data {

namespace {

// numpy's pairwise_sum for float64 (numpy/core/src/umath/loops_utils.h.src).
double pairwise_sum(const double* a, std::size_t n) {
  if (n < 8) {
    double res = 0.;
    for (std::size_t i = 0; i < n; ++i) res += a[i];
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (int j = 0; j < 8; ++j) r[j] = a[j];
    std::size_t i = 8;
    for (; i < n - (n % 8); i += 8)
      for (int j = 0; j < 8; ++j) r[j] += a[i + j];
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  std::size_t n2 = n / 2;
  n2 -= n2 % 8;
  return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

}  // namespace

std::vector<double> numpy_normalize(const std::vector<double>& w) {
  const double sum = pairwise_sum(w.data(), w.size());
  std::vector<double> out(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) out[i] = w[i] / sum;
  return out;
}

void build_blending_indices(const std::vector<double>& weights,
                            int64_t size,
                            std::vector<int16_t>& dataset_index,
                            std::vector<int64_t>& dataset_sample_index) {
  const std::size_t k = weights.size();
  MT_ASSERT(k > 0 && k < 32767, "blending ", k, " datasets");
  std::vector<int64_t> taken(k, 0);
  dataset_index.resize(std::size_t(size));
  dataset_sample_index.resize(std::size_t(size));
  for (int64_t j = 0; j < size; ++j) {
    const double jd = std::max(double(j), 1.0);
    std::size_t best = 0;
    double best_err = weights[0] * jd - double(taken[0]);
    for (std::size_t i = 1; i < k; ++i) {
      const double err = weights[i] * jd - double(taken[i]);
      if (err > best_err) {
        best_err = err;
        best = i;
      }
    }
    dataset_index[std::size_t(j)] = int16_t(best);
    dataset_sample_index[std::size_t(j)] = taken[best]++;
  }
}

BlendedDataset::BlendedDataset(std::vector<std::shared_ptr<const SampleDataset>> datasets,
                               std::vector<double> weights,
                               int64_t size)
    : datasets_(std::move(datasets)), weights_(std::move(weights)) {
  MT_CHECK(!datasets_.empty() && datasets_.size() == weights_.size(),
           "a blend needs one weight per dataset");
  MT_CHECK(datasets_.size() < 32767, "too many datasets in a blend (", datasets_.size(), ")");
  for (double w : weights_) MT_CHECK(w > 0, "--data-path weights must be positive (got ", w, ")");
  weights_ = numpy_normalize(weights_);
  for (const auto& d : datasets_)
    MT_CHECK(d->sample_length() == datasets_[0]->sample_length(),
             "blended datasets differ in sequence length");
  build_blending_indices(weights_, size, dataset_index_, dataset_sample_index_);
  std::vector<int64_t> count(datasets_.size(), 0);
  for (int16_t i : dataset_index_) ++count[std::size_t(i)];
  for (std::size_t i = 0; i < datasets_.size(); ++i)
    MT_CHECK(count[i] <= datasets_[i]->size(), "the blend requests ", count[i],
             " samples from dataset ", i, " which holds ", datasets_[i]->size());
}

void BlendedDataset::get(int64_t idx, int32_t* out) const {
  MT_ASSERT(idx >= 0 && idx < size(), "sample ", idx, " out of range [0, ", size(), ")");
  datasets_[std::size_t(dataset_index_[std::size_t(idx)])]->get(
      dataset_sample_index_[std::size_t(idx)], out);
}

}  // namespace mtron::data
