// defines: SentencePieceTokenizer
//
// Megatron's SentencePieceTokenizer and GPTSentencePieceTokenizer as Megatron-Core now builds
// them (library "sentencepiece", legacy=False): encode is the model's EncodeAsIds (no BOS, no
// EOS), decode is DecodeIds, vocab_size the number of pieces and eod the model's EOS id (-1 if
// the model defines none). Megatron-Core <= 0.15's SentencePieceTokenizer instead appended
// <CLS>/<SEP>/<EOD>/<MASK> pieces and used <EOD>; that legacy variant is not reproduced.
// Llama2Tokenizer (Megatron's _Llama2Tokenizer) is the same model with the BOS id before each
// text: its tokenize(s, bos=True, eos=False).
#pragma once

#include <memory>

#include "mtron/data/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace mtron::data {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(const std::string& model_path, const std::string& type);
  ~SentencePieceTokenizer() override;

  using Tokenizer::encode;
  void encode(std::string_view text, std::vector<int32_t>& out) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t eod() const override { return eod_; }
  int64_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> pad() const override;
  std::string type() const override { return type_; }

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string type_;
  int64_t vocab_size_ = 0;
  int32_t eod_ = -1, pad_ = -1;
  int32_t bos_ = -1;  // prepended by encode() (Llama2Tokenizer), -1: none
};

}  // namespace mtron::data
