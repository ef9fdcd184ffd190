#include "mtron/data/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <atomic>
#include <unordered_map>

#include "mtron/core/error.h"

namespace mtron::data {

namespace {

// Unicode White_Space (PropList.txt), Python's and Rust's `\s`.
constexpr const char* kWhiteSpace =
    R"(\t\n\x{0B}\f\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

std::atomic<uint64_t> g_next_regex_id{1};

// Per-thread PCRE2 scratch for one compiled pattern.
struct ThreadScratch {
  pcre2_match_data* md = nullptr;
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* ctx = nullptr;
  ~ThreadScratch() {
    if (md) pcre2_match_data_free(md);
    if (ctx) pcre2_match_context_free(ctx);
    if (stack) pcre2_jit_stack_free(stack);
  }
};

}  // namespace

std::string python_whitespace_pattern(std::string_view p) {
  std::string out;
  bool in_class = false;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (e == 'S') {
        MT_CHECK(!in_class, "regex '", std::string(p),
                 "': \\S inside a character class is not supported");
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out += c;
        out += e;
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

struct Regex::Impl {
  pcre2_code* code = nullptr;
  uint64_t id = 0;
  bool jit = false;

  ThreadScratch& scratch() const {
    thread_local std::unordered_map<uint64_t, ThreadScratch> per_thread;
    ThreadScratch& s = per_thread[id];
    if (!s.md) {
      s.md = pcre2_match_data_create_from_pattern(code, nullptr);
      s.ctx = pcre2_match_context_create(nullptr);
      if (jit) {
        s.stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
        pcre2_jit_stack_assign(s.ctx, nullptr, s.stack);
      }
    }
    return s;
  }
};

Regex::Regex(std::string_view pattern, const std::string& what) : impl_(std::make_unique<Impl>()) {
  const std::string p = python_whitespace_pattern(pattern);
  int err = 0;
  PCRE2_SIZE off = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(),
                              PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    MT_CHECK(false, what, ": cannot compile regex '", std::string(pattern), "' at offset ", off,
             ": ", reinterpret_cast<const char*>(msg));
  }
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
  impl_->id = g_next_regex_id++;
}

Regex::~Regex() {
  if (impl_ && impl_->code) pcre2_code_free(impl_->code);
}

void Regex::for_each_match(std::string_view text,
                           const std::function<void(std::size_t, std::size_t)>& fn) const {
  ThreadScratch& s = impl_->scratch();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t pos = 0;
  while (pos < text.size()) {
    const int rc = impl_->jit ? pcre2_jit_match(impl_->code, subject, text.size(), pos,
                                                PCRE2_NO_UTF_CHECK, s.md, s.ctx)
                              : pcre2_match(impl_->code, subject, text.size(), pos,
                                            PCRE2_NO_UTF_CHECK, s.md, s.ctx);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    MT_CHECK(rc >= 0, "regex match failed (PCRE2 error ", rc, ")");
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.md);
    const std::size_t b = ov[0], e = ov[1];
    if (e == b) {
      // Empty match: step over one code point so the scan always advances.
      std::size_t next = e + 1;
      while (next < text.size() && (static_cast<unsigned char>(text[next]) & 0xC0) == 0x80) ++next;
      pos = next;
      continue;
    }
    fn(b, e);
    pos = e;
  }
}

}  // namespace mtron::data
