// defines: HfTokenizer
//
// Megatron's HuggingFaceTokenizer for BPE models, reading a Hugging Face `tokenizer.json`
// (and `tokenizer_config.json` beside it for eos/pad) without Python: byte-level BPE as in
// GPT-2, Llama-3 and Qwen (Split + ByteLevel pre-tokenizers, `ignore_merges`), and
// byte-fallback BPE as in Mistral/Llama-2 (Prepend/Replace normalizers or Metaspace, `<0xXX>`
// byte tokens). encode() follows `tokenizer(text).input_ids` (Megatron's default
// include_special_tokens=True): added tokens found in the text become their ids, the rest is
// normalized, pre-tokenized and merged, then the post processor adds its special tokens.
// decode() keeps special tokens, as Megatron's ids_to_text does by default.
//
// Supported components (anything else is rejected by name when the file is loaded):
//   normalizer     NFC NFD NFKC NFKD Lowercase Prepend Replace Strip Sequence
//   pre_tokenizer  Split ByteLevel Metaspace Digits Sequence
//   model          BPE (byte_fallback, ignore_merges, unk_token, fuse_unk,
//   continuing_subword_prefix,
//                  end_of_word_suffix; no dropout)
//   post_processor TemplateProcessing ByteLevel Sequence
//   decoder        ByteLevel Replace ByteFallback Fuse Strip Metaspace Sequence
// Limits: regex `\s` is Unicode White_Space (as in Rust `tokenizers`); added tokens marked
// `normalized` are matched on the normalized text as in Hugging Face, but `single_word` is
// approximated with ASCII word characters.
#pragma once

#include <memory>
#include <string>

#include "mtron/data/tokenizer.h"

namespace mtron::data {

class HfTokenizer final : public Tokenizer {
 public:
  // `json` is the tokenizer.json text and `config_json` the tokenizer_config.json text (may be
  // empty); `path` names them in errors.
  HfTokenizer(const std::string& json, const std::string& config_json, const std::string& path);
  ~HfTokenizer() override;

  // Loads from a tokenizer.json path or a folder holding tokenizer.json (and optionally
  // tokenizer_config.json).
  static std::unique_ptr<HfTokenizer> from_path(const std::string& path);

  using Tokenizer::encode;
  void encode(std::string_view text, std::vector<int32_t>& out) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t eod() const override;
  int64_t vocab_size() const override;
  std::optional<int32_t> pad() const override;
  std::string type() const override { return "HuggingFaceTokenizer"; }

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mtron::data
