// defines: utf8_valid, utf8_first_invalid, utf8_append, utf8_decode_replace, ByteUnicodeMap
//
// UTF-8 helpers for the tokenizers:
// - validation (the tokenizers take valid UTF-8 only, as Python's str does);
// - decoding of arbitrary bytes with invalid sequences replaced by U+FFFD exactly as Python's
//   bytes.decode("utf-8", errors="replace") does (one U+FFFD per maximal invalid subpart),
//   which is how Megatron's GPT-2 tokenizer detokenizes;
// - GPT-2's bytes_to_unicode table mapping each byte to a printable code point.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace mtron::data {

// Offset of the first byte that is not part of a valid UTF-8 sequence, or npos.
std::size_t utf8_first_invalid(std::string_view s);
inline bool utf8_valid(std::string_view s) {
  return utf8_first_invalid(s) == std::string_view::npos;
}

void utf8_append(std::string& out, char32_t cp);

// Decodes one code point at s[i] (s must be valid UTF-8); advances i.
char32_t utf8_next(std::string_view s, std::size_t& i);

// Python's bytes.decode("utf-8", errors="replace").
std::string utf8_decode_replace(std::string_view bytes);

// GPT-2's bytes_to_unicode(): printable bytes map to themselves, the other 68 to U+0100...
class ByteUnicodeMap {
 public:
  ByteUnicodeMap();
  char32_t to_unicode(uint8_t b) const { return fwd_[b]; }
  // The byte for a mapped code point, or -1 if cp is not in the table.
  int to_byte(char32_t cp) const { return cp < back_.size() ? back_[cp] : -1; }
  // Maps a string of mapped code points (a vocab entry) back to its bytes; false if a code
  // point is not in the table.
  bool decode(std::string_view mapped, std::string& bytes) const;
  std::string encode(std::string_view bytes) const;

 private:
  std::array<char32_t, 256> fwd_{};
  std::array<int16_t, 324> back_{};
};

}  // namespace mtron::data
