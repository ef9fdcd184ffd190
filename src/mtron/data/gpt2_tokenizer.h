// defines: Gpt2Tokenizer
//
// Megatron's GPT2BPETokenizer: OpenAI's byte-level BPE. Text is split by the GPT-2 pattern
// (regex.h), each piece's UTF-8 bytes become byte symbols, and BPE merges them (bpe.h).
// Files: the vocabulary JSON (token -> id, tokens spelled through bytes_to_unicode) and the
// merges text (`#version` line, then one "left right" pair per line, in rank order). eod is
// `<|endoftext|>`; text containing "<|endoftext|>" is tokenized as ordinary text, as Megatron
// does. Decoding joins the token bytes and decodes UTF-8 with errors="replace".
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mtron/data/bpe.h"
#include "mtron/data/regex.h"
#include "mtron/data/tokenizer.h"
#include "mtron/data/unicode.h"

namespace mtron::data {

class Gpt2Tokenizer final : public Tokenizer {
 public:
  // `vocab_json` and `merges_txt` are the file contents; the paths name them in errors.
  Gpt2Tokenizer(const std::string& vocab_json,
                const std::string& merges_txt,
                const std::string& vocab_path,
                const std::string& merges_path);

  using Tokenizer::encode;
  void encode(std::string_view text, std::vector<int32_t>& out) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t eod() const override { return eod_; }
  int64_t vocab_size() const override { return int64_t(tokens_.size()); }
  std::string type() const override { return "GPT2BPETokenizer"; }

 private:
  ByteUnicodeMap bytes_;
  std::vector<std::string> tokens_;  // id -> raw bytes
  int32_t byte_ids_[256];            // byte -> id of its single-byte token
  BpeMerges merges_;
  Regex pattern_;
  int32_t eod_ = -1;
  uint64_t cache_owner_;
};

}  // namespace mtron::data
