// The indexed dataset: mtron's writer and reader against an independent Python implementation
// of Megatron's layout, in both directions and byte for byte, and one corrupt-file test per
// validation check of the reader.
#include <gtest/gtest.h>

#include <random>

#include "mtron/core/error.h"
#include "mtron/data/indexed_dataset.h"
#include "test_util.h"

namespace mtron::data {
namespace {

using testing::python_reference;
using testing::read_text;
using testing::TempDir;
using testing::write_text;
using Doc = std::vector<std::vector<int32_t>>;  // a document: its sequences

std::vector<Doc> sample_docs(int n, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Doc> docs;
  for (int d = 0; d < n; ++d) {
    Doc doc;
    const int nseq = d % 7 == 3 ? 0 : d % 5 == 1 ? 3 : 1;  // empty docs, multi-sequence docs
    for (int s = 0; s < nseq; ++s) {
      std::vector<int32_t> seq(rng() % 40 + (s == 1 ? 0 : 1));
      for (auto& t : seq) t = int32_t(rng() % uint32_t(vocab));
      doc.push_back(seq);
    }
    docs.push_back(doc);
  }
  return docs;
}

void write_docs(const std::string& prefix, TokenDType dt, const std::vector<Doc>& docs) {
  IndexedDatasetWriter w(prefix, dt);
  for (const Doc& doc : docs) {
    std::vector<int32_t> tokens, lengths;
    for (const auto& s : doc) {
      tokens.insert(tokens.end(), s.begin(), s.end());
      lengths.push_back(int32_t(s.size()));
    }
    w.add_document(tokens, lengths);
  }
  w.finalize();
}

std::vector<std::vector<int32_t>> flatten(const std::vector<Doc>& docs) {
  std::vector<std::vector<int32_t>> seqs;
  for (const Doc& d : docs) seqs.insert(seqs.end(), d.begin(), d.end());
  return seqs;
}

void expect_dataset(const IndexedDataset& ds, const std::vector<Doc>& docs) {
  const auto seqs = flatten(docs);
  ASSERT_EQ(ds.num_sequences(), int64_t(seqs.size()));
  ASSERT_EQ(ds.num_documents(), int64_t(docs.size()));
  int64_t d = 0, boundary = 0;
  for (const Doc& doc : docs) {
    EXPECT_EQ(ds.document_index(d), boundary);
    boundary += int64_t(doc.size());
    ++d;
  }
  EXPECT_EQ(ds.document_index(d), boundary);
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    ASSERT_EQ(ds.sequence_length(int64_t(i)), int32_t(seqs[i].size()));
    std::vector<int32_t> got(seqs[i].size());
    ds.read(int64_t(i), 0, int64_t(got.size()), got.data());
    EXPECT_EQ(got, seqs[i]) << "sequence " << i;
    if (got.size() > 2) {  // a read from the middle
      int32_t mid[1];
      ds.read(int64_t(i), 1, 1, mid);
      EXPECT_EQ(mid[0], seqs[i][1]);
    }
  }
}

TEST(IndexedDataset, RoundTripWithEmptyAndMultiSequenceDocuments) {
  TempDir t;
  for (TokenDType dt : {TokenDType::kUInt16, TokenDType::kInt32}) {
    const auto docs = sample_docs(33, dt == TokenDType::kUInt16 ? 65535 : 2000000000, 1);
    write_docs(t / "rt", dt, docs);
    IndexedDataset ds(t / "rt");
    EXPECT_EQ(ds.dtype(), dt);
    expect_dataset(ds, docs);
  }
}

TEST(IndexedDataset, EmptyDatasetAndSingleToken) {
  TempDir t;
  write_docs(t / "empty", TokenDType::kUInt16, {});
  IndexedDataset e(t / "empty");
  EXPECT_EQ(e.num_sequences(), 0);
  EXPECT_EQ(e.num_documents(), 0);
  write_docs(t / "one", TokenDType::kInt32, {Doc{{7}}});
  IndexedDataset o(t / "one");
  expect_dataset(o, {Doc{{7}}});
}

TEST(IndexedDataset, WriterRejectsIdsTooLargeForUint16) {
  TempDir t;
  IndexedDatasetWriter w(t / "big", TokenDType::kUInt16);
  const std::vector<int32_t> tokens = {1, 65536};
  EXPECT_THROW(w.add_document(tokens), Error);
}

TEST(IndexedDataset, OptimalDtypeFollowsMegatron) {
  EXPECT_EQ(optimal_token_dtype(50257), TokenDType::kUInt16);
  EXPECT_EQ(optimal_token_dtype(65499), TokenDType::kUInt16);
  EXPECT_EQ(optimal_token_dtype(65500), TokenDType::kInt32);
  EXPECT_EQ(optimal_token_dtype(128256), TokenDType::kInt32);
}

TEST(IndexedDataset, PythonWriterToMtronReader) {
  TempDir t;
  for (const char* dt : {"uint16", "int32"}) {
    const auto docs = sample_docs(31, 60000, 2);
    python_reference("write_idx", {{"prefix", t / dt}, {"dtype", dt}, {"documents", docs}});
    IndexedDataset ds(t / dt);
    expect_dataset(ds, docs);
  }
}

TEST(IndexedDataset, MtronWriterToPythonReaderByteForByte) {
  TempDir t;
  for (auto [dt, name] :
       {std::pair{TokenDType::kUInt16, "uint16"}, std::pair{TokenDType::kInt32, "int32"}}) {
    const auto docs = sample_docs(32, 60000, 3);
    write_docs(t / "mine", dt, docs);
    const auto ref = python_reference("read_idx", {{"prefix", t / "mine"}});
    EXPECT_EQ(ref["dtype"], name);
    EXPECT_EQ(ref["sequences"].get<std::vector<std::vector<int32_t>>>(), flatten(docs));
    python_reference("write_idx", {{"prefix", t / "ref"}, {"dtype", name}, {"documents", docs}});
    EXPECT_EQ(read_text(t / "mine.idx"), read_text(t / "ref.idx")) << name;
    EXPECT_EQ(read_text(t / "mine.bin"), read_text(t / "ref.bin")) << name;
  }
}

// --- corrupt files: one test per validation check ----------------------------------------------

class CorruptIndex : public ::testing::Test {
 protected:
  void SetUp() override {
    write_docs(t_ / "ok", TokenDType::kUInt16,
               {Doc{{1, 2, 3}}, Doc{{4, 5}}, Doc{}, Doc{{6}, {7, 8}}});
    idx_ = read_text(t_ / "ok.idx");
    bin_ = read_text(t_ / "ok.bin");
  }
  // The intact index with the T at byte `off` replaced by v.
  template <typename T>
  std::string poked(std::size_t off, T v) const {
    std::string s = idx_;
    std::memcpy(s.data() + off, &v, sizeof(T));
    return s;
  }
  // Offsets in the .idx of the 4 sequences / 5 document entries written in SetUp
  // (documents [1 2 3] [4 5] [] [6][7 8]: lengths 3 2 1 2, document index 0 1 2 2 4).
  static constexpr std::size_t kLengths = 34, kPointers = 34 + 4 * 4, kDocs = 34 + 12 * 4;

  void expect_rejected(const std::string& idx,
                       const std::string& bin,
                       const std::string& what,
                       const std::string& file_suffix = ".idx") {
    write_text(t_ / "bad.idx", idx);
    write_text(t_ / "bad.bin", bin);
    try {
      IndexedDataset ds(t_ / "bad");
      ADD_FAILURE() << "accepted a file with: " << what;
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(t_ / ("bad" + file_suffix)), std::string::npos) << m;
      EXPECT_NE(m.find(what), std::string::npos) << m;
    }
  }
  TempDir t_;
  std::string idx_, bin_;
};

TEST_F(CorruptIndex, TheIntactFileLoads) {
  IndexedDataset ds(t_ / "ok");
  EXPECT_EQ(ds.num_sequences(), 4);
  EXPECT_EQ(ds.num_documents(), 4);
}

TEST_F(CorruptIndex, TruncatedHeader) {
  expect_rejected(idx_.substr(0, 20), bin_, "truncated index header");
}

TEST_F(CorruptIndex, BadMagic) {
  std::string s = idx_;
  s[0] = 'X';
  expect_rejected(s, bin_, "bad magic");
}

TEST_F(CorruptIndex, BadVersion) {
  expect_rejected(poked<uint64_t>(9, 2), bin_, "unsupported index version 2");
}

TEST_F(CorruptIndex, InvalidDtypeCode) {
  for (uint8_t code : {uint8_t(0), uint8_t(9), uint8_t(255)}) {
    expect_rejected(poked<uint8_t>(17, code), bin_, "invalid dtype code");
  }
}

TEST_F(CorruptIndex, FloatDtypeCode) {
  expect_rejected(poked<uint8_t>(17, 7), bin_, "cannot hold token ids");
}

TEST_F(CorruptIndex, SequenceCountLargerThanTheFile) {
  expect_rejected(poked<uint64_t>(18, uint64_t(1) << 62), bin_, "does not fit in the file");
}

TEST_F(CorruptIndex, DocumentCountImpossible) {
  expect_rejected(poked<uint64_t>(26, 0), bin_, "document count 0 is impossible");
}

TEST_F(CorruptIndex, IndexSizeDoesNotMatchCounts) {
  expect_rejected(idx_.substr(0, idx_.size() - 8), bin_, "does not match N=");
  expect_rejected(idx_ + std::string(3, '\0'), bin_, "does not match N=");
}

TEST_F(CorruptIndex, NegativeLength) {
  expect_rejected(poked<int32_t>(kLengths + 4, -2), bin_, "negative length");
}

TEST_F(CorruptIndex, PointerNotTheRunningSum) {
  // Sequence 2 pointing back into sequence 0, then sequence 1 far beyond the .bin.
  expect_rejected(poked<int64_t>(kPointers + 8 * 2, 2), bin_, "sequence 2 pointer 2 should be 10");
  expect_rejected(poked<int64_t>(kPointers + 8 * 1, int64_t(1) << 60), bin_, "sequence 1 pointer");
}

TEST_F(CorruptIndex, LengthsDisagreeWithBinSize) {
  expect_rejected(idx_, bin_.substr(0, bin_.size() - 2), "does not match its index", ".bin");
  expect_rejected(idx_, bin_ + "xx", "does not match its index", ".bin");
  expect_rejected(poked<int32_t>(kLengths, 1000), bin_, "pointer");  // runs past the .bin
}

TEST_F(CorruptIndex, DocumentIndexMustStartAtZero) {
  expect_rejected(poked<int64_t>(kDocs, 1), bin_, "document index starts at 1");
}

TEST_F(CorruptIndex, DocumentIndexMustNotDecrease) {
  expect_rejected(poked<int64_t>(kDocs + 8 * 2, 0), bin_, "decreases");
}

TEST_F(CorruptIndex, DocumentIndexMustStayWithinSequences) {
  expect_rejected(poked<int64_t>(kDocs + 8 * 3, 99), bin_, "exceeds N=4");
}

TEST_F(CorruptIndex, DocumentIndexMustEndAtN) {
  expect_rejected(poked<int64_t>(kDocs + 8 * 4, 3), bin_, "last document index entry is 3");
}

TEST_F(CorruptIndex, MissingFiles) {
  write_text(t_ / "nobin.idx", idx_);
  try {
    IndexedDataset ds(t_ / "nobin");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nobin.bin"), std::string::npos) << e.what();
  }
  try {
    IndexedDataset ds(t_ / "nothing");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nothing.idx"), std::string::npos) << e.what();
  }
}

TEST_F(CorruptIndex, RandomByteFlipsNeverCrash) {
  std::mt19937 rng(5);
  int accepted = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string s = idx_, b = bin_;
    const int flips = 1 + int(rng() % 3);
    for (int f = 0; f < flips; ++f) s[rng() % s.size()] = char(rng());
    write_text(t_ / "fz.idx", s);
    write_text(t_ / "fz.bin", b);
    try {
      IndexedDataset ds(t_ / "fz");
      for (int64_t i = 0; i < ds.num_sequences(); ++i) {
        std::vector<int32_t> out(static_cast<std::size_t>(ds.sequence_length(i)));
        ds.read(i, 0, ds.sequence_length(i), out.data());
      }
      ++accepted;
    } catch (const Error&) {
    }
  }
  EXPECT_LT(accepted, 2000);
}

}  // namespace
}  // namespace mtron::data
