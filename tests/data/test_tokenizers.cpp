// Tokenizers on self-contained inputs: UTF-8 handling against Python, byte-level BPE on a small
// hand-made vocabulary, the file parsers' errors, NullTokenizer, SentencePiece against the
// spm_encode tool, and a hand-made byte-fallback tokenizer.json. The real GPT-2, Llama-3, Qwen
// and Mistral files are tested in test_corpus.cpp.
#include <gtest/gtest.h>

#include "mtron/core/error.h"
#include "mtron/data/gpt2_tokenizer.h"
#include "mtron/data/hf_tokenizer.h"
#include "mtron/data/tokenizer.h"
#include "mtron/data/unicode.h"
#include "test_helpers.h"
#include "test_util.h"

namespace mtron::data {
namespace {

using testing::run_command;
using testing::shell_quote;
using testing::TempDir;
using testing::write_text;

using tests::error_of;

// --- UTF-8 ---------------------------------------------------------------------------------------

TEST(Unicode, DecodeReplaceMatchesPython) {
  const std::vector<std::string> cases = {
      "plain",
      "caf\xC3\xA9",
      "\xE2\x82",
      "\xE0\x80\x80",
      "\xED\xA0\x80",
      "\xF4\x90\x80\x80",
      "\xFF",
      "a\x80z",
      "\xF0\x9F\x98",
      "\xC3",
      "\xF0\x9F\x98\x80\xF0",
      "\xE1\x80\xE2\x82\xAC",
  };
  std::string hex_args;
  for (const auto& c : cases) {
    std::string h;
    for (unsigned char ch : c) {
      char b[3];
      std::snprintf(b, sizeof(b), "%02x", ch);
      h += b;
    }
    hex_args += ' ';
    hex_args += h;
  }
  const auto r = run_command(
      "/usr/bin/python3 -c 'import sys\nfor h in sys.argv[1:]: "
      "print(bytes.fromhex(h).decode(\"utf-8\", \"replace\").encode().hex())'" +
      hex_args);
  ASSERT_EQ(r.status, 0);
  std::size_t pos = 0;
  for (const auto& c : cases) {
    const std::size_t nl = r.out.find('\n', pos);
    const std::string want_hex = r.out.substr(pos, nl - pos);
    pos = nl + 1;
    std::string got_hex;
    for (unsigned char ch : utf8_decode_replace(c)) {
      char b[3];
      std::snprintf(b, sizeof(b), "%02x", ch);
      got_hex += b;
    }
    EXPECT_EQ(got_hex, want_hex) << "input of " << c.size() << " bytes";
  }
  EXPECT_TRUE(utf8_valid("caf\xC3\xA9 \xF0\x9F\x98\x80"));
  EXPECT_FALSE(utf8_valid("\xED\xA0\x80"));  // a surrogate
  EXPECT_EQ(utf8_first_invalid("abcdefghij\xC0\x80"), 10u);
}

TEST(Unicode, ByteToUnicodeTableIsGpt2s) {
  ByteUnicodeMap m;
  EXPECT_EQ(m.to_unicode('A'), U'A');
  EXPECT_EQ(m.to_unicode(' '), char32_t(0x120));   // "Ġ"
  EXPECT_EQ(m.to_unicode('\n'), char32_t(0x10A));  // "Ċ"
  EXPECT_EQ(m.to_unicode(0xAD), char32_t(0x143));
  for (int b = 0; b < 256; ++b) EXPECT_EQ(m.to_byte(m.to_unicode(uint8_t(b))), b);
}

// --- byte-level BPE on a small vocabulary
// ---------------------------------------------------------

// A vocabulary of the 256 byte tokens plus merges for "lo", "low", "er", "Ġlow", "lower".
struct TinyGpt2 {
  std::string vocab, merges;
  TinyGpt2() {
    ByteUnicodeMap m;
    nlohmann::json v = nlohmann::json::object();
    for (int b = 0; b < 256; ++b) {
      std::string s;
      utf8_append(s, m.to_unicode(uint8_t(b)));
      v[s] = b;
    }
    const std::vector<std::string> extra = {"lo",
                                            "low",
                                            "er",
                                            "\xC4\xA0"
                                            "low",
                                            "lower",
                                            "<|endoftext|>"};
    for (std::size_t i = 0; i < extra.size(); ++i) v[extra[i]] = 256 + int(i);
    vocab = v.dump();
    merges = "#version: 0.2\nl o\nlo w\ne r\n\xC4\xA0 low\nlow er\n";
  }
  Gpt2Tokenizer make() const { return Gpt2Tokenizer(vocab, merges, "vocab.json", "merges.txt"); }
};

TEST(Gpt2Bpe, MergesByRankAndRoundTrips) {
  TinyGpt2 t;
  Gpt2Tokenizer tok = t.make();
  EXPECT_EQ(tok.vocab_size(), 262);
  EXPECT_EQ(tok.eod(), 261);
  // "lower" -> lo, low, er, lower; " low" -> Ġlow; "lowest" -> low e s t.
  EXPECT_EQ(tok.encode("lower"), (std::vector<int32_t>{260}));
  EXPECT_EQ(tok.encode(" low"), (std::vector<int32_t>{259}));
  EXPECT_EQ(tok.encode("lowest"), (std::vector<int32_t>{257, 'e', 's', 't'}));
  EXPECT_EQ(tok.encode("rel"), (std::vector<int32_t>{'r', 'e', 'l'}));
  // Merge priorities: in " lower", Ġ+low (rank 3) wins over low+er (rank 4).
  EXPECT_EQ(tok.encode(" lower"), (std::vector<int32_t>{259, 258}));
  EXPECT_EQ(tok.encode("lowerlower."), (std::vector<int32_t>{260, 260, '.'}));
  EXPECT_EQ(tok.encode("it's 12!"),
            (std::vector<int32_t>{'i', 't', '\'', 's', ' ', '1', '2', '!'}));
  const std::string text = "lower lowest, it's  12\n\n\t x\xC3\xA9\xE6\x97\xA5\xF0\x9F\x98\x80";
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
  // The text "<|endoftext|>" is ordinary text for GPT-2 (Megatron does not split it out).
  EXPECT_NE(tok.encode("<|endoftext|>"), (std::vector<int32_t>{261}));
  EXPECT_THROW(tok.encode("bad \xFF utf8"), Error);
  EXPECT_THROW(tok.decode(std::vector<int32_t>{262}), Error);
  // A decoded id sequence that splits a character gives U+FFFD, as Python's errors="replace".
  EXPECT_EQ(tok.decode(std::vector<int32_t>{0xE6, 'a'}),
            "\xEF\xBF\xBD"
            "a");
}

TEST(Gpt2Bpe, VocabAndMergesErrorsNameTheFile) {
  TinyGpt2 t;
  const auto err = [&](const std::string& vocab, const std::string& merges) {
    return error_of([&] { Gpt2Tokenizer tok(vocab, merges, "V.json", "M.txt"); });
  };
  EXPECT_NE(err("{not json", t.merges).find("--vocab-file V.json: not valid JSON"),
            std::string::npos);
  EXPECT_NE(err("[1,2]", t.merges).find("V.json: expected a JSON object"), std::string::npos);
  EXPECT_NE(err(R"({"a": 5})", t.merges).find("V.json: id 5 of token 'a' is outside [0, 1)"),
            std::string::npos);
  EXPECT_NE(err(R"({"a": 0, "b": 0})", t.merges).find("is used twice"), std::string::npos);
  EXPECT_NE(err(R"({"a": "x"})", t.merges).find("is not an integer"), std::string::npos);
  EXPECT_NE(err(R"({"a": 0})", t.merges).find("no token for byte 0"), std::string::npos);
  EXPECT_NE(err(R"({" ": 0})", t.merges).find("byte-to-unicode alphabet"), std::string::npos);
  EXPECT_NE(err(t.vocab, "#version: 0.2\nl o x\n").find("M.txt line 2: expected two tokens"),
            std::string::npos);
  EXPECT_NE(err(t.vocab, "#version: 0.2\nq z\n").find("M.txt line 2: merge 'q z'"),
            std::string::npos);
  EXPECT_NE(err(t.vocab, "#version: 0.2\n l\n").find("line 2"), std::string::npos);
}

// --- the factory
// -----------------------------------------------------------------------------------

TEST(TokenizerFactory, ErrorsNameTheFlag) {
  TokenizerOptions o;
  EXPECT_NE(error_of([&] { make_tokenizer(o); }).find("--tokenizer-type is required"),
            std::string::npos);
  o.type = "Foo";
  EXPECT_NE(error_of([&] { make_tokenizer(o); }).find("--tokenizer-type 'Foo' is unknown"),
            std::string::npos);
  o.type = "TikTokenizer";
  EXPECT_NE(error_of([&] { make_tokenizer(o); }).find("mtron does not support"), std::string::npos);
  o.type = "GPT2BPETokenizer";
  EXPECT_NE(error_of([&] { make_tokenizer(o); }).find("--vocab-file is required"),
            std::string::npos);
  o.vocab_file = "/nonexistent/v.json";
  EXPECT_NE(
      error_of([&] { make_tokenizer(o); }).find("--vocab-file /nonexistent/v.json: no such file"),
      std::string::npos);
  o.type = "SentencePieceTokenizer";
  EXPECT_NE(error_of([&] { make_tokenizer(o); }).find("--tokenizer-model is required"),
            std::string::npos);
  o.type = "HuggingFaceTokenizer";
  o.model = "/nonexistent";
  EXPECT_NE(error_of([&] { make_tokenizer(o); }).find("--tokenizer-model /nonexistent"),
            std::string::npos);
  o.type = "NullTokenizer";
  EXPECT_NE(error_of([&] { make_tokenizer(o); }).find("--vocab-size is required"),
            std::string::npos);
}

// --- NullTokenizer
// ----------------------------------------------------------------------------------

TEST(NullTokenizer, FollowsMegatron) {
  TokenizerOptions o;
  o.type = "NullTokenizer";
  o.vocab_size = 1000;
  auto tok = make_tokenizer(o);
  EXPECT_EQ(tok->vocab_size(), 1000);
  EXPECT_EQ(tok->eod(), 999);
  EXPECT_FALSE(tok->pad());
  EXPECT_EQ(tok->encode("5 17 0 999"), (std::vector<int32_t>{5, 17, 0, 999}));
  EXPECT_EQ(tok->encode("7\n 8"), (std::vector<int32_t>{7, 8}));  // int() strips whitespace
  EXPECT_THROW(tok->encode(" 7"), Error);                         // but int('') fails
  EXPECT_EQ(tok->decode(std::vector<int32_t>{5, 17, 0}), "5 17 0");
  EXPECT_TRUE(tok->encode("").empty());
  EXPECT_THROW(tok->encode("1  2"), Error);  // split(' ') gives an empty field
  EXPECT_THROW(tok->encode("1 x"), Error);
  EXPECT_THROW(tok->encode("1000"), Error);
  o.null_eod_id = 3;
  o.null_pad_id = 4;
  auto t2 = make_tokenizer(o);
  EXPECT_EQ(t2->eod(), 3);
  EXPECT_EQ(t2->pad(), 4);
}

// --- SentencePiece
// -----------------------------------------------------------------------------------

TEST(SentencePiece, MatchesSpmEncode) {
  TempDir t;
  std::string corpus;
  const char* words[] = {"the",
                         "quick",
                         "brown",
                         "fox",
                         "jumps",
                         "over",
                         "lazy",
                         "dog",
                         "caf\xC3\xA9",
                         "na\xC3\xAFve",
                         "\xE6\x97\xA5\xE6\x9C\xAC",
                         "data",
                         "parallel",
                         "tensor",
                         "pipeline"};
  for (int i = 0; i < 3000; ++i) {
    corpus += words[(i * 7) % 15];
    corpus += (i % 11 == 10) ? "\n" : " ";
  }
  write_text(t / "corpus.txt", corpus);
  const auto r =
      run_command(str("spm_train --input=", t / "corpus.txt", " --model_prefix=", t / "m",
                      " --vocab_size=400 --model_type=bpe --byte_fallback=true --minloglevel=2 ",
                      ">/dev/null 2>&1"));
  ASSERT_EQ(r.status, 0) << "spm_train failed";
  TokenizerOptions o;
  o.type = "GPTSentencePieceTokenizer";
  o.model = t / "m.model";
  auto tok = make_tokenizer(o);
  EXPECT_EQ(tok->vocab_size(), 400);
  EXPECT_EQ(tok->eod(), 2);  // spm's default </s>
  const std::vector<std::string> lines = {"the quick brown fox", "lazy caf\xC3\xA9 data",
                                          "unseen words \xF0\x9F\x98\x80 zebra",
                                          "  spaces   everywhere ", "x"};
  std::string input;
  for (const auto& l : lines) input += l + "\n";
  write_text(t / "in.txt", input);
  const auto enc = run_command(
      str("spm_encode --model=", t / "m.model", " --output_format=id < ", t / "in.txt"));
  ASSERT_EQ(enc.status, 0);
  std::size_t pos = 0;
  for (const auto& l : lines) {
    const std::size_t nl = enc.out.find('\n', pos);
    std::vector<int32_t> want;
    std::istringstream is(enc.out.substr(pos, nl - pos));
    for (int32_t id; is >> id;) want.push_back(id);
    pos = nl + 1;
    EXPECT_EQ(tok->encode(l), want) << l;
  }
  EXPECT_EQ(tok->decode(tok->encode("the lazy fox")), "the lazy fox");
  // Llama2Tokenizer: the same model with the BOS id first (Megatron's tokenize(s, bos=True)).
  TokenizerOptions l2 = o;
  l2.type = "Llama2Tokenizer";
  auto llama = make_tokenizer(l2);
  std::vector<int32_t> with_bos = {1};  // spm's default <s>
  for (int32_t id : tok->encode("the lazy fox")) with_bos.push_back(id);
  EXPECT_EQ(llama->encode("the lazy fox"), with_bos);
  EXPECT_EQ(llama->eod(), 2);
  EXPECT_EQ(llama->vocab_size(), 400);
  EXPECT_EQ(llama->type(), "Llama2Tokenizer");
  o.model = t / "corpus.txt";
  EXPECT_NE(error_of([&] { make_tokenizer(o); }).find("cannot load SentencePiece model"),
            std::string::npos);
}

// --- Hugging Face tokenizer.json
// -----------------------------------------------------------------------

// A Mistral-shaped byte-fallback BPE: Prepend + Replace normalizers, BOS template, decoder chain.
std::string tiny_byte_fallback_json() {
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  const std::vector<std::string> pieces = {"\xE2\x96\x81",
                                           "h",
                                           "e",
                                           "l",
                                           "o",
                                           "w",
                                           "r",
                                           "d",
                                           "\xE2\x96\x81h",
                                           "ll",
                                           "\xE2\x96\x81he",
                                           "\xE2\x96\x81hell",
                                           "\xE2\x96\x81hello",
                                           "\xE2\x96\x81w"};
  for (std::size_t i = 0; i < pieces.size(); ++i) vocab[pieces[i]] = 259 + int(i);
  nlohmann::json j = {
      {"added_tokens",
       {{{"id", 0}, {"content", "<unk>"}, {"special", true}, {"normalized", false}},
        {{"id", 1}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
        {{"id", 2}, {"content", "</s>"}, {"special", true}, {"normalized", false}}}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"vocab", vocab},
        {"merges",
         {"\xE2\x96\x81 h", "l l", "\xE2\x96\x81h e", "\xE2\x96\x81he ll", "\xE2\x96\x81hell o",
          "\xE2\x96\x81 w"}}}}};
  return j.dump();
}

TEST(HuggingFace, ByteFallbackModel) {
  HfTokenizer tok(tiny_byte_fallback_json(), R"({"eos_token": "</s>"})", "tiny.json");
  EXPECT_EQ(tok.eod(), 2);
  EXPECT_EQ(tok.vocab_size(), 3 + 256 + 14);
  // "hello world": <s> ▁hello ▁w o r l d
  EXPECT_EQ(tok.encode("hello world"), (std::vector<int32_t>{1, 271, 272, 263, 265, 262, 266}));
  // Characters missing from the vocabulary fall back to their UTF-8 bytes.
  EXPECT_EQ(tok.encode("h\xC3\xA9"), (std::vector<int32_t>{1, 267, 3 + 0xC3, 3 + 0xA9}));
  // Special tokens in the text are matched before normalization.
  EXPECT_EQ(tok.encode("</s>hello"), (std::vector<int32_t>{1, 2, 271}));
  EXPECT_EQ(tok.decode(tok.encode("hello world h\xC3\xA9")), "<s> hello world h\xC3\xA9");
}

TEST(HuggingFace, UnsupportedComponentsAreNamed) {
  auto j = nlohmann::json::parse(tiny_byte_fallback_json());
  j["normalizer"] = {{"type", "BertNormalizer"}};
  EXPECT_NE(error_of([&] {
              HfTokenizer t(j.dump(), "", "x.json");
            }).find("unsupported normalizer type 'BertNormalizer'"),
            std::string::npos);
  j = nlohmann::json::parse(tiny_byte_fallback_json());
  j["model"]["type"] = "WordPiece";
  EXPECT_NE(error_of([&] { HfTokenizer t(j.dump(), "", "x.json"); }).find("model type 'WordPiece'"),
            std::string::npos);
  j = nlohmann::json::parse(tiny_byte_fallback_json());
  j["model"]["merges"].push_back("q z");
  EXPECT_NE(
      error_of([&] { HfTokenizer t(j.dump(), "", "x.json"); }).find("missing from the vocabulary"),
      std::string::npos);
  EXPECT_NE(error_of([&] { HfTokenizer t("{", "", "x.json"); }).find("not valid JSON"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { HfTokenizer t(R"({"model": {"vocab": 3}})", "", "x.json"); }).find("x.json"),
      std::string::npos);
}

}  // namespace
}  // namespace mtron::data
