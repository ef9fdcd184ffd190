#include "mtron/data/gpt_dataset.h"

#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>

#include "mtron/core/error.h"
#include "mtron/core/log.h"
#include "mtron/data/mapped_file.h"
#include "mtron/data/numpy_random.h"

namespace mtron::data {

namespace {

namespace fs = std::filesystem;

// The sizes that follow from the inputs alone: tokens per epoch, epochs (Megatron's
// _get_num_epochs) and the number of samples the sample index will hold.
struct EpochPlan {
  int64_t tokens_per_epoch = 0, epochs = 1, samples = 0;
};

EpochPlan plan_epochs(const IndexedDataset& data,
                      int64_t begin,
                      int64_t end,
                      std::optional<int64_t> num_samples,
                      int64_t seq_length,
                      Split split) {
  MT_CHECK(seq_length > 1, "--seq-length must be > 1 (got ", seq_length, ")");
  MT_ASSERT(begin >= 0 && begin <= end && end <= data.num_sequences(), "bad sequence range");
  MT_CHECK(!num_samples || *num_samples >= 0, "negative number of samples requested");
  EpochPlan p;
  for (int64_t s = begin; s < end; ++s) p.tokens_per_epoch += data.sequence_length(s);
  MT_CHECK(p.tokens_per_epoch > 1, data.path_prefix(), ": the ", split_name(split),
           " split (documents [", begin, ", ", end, ")) holds ", p.tokens_per_epoch,
           " tokens, too few for samples; change --split or add data");
  if (num_samples) {
    const int64_t requested = *num_samples * seq_length + 1;
    for (int64_t tokens = p.tokens_per_epoch; tokens < requested; tokens += p.tokens_per_epoch)
      ++p.epochs;
  }
  p.samples = (p.epochs * p.tokens_per_epoch - 1) / seq_length;
  return p;
}

// _build_document_index: the sequence ids [begin, end) tiled `epochs` times, shuffled.
void append_document_index(
    std::vector<int32_t>& out, int64_t begin, int64_t end, int64_t epochs, NumpyRandomState& rs) {
  const std::size_t start = out.size();
  for (int64_t e = 0; e < epochs; ++e)
    for (int64_t s = begin; s < end; ++s) out.push_back(int32_t(s));
  rs.shuffle(std::span(out).subspan(start));
}

// helpers.cpp build_sample_idx (drop_last_partial_sequence=True, add_extra_token=1).
template <typename T>
std::vector<T> build_sample_index(const IndexedDataset& data,
                                  const std::vector<int32_t>& doc_idx,
                                  int64_t seq_length,
                                  int64_t num_samples) {
  std::vector<T> s(static_cast<std::size_t>(2 * (num_samples + 1)));
  int64_t doc_pos = 0, offset = 0;
  s[0] = 0;
  s[1] = 0;
  for (int64_t i = 1; i <= num_samples; ++i) {
    int64_t remaining = seq_length + 1;
    while (remaining != 0) {
      const int64_t length = data.sequence_length(doc_idx[doc_pos]) - offset;
      remaining -= length;
      if (remaining <= 0) {
        offset += remaining + length - 1;
        remaining = 0;
      } else {
        if (doc_pos == int64_t(doc_idx.size()) - 1) {
          MT_ASSERT(i == num_samples, "sample index ran out of documents at sample ", i);
          offset = data.sequence_length(doc_idx[doc_pos]) - 1;
          break;
        }
        ++doc_pos;
        offset = 0;
      }
    }
    s[2 * i] = T(doc_pos);
    s[2 * i + 1] = T(offset);
  }
  return s;
}

// _build_shuffle_index: [0, first) and [first, total) each permuted.
template <typename T>
std::vector<T> build_shuffle_index(int64_t first, int64_t total, NumpyRandomState& rs) {
  std::vector<T> v(static_cast<std::size_t>(total));
  std::iota(v.begin(), v.end(), T(0));
  rs.shuffle(std::span(v).first(std::size_t(first)));
  if (first < total) rs.shuffle(std::span(v).subspan(std::size_t(first)));
  return v;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

// Checks that the indices describe samples of seq_length + 1 tokens inside the dataset, so that
// get() cannot read out of bounds even with a corrupt cache.
void validate_indices(const GPTIndices& ix,
                      const IndexedDataset& data,
                      int64_t begin,
                      int64_t end,
                      int64_t epochs,
                      int64_t num_samples,
                      int64_t seq_length,
                      const std::string& what) {
  const IntArray& d = ix.document_index;
  const IntArray& s = ix.sample_index;
  const IntArray& sh = ix.shuffle_index;
  MT_CHECK(d.dtype() == IntDType::kInt32 && d.ndim() == 1 && d.size() == epochs * (end - begin),
           what, ": document index has the wrong type or size");
  MT_CHECK(s.ndim() == 2 && s.cols() == 2 && s.rows() == num_samples + 1 &&
               (s.dtype() == IntDType::kInt32 || s.dtype() == IntDType::kInt64),
           what, ": sample index has the wrong type or shape");
  MT_CHECK(sh.ndim() == 1 && sh.size() == num_samples &&
               (sh.dtype() == IntDType::kUInt32 || sh.dtype() == IntDType::kInt64),
           what, ": shuffle index has the wrong type or size");
  for (int64_t i = 0; i < d.size(); ++i)
    MT_CHECK(d[i] >= begin && d[i] < end, what, ": document index entry ", i, " = ", d[i],
             " is outside [", begin, ", ", end, ")");
  MT_CHECK(s.at(0, 0) == 0 && s.at(0, 1) == 0, what, ": sample 0 does not start at 0");
  int64_t pos = 0, tokens_before = 0;  // walk the document index once
  for (int64_t i = 1; i <= num_samples; ++i) {
    const int64_t p = s.at(i, 0), off = s.at(i, 1);
    MT_CHECK(p >= pos && p < d.size(), what, ": sample ", i, " document position ", p,
             " is out of order or range");
    for (; pos < p; ++pos) tokens_before += data.sequence_length(d[pos]);
    const int64_t len = data.sequence_length(d[p]);
    MT_CHECK(off >= 0 && off < len, what, ": sample ", i, " offset ", off,
             " is outside its document of ", len, " tokens");
    MT_CHECK(tokens_before + off == i * seq_length, what, ": sample ", i,
             " does not start seq_length tokens after sample ", i - 1);
  }
  for (int64_t i = 0; i < sh.size(); ++i)
    MT_CHECK(sh[i] >= 0 && sh[i] < num_samples, what, ": shuffle index entry ", i, " = ", sh[i],
             " is outside [0, ", num_samples, ")");
}

}  // namespace

const char* split_name(Split s) {
  switch (s) {
    case Split::kTrain:
      return "train";
    case Split::kValid:
      return "valid";
    case Split::kTest:
      return "test";
  }
  return "?";
}

namespace {

GPTIndices build_indices(const IndexedDataset& data,
                         int64_t begin,
                         int64_t end,
                         std::optional<int64_t> num_samples,
                         int64_t seq_length,
                         uint32_t seed,
                         const EpochPlan& plan) {
  MT_CHECK(end - begin <= std::numeric_limits<int32_t>::max(), data.path_prefix(),
           ": too many documents for the int32 document index");
  GPTIndices ix;
  const int64_t epochs = plan.epochs;
  ix.num_epochs = epochs;
  bool separate_final_epoch = false;
  int64_t samples_sans_final = 0;
  if (epochs > 1) {
    samples_sans_final = ((epochs - 1) * plan.tokens_per_epoch - 1) / seq_length;
    const int64_t from_final = *num_samples - samples_sans_final;
    const int64_t per_epoch = (plan.tokens_per_epoch - 1) / seq_length;
    MT_ASSERT(from_final >= 0 && from_final <= per_epoch + 1, "final-epoch sample count ",
              from_final);
    separate_final_epoch = from_final < int64_t(0.80 * double(per_epoch));
  }

  NumpyRandomState rs(seed);
  std::vector<int32_t> doc_idx;
  doc_idx.reserve(std::size_t(epochs * (end - begin)));
  if (separate_final_epoch) {
    append_document_index(doc_idx, begin, end, epochs - 1, rs);
    append_document_index(doc_idx, begin, end, 1, rs);
  } else {
    append_document_index(doc_idx, begin, end, epochs, rs);
  }

  const int64_t n = plan.samples;
  // helpers.build_sample_idx picks int32 when max(len(document_index), max length) fits.
  const int64_t idx_max = std::max<int64_t>(int64_t(doc_idx.size()), data.max_sequence_length());
  if (idx_max <= std::numeric_limits<int32_t>::max()) {
    ix.sample_index =
        IntArray::from_vector(build_sample_index<int32_t>(data, doc_idx, seq_length, n), 2);
  } else {
    ix.sample_index =
        IntArray::from_vector(build_sample_index<int64_t>(data, doc_idx, seq_length, n), 2);
  }
  const int64_t first = separate_final_epoch ? samples_sans_final : n;
  if (n >= int64_t(std::numeric_limits<uint32_t>::max()) - 1) {
    ix.shuffle_index = IntArray::from_vector(build_shuffle_index<int64_t>(first, n, rs));
  } else {
    ix.shuffle_index = IntArray::from_vector(build_shuffle_index<uint32_t>(first, n, rs));
  }
  ix.document_index = IntArray::from_vector(std::move(doc_idx));
  return ix;
}

}  // namespace

GPTIndices build_gpt_indices(const IndexedDataset& data,
                             int64_t begin,
                             int64_t end,
                             std::optional<int64_t> num_samples,
                             int64_t seq_length,
                             uint32_t seed,
                             Split split) {
  return build_indices(data, begin, end, num_samples, seq_length, seed,
                       plan_epochs(data, begin, end, num_samples, seq_length, split));
}

GPTDataset::GPTDataset(std::shared_ptr<const IndexedDataset> data,
                       int64_t begin,
                       int64_t end,
                       std::optional<int64_t> num_samples,
                       Split split,
                       const GPTDatasetConfig& cfg)
    : data_(std::move(data)), split_(split), seq_length_(cfg.seq_length) {
  const IndexedDataset& d = *data_;
  const EpochPlan plan = plan_epochs(d, begin, end, num_samples, seq_length_, split);
  const int64_t epochs = plan.epochs, n = plan.samples;

  nlohmann::ordered_json desc;
  desc["class"] = "GPTDataset";
  desc["dataset_path"] = d.path_prefix();
  desc["dataset_sequences"] = d.num_sequences();
  desc["dataset_tokens"] = d.num_tokens();
  desc["dataset_idx_bytes"] = d.idx_file_bytes();
  desc["sequence_range"] = {begin, end};
  desc["num_samples"] =
      num_samples ? nlohmann::ordered_json(*num_samples) : nlohmann::ordered_json();
  desc["index_split"] = split_name(split);
  desc["random_seed"] = cfg.seed;
  desc["sequence_length"] = seq_length_;
  const std::string description = desc.dump(4);

  const fs::path dir = cfg.cache_path.empty()
                           ? fs::path(d.path_prefix()) / "cache" / "GPTDataset_indices"
                           : fs::path(cfg.cache_path);
  char hash[17];
  std::snprintf(hash, sizeof(hash), "%016llx", (unsigned long long)fnv1a(description));
  const std::string base =
      (dir / (std::string(hash) + "-GPTDataset-" + split_name(split))).string();
  description_path_ = base + "-description.txt";
  const std::string what = str("GPTDataset ", split_name(split), " indices of ", d.path_prefix());

  std::error_code ec;
  if (fs::exists(description_path_, ec) && read_file(description_path_) == description) {
    indices_.document_index = load_npy(base + "-document_index.npy");
    indices_.sample_index = load_npy(base + "-sample_index.npy");
    indices_.shuffle_index = load_npy(base + "-shuffle_index.npy");
    indices_.num_epochs = epochs;
    validate_indices(indices_, d, begin, end, epochs, n, seq_length_, what + " in " + base);
    from_cache_ = true;
    return;
  }
  indices_ = build_indices(d, begin, end, num_samples, seq_length_, cfg.seed, plan);
  validate_indices(indices_, d, begin, end, epochs, n, seq_length_, what);
  if (!cfg.write_cache) {
    description_path_.clear();
    return;
  }
  fs::create_directories(dir, ec);
  MT_CHECK(!ec, "cannot create the dataset index cache ", dir.string(), ": ", ec.message(),
           " (set --data-cache-path to a writable folder)");
  save_npy(base + "-document_index.npy", indices_.document_index);
  save_npy(base + "-sample_index.npy", indices_.sample_index);
  save_npy(base + "-shuffle_index.npy", indices_.shuffle_index);
  // The description goes last: its presence marks a complete cache entry.
  const std::string tmp = description_path_ + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  MT_CHECK(f, "cannot write ", tmp, " (set --data-cache-path to a writable folder)");
  const bool ok = std::fwrite(description.data(), 1, description.size(), f) == description.size();
  MT_CHECK(std::fclose(f) == 0 && ok, "cannot write ", tmp);
  fs::rename(tmp, description_path_);
}

void GPTDataset::get(int64_t idx, int32_t* out) const {
  MT_ASSERT(idx >= 0 && idx < size(), "sample ", idx, " out of range [0, ", size(), ")");
  const IntArray& doc = indices_.document_index;
  const IntArray& s = indices_.sample_index;
  const int64_t i = indices_.shuffle_index[idx];
  const int64_t db = s.at(i, 0), ob = s.at(i, 1), de = s.at(i + 1, 0), oe = s.at(i + 1, 1);
  const IndexedDataset& d = *data_;
  if (db == de) {
    d.read(doc[db], ob, oe - ob + 1, out);
    return;
  }
  int32_t* p = out;
  const int64_t first = d.sequence_length(doc[db]) - ob;
  d.read(doc[db], ob, first, p);
  p += first;
  for (int64_t k = db + 1; k < de; ++k) {
    const int64_t len = d.sequence_length(doc[k]);
    d.read(doc[k], 0, len, p);
    p += len;
  }
  d.read(doc[de], 0, oe + 1, p);
  MT_ASSERT(p + oe + 1 == out + seq_length_ + 1, "sample ", idx, " has the wrong length");
}

}  // namespace mtron::data
