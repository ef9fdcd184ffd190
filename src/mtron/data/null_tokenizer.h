// defines: NullTokenizer
//
// Megatron's NullTokenizer (megatron/core/tokenizers/text/libraries/null_tokenizer.py): the
// text is the ids themselves, written in decimal and separated by single spaces; decode joins
// them back. vocab_size is --vocab-size exactly; eod is --null-tokenizer-eod-id, by default
// vocab_size - 1; pad is --null-tokenizer-pad-id (default -1: none).
// Departures: ids outside [0, vocab_size) are rejected (Megatron writes them unchecked), and an
// empty text gives no ids (Megatron raises on int('')).
// Megatron-Core <= 0.15 had eod = vocab_size and reported vocab_size + 1; the current rule
// is followed here.
#pragma once

#include "mtron/data/tokenizer.h"

namespace mtron::data {

class NullTokenizer final : public Tokenizer {
 public:
  NullTokenizer(int64_t vocab_size, std::optional<int64_t> eod_id, std::optional<int64_t> pad_id);

  using Tokenizer::encode;
  void encode(std::string_view text, std::vector<int32_t>& out) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t eod() const override { return eod_; }
  int64_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> pad() const override;
  std::string type() const override { return "NullTokenizer"; }

 private:
  int64_t vocab_size_;
  int32_t eod_;
  int32_t pad_;
};

}  // namespace mtron::data
