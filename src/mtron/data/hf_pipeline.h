// defines: hf::Normalizer, hf::Piece, hf::PreTokenizer, hf::Decoder, hf::make_normalizer,
//          hf::make_pre_tokenizer, hf::make_decoder
//
// The stages of a Hugging Face tokenizer.json around its model (hf_tokenizer.h), built from
// their JSON objects and run as the `tokenizers` library runs them: the normalizer rewrites the
// text, the pre-tokenizer cuts it into pieces, the decoder turns token strings back into text.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mtron::data::hf {

struct Normalizer {
  virtual ~Normalizer() = default;
  virtual void apply(std::string& s) const = 0;
};

struct Piece {
  std::string text;
  bool first;
};

struct PreTokenizer {
  virtual ~PreTokenizer() = default;
  virtual void apply(std::vector<Piece>& pieces) const = 0;
};

struct Decoder {
  virtual ~Decoder() = default;
  virtual void apply(std::vector<std::string>& tokens) const = 0;
};

// Each from its tokenizer.json object ("normalizer", "pre_tokenizer", "decoder"); `where` names
// the file in errors (an unsupported type is one).
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const std::string& where);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const std::string& where);
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j, const std::string& where);

}  // namespace mtron::data::hf
