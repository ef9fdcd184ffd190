#include "mtron/data/unicode.h"

namespace mtron::data {

namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 if invalid. Follows the Unicode
// well-formed byte sequence table (no overlongs, no surrogates, max U+10FFFF). On failure,
// `*subpart` receives the length of the maximal subpart (>= 1) that Python replaces by one
// U+FFFD.
std::size_t utf8_seq_len(std::string_view s, std::size_t i, std::size_t* subpart) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return 1;
  std::size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    if (subpart) *subpart = 1;
    return 0;
  }
  std::size_t k = 1;
  for (; k < need; ++k) {
    if (i + k >= s.size()) break;
    const auto b = static_cast<unsigned char>(s[i + k]);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) break;
  }
  if (k == need) return need;
  if (subpart) *subpart = k;
  return 0;
}

}  // namespace

std::size_t utf8_first_invalid(std::string_view s) {
  std::size_t i = 0;
  const std::size_t n = s.size();
  while (i < n) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      __builtin_memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= n) break;
    const std::size_t len = utf8_seq_len(s, i, nullptr);
    if (len == 0) return i;
    i += len;
  }
  return std::string_view::npos;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

char32_t utf8_next(std::string_view s, std::size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  std::size_t len = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
  char32_t cp = b0 & (0x7F >> len);
  for (std::size_t k = 1; k < len; ++k)
    cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += len;
  return cp;
}

std::string utf8_decode_replace(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  std::size_t i = 0;
  while (i < bytes.size()) {
    std::size_t subpart = 1;
    const std::size_t len = utf8_seq_len(bytes, i, &subpart);
    if (len) {
      out.append(bytes.substr(i, len));
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD
      i += subpart;
    }
  }
  return out;
}

ByteUnicodeMap::ByteUnicodeMap() {
  back_.fill(-1);
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    fwd_[b] = printable ? char32_t(b) : next++;
    back_[fwd_[b]] = int16_t(b);
  }
}

bool ByteUnicodeMap::decode(std::string_view mapped, std::string& bytes) const {
  bytes.clear();
  std::size_t i = 0;
  while (i < mapped.size()) {
    const int b = to_byte(utf8_next(mapped, i));
    if (b < 0) return false;
    bytes.push_back(char(b));
  }
  return true;
}

std::string ByteUnicodeMap::encode(std::string_view bytes) const {
  std::string out;
  for (char c : bytes) utf8_append(out, fwd_[static_cast<unsigned char>(c)]);
  return out;
}

}  // namespace mtron::data
