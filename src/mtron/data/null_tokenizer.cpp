#include "mtron/data/null_tokenizer.h"

#include <charconv>

#include "mtron/core/error.h"

namespace mtron::data {

NullTokenizer::NullTokenizer(int64_t vocab_size,
                             std::optional<int64_t> eod_id,
                             std::optional<int64_t> pad_id)
    : vocab_size_(vocab_size) {
  MT_CHECK(vocab_size > 0 && vocab_size <= (int64_t(1) << 31),
           "--vocab-size must be in [1, 2^31] for NullTokenizer (got ", vocab_size, ")");
  const int64_t eod = eod_id.value_or(vocab_size - 1);
  MT_CHECK(eod >= 0 && eod < vocab_size, "--null-tokenizer-eod-id ", eod, " is outside [0, ",
           vocab_size, ")");
  const int64_t pad = pad_id.value_or(-1);
  MT_CHECK(pad >= -1 && pad < vocab_size, "--null-tokenizer-pad-id ", pad, " is outside [-1, ",
           vocab_size, ")");
  eod_ = int32_t(eod);
  pad_ = int32_t(pad);
}

std::optional<int32_t> NullTokenizer::pad() const {
  if (pad_ < 0) return std::nullopt;
  return pad_;
}

void NullTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::size_t pos = 0;
  while (true) {
    std::size_t end = text.find(' ', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view part = text.substr(pos, end - pos);
    // Python's int() ignores surrounding whitespace.
    while (!part.empty() && std::isspace(static_cast<unsigned char>(part.front())))
      part.remove_prefix(1);
    while (!part.empty() && std::isspace(static_cast<unsigned char>(part.back())))
      part.remove_suffix(1);
    if (!part.empty() && part.front() == '+') part.remove_prefix(1);
    int64_t v = -1;
    auto [p, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    MT_CHECK(ec == std::errc() && p == part.data() + part.size() && !part.empty(),
             "NullTokenizer: '", std::string(text.substr(pos, end - pos)),
             "' is not an integer token id (the text must be ids separated by spaces)");
    MT_CHECK(v >= 0 && v < vocab_size_, "NullTokenizer: token id ", v, " is outside [0, ",
             vocab_size_, ") (--vocab-size)");
    out.push_back(int32_t(v));
    if (end == text.size()) break;
    pos = end + 1;
  }
}

std::string NullTokenizer::decode(std::span<const int32_t> ids) const {
  std::string s;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ' ';
    s += std::to_string(ids[i]);
  }
  return s;
}

}  // namespace mtron::data
