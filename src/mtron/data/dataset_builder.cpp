#include "mtron/data/dataset_builder.h"

#include <cmath>
#include <cstdlib>

#include "mtron/core/error.h"
#include "mtron/data/blended_dataset.h"

namespace mtron::data {

namespace {

bool parse_double(const std::string& s, double& v) {
  const char* b = s.c_str();
  char* e = nullptr;
  v = std::strtod(b, &e);
  while (e && *e && std::isspace(static_cast<unsigned char>(*e))) ++e;
  return e != b && e && *e == '\0';
}

std::string trim(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

}  // namespace

SampleCounts megatron_sample_counts(int64_t train_iters,
                                    int64_t global_batch_size,
                                    int64_t eval_global_batch_size,
                                    int64_t eval_interval,
                                    int64_t eval_iters,
                                    std::optional<int64_t> train_samples) {
  MT_CHECK(eval_interval > 0, "--eval-interval must be positive (got ", eval_interval, ")");
  SampleCounts c;
  c.train = train_samples ? *train_samples : train_iters * global_batch_size;
  c.valid = (train_iters / eval_interval + 1) * eval_iters * eval_global_batch_size;
  c.test = eval_iters * eval_global_batch_size;
  return c;
}

Blend parse_data_path(const std::vector<std::string>& list) {
  MT_CHECK(!list.empty(), "--data-path is empty");
  Blend b;
  bool weighted = list.size() % 2 == 0;
  std::vector<double> w;
  for (std::size_t i = 0; weighted && i < list.size(); i += 2) {
    double v;
    if (parse_double(list[i], v)) {
      w.push_back(v);
    } else {
      weighted = false;
    }
  }
  if (weighted) {
    for (std::size_t i = 1; i < list.size(); i += 2) b.prefixes.push_back(trim(list[i]));
    b.weights = w;
  } else {
    for (const auto& p : list) b.prefixes.push_back(trim(p));
  }
  return b;
}

std::array<double, 3> parse_split(const std::string& split) {
  std::vector<double> v;
  for (std::size_t i = 0; i < split.size();) {
    if (!(std::isdigit(static_cast<unsigned char>(split[i])) || split[i] == '.')) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < split.size() &&
           (std::isdigit(static_cast<unsigned char>(split[j])) || split[j] == '.'))
      ++j;
    double x;
    MT_CHECK(parse_double(split.substr(i, j - i), x), "--split '", split, "': '",
             split.substr(i, j - i), "' is not a number");
    v.push_back(x);
    i = j;
  }
  MT_CHECK(!v.empty() && v.size() <= 3, "--split '", split,
           "' must give 1 to 3 numbers (train, valid, test shares)");
  v.resize(3, 0.0);
  const std::vector<double> n = numpy_normalize(v);
  MT_CHECK(std::isfinite(n[0]) && std::isfinite(n[1]) && std::isfinite(n[2]), "--split '", split,
           "' has no positive share");
  return {n[0], n[1], n[2]};
}

std::array<std::optional<std::pair<double, double>>, 3> split_matrix(
    const std::array<double, 3>& v) {
  const double e[4] = {0.0, v[0], v[0] + v[1], (v[0] + v[1]) + v[2]};
  std::array<std::optional<std::pair<double, double>>, 3> m;
  for (int i = 0; i < 3; ++i)
    if (e[i + 1] > e[i]) m[i] = std::make_pair(e[i], e[i + 1]);
  return m;
}

std::pair<int64_t, int64_t> split_range(std::pair<double, double> b, int64_t n) {
  return {int64_t(std::nearbyint(b.first * double(n))),
          int64_t(std::nearbyint(b.second * double(n)))};
}

TrainValidTest build_train_valid_test(const DataConfig& cfg, const SampleCounts& counts) {
  const Blend blend = parse_data_path(cfg.data_path);
  const auto matrix = split_matrix(parse_split(cfg.split));
  const std::array<int64_t, 3> sizes = {counts.train, counts.valid, counts.test};
  GPTDatasetConfig gcfg;
  gcfg.seq_length = cfg.seq_length;
  gcfg.seed = cfg.seed;
  gcfg.cache_path = cfg.cache_path;
  gcfg.write_cache = cfg.write_cache;

  // The GPTDatasets of one prefix, one per split, each asking for num_samples[s].
  using PerSplit = std::array<std::shared_ptr<const SampleDataset>, 3>;
  const auto build_splits = [&](const std::string& prefix,
                                const std::array<std::optional<int64_t>, 3>& num_samples) {
    auto data = std::make_shared<const IndexedDataset>(prefix);
    PerSplit out;
    for (int s = 0; s < 3; ++s) {
      if (!matrix[s]) continue;
      const auto [b, e] = split_range(*matrix[s], data->num_sequences());
      out[s] = std::make_shared<GPTDataset>(data, b, e, num_samples[s], Split(s), gcfg);
    }
    return out;
  };

  TrainValidTest r;
  std::array<std::shared_ptr<const SampleDataset>*, 3> dst = {&r.train, &r.valid, &r.test};
  if (blend.prefixes.size() == 1 && !blend.weights) {
    const PerSplit d = build_splits(blend.prefixes[0], {sizes[0], sizes[1], sizes[2]});
    for (int s = 0; s < 3; ++s) *dst[s] = d[s];
    return r;
  }

  std::optional<std::vector<double>> weights;
  if (blend.weights) weights = numpy_normalize(*blend.weights);
  std::vector<PerSplit> per_prefix;
  std::vector<std::array<int64_t, 3>> targets;
  for (std::size_t i = 0; i < blend.prefixes.size(); ++i) {
    std::array<std::optional<int64_t>, 3> want;
    std::array<int64_t, 3> target{};
    if (weights) {
      for (int s = 0; s < 3; ++s) {
        target[s] = int64_t(std::ceil(double(sizes[s]) * (*weights)[i]));
        want[s] = int64_t(std::ceil(double(target[s]) * (1 + 0.005)));
      }
    }
    targets.push_back(target);
    per_prefix.push_back(build_splits(blend.prefixes[i], want));
  }
  for (int s = 0; s < 3; ++s) {
    if (!matrix[s]) continue;
    std::vector<std::shared_ptr<const SampleDataset>> parts;
    for (const auto& p : per_prefix) parts.push_back(p[s]);
    std::vector<double> w;
    int64_t size = 0;
    if (weights) {
      w = *weights;
      for (const auto& t : targets) size += t[s];
    } else {
      int64_t total = 0;
      for (const auto& p : parts) {
        w.push_back(double(p->size()));
        total += p->size();
      }
      size = std::min(sizes[s], total);
    }
    *dst[s] = std::make_shared<BlendedDataset>(std::move(parts), std::move(w), size);
  }
  return r;
}

}  // namespace mtron::data
