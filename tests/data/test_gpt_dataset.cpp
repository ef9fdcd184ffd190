// GPTDataset, blending and the train/valid/test builder against the independent Python
// reference of Megatron's algorithms (megatron_reference.py, numpy RandomState): identical
// document/sample/shuffle indices and samples, seeds, epochs, caching, blending proportions.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "mtron/core/error.h"
#include "mtron/data/blended_dataset.h"
#include "mtron/data/dataset_builder.h"
#include "mtron/data/gpt_dataset.h"
#include "test_util.h"

namespace mtron::data {
namespace {

using testing::python_reference;
using testing::TempDir;

// Writes a dataset whose documents have the given lengths; token k of document d is
// d * 1000 + k % 1000, so a token tells its document. Returns the prefix.
std::string make_dataset(const TempDir& t,
                         const std::string& name,
                         const std::vector<int>& lengths) {
  const std::string prefix = t / name;
  IndexedDatasetWriter w(prefix, TokenDType::kInt32);
  for (std::size_t d = 0; d < lengths.size(); ++d) {
    std::vector<int32_t> tokens(static_cast<std::size_t>(lengths[d]));
    for (int k = 0; k < lengths[d]; ++k) tokens[std::size_t(k)] = int32_t(d) * 1000 + k % 1000;
    w.add_document(tokens);
  }
  w.finalize();
  return prefix;
}

std::vector<int> random_lengths(int n, uint32_t seed, int max_len) {
  std::mt19937 rng(seed);
  std::vector<int> v(static_cast<std::size_t>(n));
  for (auto& l : v) l = 1 + int(rng() % uint32_t(max_len));
  return v;
}

void expect_same(const IntArray& a, const IntArray& b, const std::string& what) {
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  ASSERT_EQ(a.rows(), b.rows()) << what;
  ASSERT_EQ(a.cols(), b.cols()) << what;
  for (int64_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << what << " entry " << i;
}

struct Case {
  int64_t begin, end;
  std::optional<int64_t> num_samples;
  int64_t seq_length;
  uint32_t seed;
  const char* what;
};

TEST(GPTDataset, IndicesAndSamplesMatchTheReference) {
  TempDir t;
  const auto lengths = random_lengths(97, 11, 60);
  const std::string prefix = make_dataset(t, "ds", lengths);
  IndexedDataset data(prefix);
  int64_t total = 0;
  for (int l : lengths) total += l;
  const int64_t per_epoch_32 = (total - 1) / 32;
  const std::vector<Case> cases = {
      {0, 97, std::nullopt, 32, 1234, "one epoch, no sample count"},
      {0, 97, 10, 32, 1234, "few samples"},
      {0, 97, 3 * per_epoch_32, 32, 1234, "3 epochs, last one mostly used"},
      {0, 97, 2 * per_epoch_32 + 5, 32, 7, "3 epochs, separate last epoch (< 80%)"},
      {10, 60, 100, 31, 0, "document sub-range, seq 31"},
      {5, 96, 333, 33, 4294967295u, "seq 33, max seed"},
      {0, 97, 500, 2, 99, "seq 2"},
      {0, 1, 50, 3, 1, "a single document, many epochs"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const GPTIndices ix =
        build_gpt_indices(data, c.begin, c.end, c.num_samples, c.seq_length, c.seed);
    const std::string out = t / "ref";
    const nlohmann::json args = {
        {"prefix", prefix},
        {"begin", c.begin},
        {"end", c.end},
        {"num_samples", c.num_samples ? nlohmann::json(*c.num_samples) : nlohmann::json()},
        {"seq_length", c.seq_length},
        {"seed", c.seed},
        {"out", out}};
    const auto ref = python_reference("gpt_indices", args);
    EXPECT_EQ(ix.num_epochs, ref["epochs"].get<int64_t>());
    expect_same(ix.document_index, load_npy(out + "-document_index.npy"), "document index");
    expect_same(ix.sample_index, load_npy(out + "-sample_index.npy"), "sample index");
    expect_same(ix.shuffle_index, load_npy(out + "-shuffle_index.npy"), "shuffle index");
    if (c.num_samples) {
      EXPECT_GE(ix.shuffle_index.size(), *c.num_samples);
    }

    GPTDatasetConfig cfg{c.seq_length, c.seed, t / "cache", false};
    GPTDataset ds(std::make_shared<IndexedDataset>(prefix), c.begin, c.end, c.num_samples,
                  Split::kTrain, cfg);
    const int64_t count = std::min<int64_t>(ds.size(), 40);
    auto args2 = args;
    args2["count"] = count;
    const auto samples = python_reference("gpt_samples", args2);
    std::vector<int32_t> got(static_cast<std::size_t>(ds.sample_length()));
    for (int64_t k = 0; k < count; ++k) {
      ds.get(k, got.data());
      ASSERT_EQ(got, samples[std::size_t(k)].get<std::vector<int32_t>>()) << "sample " << k;
    }
  }
}

TEST(GPTDataset, SameSeedSameOrderOtherSeedOtherOrder) {
  TempDir t;
  const std::string prefix = make_dataset(t, "ds", random_lengths(64, 3, 100));
  auto data = std::make_shared<IndexedDataset>(prefix);
  const auto samples = [&](uint32_t seed) {
    GPTDataset ds(data, 0, 64, 200, Split::kTrain, {16, seed, "", false});
    std::vector<int32_t> all(static_cast<std::size_t>(ds.size() * ds.sample_length()));
    for (int64_t i = 0; i < ds.size(); ++i) ds.get(i, all.data() + i * ds.sample_length());
    return all;
  };
  EXPECT_EQ(samples(1234), samples(1234));
  EXPECT_NE(samples(1234), samples(1235));
}

TEST(GPTDataset, EveryDocumentAppearsOncePerEpoch) {
  TempDir t;
  const auto lengths = random_lengths(50, 5, 80);
  const std::string prefix = make_dataset(t, "ds", lengths);
  auto data = std::make_shared<IndexedDataset>(prefix);
  int64_t total = 0;
  for (int l : lengths) total += l;
  const int64_t seq = 24;
  for (int64_t epochs : {1, 2, 5}) {
    // Ask for every sample the epochs can give: the last epoch is fully used.
    const int64_t want = (epochs * total - 1) / seq;
    GPTDataset ds(data, 0, 50, want, Split::kTrain, {seq, 42, "", false});
    ASSERT_EQ(ds.indices().num_epochs, epochs);
    std::vector<int64_t> seen(lengths.size(), 0);
    std::vector<int32_t> s(static_cast<std::size_t>(ds.sample_length()));
    for (int64_t i = 0; i < ds.size(); ++i) {
      ds.get(i, s.data());
      for (int64_t k = 0; k < seq; ++k)
        ++seen[std::size_t(s[std::size_t(k)] / 1000)];  // inputs only
    }
    // n * seq tokens are consumed; at most seq - 1 at the very end of the stream are left.
    const int64_t slack = epochs * total - ds.size() * seq;
    ASSERT_GE(slack, 1);
    ASSERT_LE(slack, seq);
    int64_t short_by = 0;
    for (std::size_t d = 0; d < lengths.size(); ++d) {
      EXPECT_LE(seen[d], epochs * lengths[d]) << "document " << d;
      short_by += epochs * lengths[d] - seen[d];
    }
    EXPECT_EQ(short_by, slack) << epochs << " epochs";
  }
}

TEST(GPTDataset, CacheIsWrittenReusedAndValidated) {
  TempDir t;
  const std::string prefix = make_dataset(t, "ds", random_lengths(40, 9, 50));
  auto data = std::make_shared<IndexedDataset>(prefix);
  const GPTDatasetConfig cfg{16, 1234, t / "cache", true};
  GPTDataset a(data, 0, 40, 100, Split::kValid, cfg);
  EXPECT_FALSE(a.loaded_from_cache());
  ASSERT_TRUE(std::filesystem::exists(a.cache_description_path()));
  EXPECT_NE(a.cache_description_path().find("-GPTDataset-valid-description.txt"),
            std::string::npos);
  GPTDataset b(data, 0, 40, 100, Split::kValid, cfg);
  EXPECT_TRUE(b.loaded_from_cache());
  expect_same(a.indices().document_index, b.indices().document_index, "document index");
  expect_same(a.indices().sample_index, b.indices().sample_index, "sample index");
  expect_same(a.indices().shuffle_index, b.indices().shuffle_index, "shuffle index");

  // Another seed or sample count is another cache entry.
  GPTDataset c(data, 0, 40, 100, Split::kValid, {16, 1, t / "cache", true});
  EXPECT_FALSE(c.loaded_from_cache());
  EXPECT_NE(c.cache_description_path(), a.cache_description_path());

  // Default location: beside the data, as Megatron (<prefix>/cache/GPTDataset_indices).
  GPTDataset d(data, 0, 40, 100, Split::kTrain, {16, 1234, "", true});
  EXPECT_EQ(d.cache_description_path().rfind(prefix + "/cache/GPTDataset_indices/", 0), 0u);

  // A damaged cache file is reported, never trusted.
  const std::string desc = a.cache_description_path();
  const std::string shuffle =
      desc.substr(0, desc.size() - std::string("description.txt").size()) + "shuffle_index.npy";
  IntArray sh = load_npy(shuffle);
  std::vector<uint32_t> bad(static_cast<std::size_t>(sh.size()));
  for (int64_t i = 0; i < sh.size(); ++i) bad[std::size_t(i)] = uint32_t(sh[i]);
  bad[3] = 1u << 30;
  save_npy(shuffle, IntArray::from_vector(bad));
  try {
    GPTDataset e(data, 0, 40, 100, Split::kValid, cfg);
    ADD_FAILURE() << "corrupt cache accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shuffle index entry 3"), std::string::npos) << e.what();
  }
}

TEST(GPTDataset, ConcurrentReadsMatchSerialReads) {
  TempDir t;
  const std::string prefix = make_dataset(t, "ds", random_lengths(200, 13, 300));
  GPTDataset ds(std::make_shared<IndexedDataset>(prefix), 0, 200, 2000, Split::kTrain,
                {64, 3, "", false});
  const int64_t L = ds.sample_length();
  std::vector<int32_t> serial(static_cast<std::size_t>(ds.size() * L)), parallel(serial.size());
  for (int64_t i = 0; i < ds.size(); ++i) ds.get(i, serial.data() + i * L);
  std::vector<std::thread> th;
  for (int w = 0; w < 4; ++w)
    th.emplace_back([&, w] {
      for (int64_t i = w; i < ds.size(); i += 4) ds.get(i, parallel.data() + i * L);
    });
  for (auto& x : th) x.join();
  EXPECT_EQ(serial, parallel);
}

TEST(GPTDataset, TooFewTokensIsAClearError) {
  TempDir t;
  const std::string prefix = make_dataset(t, "tiny", {1, 1, 5});
  auto data = std::make_shared<IndexedDataset>(prefix);
  try {
    GPTDataset ds(data, 0, 1, 10, Split::kTest, {4, 1, "", false});
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("test split"), std::string::npos) << e.what();
  }
}

// --- blending and the builder --------------------------------------------------------------------

TEST(Blending, GreedyIndicesMatchTheReferenceAndProportionsHold) {
  for (const std::vector<double>& w : {std::vector<double>{0.3, 0.7}, std::vector<double>{2, 3, 5},
                                       std::vector<double>{1, 1, 1, 1, 1, 1, 1, 1, 1, 7}}) {
    const int64_t size = 10000;
    std::vector<int16_t> di;
    std::vector<int64_t> dsi;
    build_blending_indices(numpy_normalize(w), size, di, dsi);
    const auto ref = python_reference("blend", {{"weights", w}, {"size", size}});
    EXPECT_EQ(di, ref["dataset_index"].get<std::vector<int16_t>>());
    EXPECT_EQ(dsi, ref["dataset_sample_index"].get<std::vector<int64_t>>());
    const auto norm = numpy_normalize(w);
    std::vector<int64_t> count(w.size(), 0);
    for (int16_t i : di) ++count[std::size_t(i)];
    for (std::size_t i = 0; i < w.size(); ++i)
      EXPECT_NEAR(double(count[i]) / size, norm[i], 0.01) << "dataset " << i;
  }
}

TEST(Builder, SplitParsingAndRangesFollowMegatron) {
  const auto s = parse_split("969, 30, 1");
  EXPECT_DOUBLE_EQ(s[0], 0.969);
  EXPECT_DOUBLE_EQ(s[1], 0.03);
  const auto m = split_matrix(parse_split("99,1"));
  ASSERT_TRUE(m[0] && m[1]);
  EXPECT_FALSE(m[2]);
  // Python's round() is half-to-even: 2.5 -> 2, 7.5 -> 8.
  const auto q = split_matrix(parse_split("25,50,25"));
  EXPECT_EQ(split_range(*q[0], 10), (std::pair<int64_t, int64_t>(0, 2)));
  EXPECT_EQ(split_range(*q[1], 10), (std::pair<int64_t, int64_t>(2, 8)));
  EXPECT_EQ(split_range(*q[2], 10), (std::pair<int64_t, int64_t>(8, 10)));
  EXPECT_THROW(parse_split("1,2,3,4"), Error);
  EXPECT_THROW(parse_split("abc"), Error);
}

TEST(Builder, SampleCountsFollowMegatron) {
  const SampleCounts c = megatron_sample_counts(1000, 32, 32, 100, 10);
  EXPECT_EQ(c.train, 32000);
  EXPECT_EQ(c.valid, (1000 / 100 + 1) * 10 * 32);
  EXPECT_EQ(c.test, 320);
  EXPECT_EQ(megatron_sample_counts(1000, 32, 32, 100, 10, 5000).train, 5000);
  // --eval-global-batch-size sizes the validation and test splits.
  const SampleCounts e = megatron_sample_counts(1000, 32, 48, 100, 10);
  EXPECT_EQ(e.train, 32000);
  EXPECT_EQ(e.valid, (1000 / 100 + 1) * 10 * 48);
  EXPECT_EQ(e.test, 480);
}

TEST(Builder, DataPathForms) {
  Blend a = parse_data_path({"p"});
  EXPECT_EQ(a.prefixes, std::vector<std::string>{"p"});
  EXPECT_FALSE(a.weights);
  Blend b = parse_data_path({"0.3", "A", "0.7", "B"});
  EXPECT_EQ(b.prefixes, (std::vector<std::string>{"A", "B"}));
  EXPECT_EQ(*b.weights, (std::vector<double>{0.3, 0.7}));
  Blend c = parse_data_path({"A", "B"});
  EXPECT_EQ(c.prefixes, (std::vector<std::string>{"A", "B"}));
  EXPECT_FALSE(c.weights);
}

TEST(Builder, SinglePrefixGivesOneGPTDatasetPerSplit) {
  TempDir t;
  const std::string prefix = make_dataset(t, "ds", random_lengths(100, 21, 90));
  DataConfig cfg{{prefix}, "90,8,2", 32, 1234, t / "cache", true};
  const auto tvt = build_train_valid_test(cfg, {500, 40, 8});
  ASSERT_TRUE(tvt.train && tvt.valid && tvt.test);
  EXPECT_GE(tvt.train->size(), 500);
  EXPECT_GE(tvt.valid->size(), 40);
  const auto* train = dynamic_cast<const GPTDataset*>(tvt.train.get());
  ASSERT_NE(train, nullptr);
  // Train covers documents [0, 90): every token of its samples comes from those documents.
  std::vector<int32_t> s(static_cast<std::size_t>(train->sample_length()));
  for (int64_t i = 0; i < train->size(); ++i) {
    train->get(i, s.data());
    for (int32_t tok : s) ASSERT_LT(tok / 1000, 90);
  }
  const auto no_test =
      build_train_valid_test({{prefix}, "95,5,0", 32, 1234, t / "cache", true}, {500, 40, 8});
  EXPECT_FALSE(no_test.test);
}

TEST(Builder, WeightedBlendSizesAndProportions) {
  TempDir t;
  const std::string a = make_dataset(t, "a", random_lengths(80, 31, 200));
  const std::string b = make_dataset(t, "b", random_lengths(60, 32, 200));
  DataConfig cfg{{"0.3", a, "0.7", b}, "98,2,0", 16, 1234, t / "cache", true};
  const auto tvt = build_train_valid_test(cfg, {10000, 100, 0});
  const auto* train = dynamic_cast<const BlendedDataset*>(tvt.train.get());
  ASSERT_NE(train, nullptr);
  // Megatron: the blend holds sum_i ceil(N * w_i) samples.
  EXPECT_EQ(train->size(), int64_t(std::ceil(10000 * 0.3)) + int64_t(std::ceil(10000 * 0.7)));
  std::vector<int64_t> count(2, 0);
  std::vector<int32_t> s(static_cast<std::size_t>(train->sample_length()));
  for (int64_t i = 0; i < train->size(); ++i) {
    ++count[std::size_t(train->dataset_of(i))];
    if (i < 200) train->get(i, s.data());
  }
  EXPECT_NEAR(double(count[0]) / double(train->size()), 0.3, 0.01);
  EXPECT_NEAR(double(count[1]) / double(train->size()), 0.7, 0.01);
  // Each part was built with ceil(ceil(N * w) * 1.005) samples requested.
  const auto* part = dynamic_cast<const GPTDataset*>(train->datasets()[0].get());
  ASSERT_NE(part, nullptr);
  EXPECT_GE(part->size(), int64_t(std::ceil(3000 * 1.005)));
  EXPECT_FALSE(tvt.test);
}

}  // namespace
}  // namespace mtron::data
