// defines: Regex, kGpt2Pattern, python_whitespace_pattern
//
// A compiled PCRE2 pattern (UTF + Unicode properties, JIT) used to pre-tokenize text. Matching
// is thread-safe: each thread keeps its own match data and JIT stack.
//
// `\s` differs between regex engines (PCRE2 adds U+180E; JavaScript adds U+FEFF and drops
// U+0085). Python's `regex` module (Megatron's GPT-2 tokenizer) and the Rust `tokenizers`
// library use the Unicode White_Space property, so patterns are rewritten to spell `\s`/`\S`
// as that exact set before compiling (python_whitespace_pattern).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace mtron::data {

// GPT-2's pre-tokenization pattern (OpenAI encoder.py, Megatron gpt2_tokenization.py).
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Rewrites \s and \S to the Unicode White_Space set (inside and outside classes).
std::string python_whitespace_pattern(std::string_view pattern);

class Regex {
 public:
  // Compiles `pattern` (after python_whitespace_pattern); `what` names its origin in errors.
  Regex(std::string_view pattern, const std::string& what);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls fn(begin, end) for each successive non-overlapping match in `text`, which must be
  // valid UTF-8 (validated by the caller once, not per match).
  void for_each_match(std::string_view text,
                      const std::function<void(std::size_t, std::size_t)>& fn) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mtron::data
