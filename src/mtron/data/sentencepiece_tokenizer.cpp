#include "mtron/data/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include "mtron/core/error.h"
#include "mtron/data/unicode.h"

namespace mtron::data {

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path,
                                               const std::string& type)
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()), type_(type) {
  const auto status = sp_->Load(model_path);
  MT_CHECK(status.ok(), "--tokenizer-model ", model_path,
           ": cannot load SentencePiece model: ", status.ToString());
  vocab_size_ = sp_->GetPieceSize();
  eod_ = sp_->eos_id();
  pad_ = sp_->pad_id();
  if (type == "Llama2Tokenizer") bos_ = sp_->bos_id();
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::optional<int32_t> SentencePieceTokenizer::pad() const {
  if (pad_ < 0) return std::nullopt;
  return pad_;
}

void SentencePieceTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  const std::size_t bad = utf8_first_invalid(text);
  MT_CHECK(bad == std::string_view::npos, "invalid UTF-8 at byte ", bad, " of the text");
  std::vector<int> ids;
  const auto status = sp_->Encode(text, &ids);
  MT_CHECK(status.ok(), "SentencePiece encode failed: ", status.ToString());
  if (bos_ >= 0) out.push_back(bos_);
  out.insert(out.end(), ids.begin(), ids.end());
}

std::string SentencePieceTokenizer::decode(std::span<const int32_t> ids) const {
  std::vector<int> v(ids.begin(), ids.end());
  for (int id : v)
    MT_CHECK(id >= 0 && id < vocab_size_, "cannot decode token id ", id,
             ": outside the SentencePiece vocabulary [0, ", vocab_size_, ")");
  std::string text;
  const auto status = sp_->Decode(v, &text);
  MT_CHECK(status.ok(), "SentencePiece decode failed: ", status.ToString());
  return text;
}

}  // namespace mtron::data
