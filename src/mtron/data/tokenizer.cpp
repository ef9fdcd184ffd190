#include "mtron/data/tokenizer.h"

#include <filesystem>

#include "mtron/core/error.h"
#include "mtron/data/gpt2_tokenizer.h"
#include "mtron/data/hf_tokenizer.h"
#include "mtron/data/mapped_file.h"
#include "mtron/data/null_tokenizer.h"
#include "mtron/data/sentencepiece_tokenizer.h"

namespace mtron::data {

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

void require_file(const std::string& flag, const std::string& path, const std::string& type) {
  MT_CHECK(!path.empty(), flag, " is required for --tokenizer-type ", type);
  std::error_code ec;
  MT_CHECK(std::filesystem::exists(path, ec), flag, " ", path, ": no such file");
}

}  // namespace

const std::vector<std::string>& tokenizer_types() {
  static const std::vector<std::string> types = {
      "GPT2BPETokenizer", "SentencePieceTokenizer", "GPTSentencePieceTokenizer",
      "Llama2Tokenizer",  "HuggingFaceTokenizer",   "NullTokenizer"};
  return types;
}

void check_tokenizer_type(const std::string& t) {
  MT_CHECK(!t.empty(), "--tokenizer-type is required (one of: ", join(tokenizer_types()), ")");
  for (const auto& k : tokenizer_types())
    if (t == k) return;
  static const std::vector<std::string> megatron_only = {
      "BertWordPieceLowerCase", "BertWordPieceCase",       "TikTokenizer",
      "MultimodalTokenizer",    "NullMultimodalTokenizer", "SFTTokenizer"};
  for (const auto& m : megatron_only)
    MT_CHECK(t != m, "--tokenizer-type ", t,
             " is a Megatron tokenizer that mtron does not support; use one of: ",
             join(tokenizer_types()));
  MT_CHECK(false, "--tokenizer-type '", t, "' is unknown; use one of: ", join(tokenizer_types()));
}

std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerOptions& o) {
  const std::string& t = o.type;
  check_tokenizer_type(t);
  if (t == "GPT2BPETokenizer") {
    require_file("--vocab-file", o.vocab_file, t);
    require_file("--merge-file", o.merge_file, t);
    return std::make_unique<Gpt2Tokenizer>(read_file(o.vocab_file), read_file(o.merge_file),
                                           o.vocab_file, o.merge_file);
  }
  if (t == "SentencePieceTokenizer" || t == "GPTSentencePieceTokenizer" || t == "Llama2Tokenizer") {
    require_file("--tokenizer-model", o.model, t);
    return std::make_unique<SentencePieceTokenizer>(o.model, t);
  }
  if (t == "HuggingFaceTokenizer") {
    MT_CHECK(!o.model.empty(), "--tokenizer-model is required for --tokenizer-type ", t,
             " (a tokenizer.json file or the folder holding it)");
    return HfTokenizer::from_path(o.model);
  }
  if (t == "NullTokenizer") {
    MT_CHECK(o.vocab_size.has_value(), "--vocab-size is required for --tokenizer-type ", t);
    return std::make_unique<NullTokenizer>(*o.vocab_size, o.null_eod_id, o.null_pad_id);
  }
  MT_ASSERT(false, "unhandled tokenizer type ", t);
  return nullptr;
}

}  // namespace mtron::data
