#include "mtron/data/gpt2_tokenizer.h"

#include <nlohmann/json.hpp>
#include <unordered_map>

#include "mtron/core/error.h"

namespace mtron::data {

Gpt2Tokenizer::Gpt2Tokenizer(const std::string& vocab_json,
                             const std::string& merges_txt,
                             const std::string& vocab_path,
                             const std::string& merges_path)
    : pattern_(kGpt2Pattern, "GPT-2 pattern"), cache_owner_(next_tokenizer_id()) {
  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(vocab_json);
  } catch (const nlohmann::json::exception& e) {
    MT_CHECK(false, "--vocab-file ", vocab_path, ": not valid JSON (", e.what(), ")");
  }
  MT_CHECK(vocab.is_object() && !vocab.empty(), "--vocab-file ", vocab_path,
           ": expected a JSON object mapping tokens to ids");
  const std::size_t n = vocab.size();
  MT_CHECK(n < (std::size_t(1) << 31), "--vocab-file ", vocab_path, ": too many tokens");
  tokens_.assign(n, std::string());
  std::vector<bool> seen(n, false);
  std::unordered_map<std::string, int32_t> by_bytes;
  by_bytes.reserve(n);
  std::string bytes;
  for (const auto& [key, value] : vocab.items()) {
    MT_CHECK(value.is_number_integer(), "--vocab-file ", vocab_path, ": id of token '", key,
             "' is not an integer");
    const int64_t id = value.get<int64_t>();
    MT_CHECK(id >= 0 && uint64_t(id) < n, "--vocab-file ", vocab_path, ": id ", id, " of token '",
             key, "' is outside [0, ", n, "); ids must be 0..N-1");
    MT_CHECK(!seen[id], "--vocab-file ", vocab_path, ": id ", id, " is used twice");
    MT_CHECK(utf8_valid(key) && bytes_.decode(key, bytes), "--vocab-file ", vocab_path, ": token '",
             key, "' is not spelled in GPT-2's byte-to-unicode alphabet");
    seen[id] = true;
    tokens_[id] = bytes;
    by_bytes.emplace(bytes, int32_t(id));
  }
  for (int b = 0; b < 256; ++b) {
    auto it = by_bytes.find(std::string(1, char(b)));
    MT_CHECK(it != by_bytes.end(), "--vocab-file ", vocab_path, ": no token for byte ", b,
             " (a byte-level vocabulary has all 256)");
    byte_ids_[b] = it->second;
  }
  auto eod = by_bytes.find("<|endoftext|>");
  MT_CHECK(eod != by_bytes.end(), "--vocab-file ", vocab_path, ": no <|endoftext|> token");
  eod_ = eod->second;

  // Merges: skip a leading "#version" line; one "a b" pair per non-empty line.
  std::size_t pos = 0, line_no = 0;
  int32_t rank = 0;
  std::string left, right;
  while (pos < merges_txt.size()) {
    std::size_t end = merges_txt.find('\n', pos);
    if (end == std::string::npos) end = merges_txt.size();
    std::string_view line(merges_txt.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    const auto sp = line.find(' ');
    MT_CHECK(sp != std::string_view::npos && sp > 0 && sp + 1 < line.size() &&
                 line.find(' ', sp + 1) == std::string_view::npos,
             "--merge-file ", merges_path, " line ", line_no,
             ": expected two tokens separated by one space");
    const std::string_view a = line.substr(0, sp), b = line.substr(sp + 1);
    const bool ok =
        utf8_valid(a) && bytes_.decode(a, left) && utf8_valid(b) && bytes_.decode(b, right);
    MT_CHECK(ok, "--merge-file ", merges_path, " line ", line_no,
             ": token not spelled in GPT-2's byte-to-unicode alphabet");
    auto ia = by_bytes.find(left), ib = by_bytes.find(right), im = by_bytes.find(left + right);
    MT_CHECK(ia != by_bytes.end() && ib != by_bytes.end() && im != by_bytes.end(), "--merge-file ",
             merges_path, " line ", line_no, ": merge '", std::string(line),
             "' uses or produces a token missing from --vocab-file ", vocab_path);
    merges_.add(ia->second, ib->second, im->second, rank++);
  }
}

void Gpt2Tokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  const std::size_t bad = utf8_first_invalid(text);
  MT_CHECK(bad == std::string_view::npos, "invalid UTF-8 at byte ", bad, " of the text");
  BpeWordCache& cache = BpeWordCache::for_thread(cache_owner_);
  thread_local std::vector<int32_t> syms;
  pattern_.for_each_match(text, [&](std::size_t b, std::size_t e) {
    const std::string_view word = text.substr(b, e - b);
    if (word.size() == 1) {  // one byte: nothing to merge
      out.push_back(byte_ids_[static_cast<unsigned char>(word[0])]);
      return;
    }
    if (const auto* hit = cache.find(word)) {
      out.insert(out.end(), hit->begin(), hit->end());
      return;
    }
    syms.clear();
    for (char c : word) syms.push_back(byte_ids_[static_cast<unsigned char>(c)]);
    merges_.apply(syms);
    cache.insert(word, syms);
    out.insert(out.end(), syms.begin(), syms.end());
  });
}

std::string Gpt2Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string bytes;
  for (int32_t id : ids) {
    MT_CHECK(id >= 0 && std::size_t(id) < tokens_.size(), "cannot decode token id ", id,
             ": outside the GPT-2 vocabulary [0, ", tokens_.size(), ")");
    bytes += tokens_[id];
  }
  return utf8_decode_replace(bytes);
}

}  // namespace mtron::data
