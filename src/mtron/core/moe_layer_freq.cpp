#include "mtron/core/moe_layer_freq.h"

#include <cctype>

#include "mtron/core/error.h"

namespace mtron {
namespace {

// A value of the expression: an integer, or a list of integers.
struct Value {
  bool list = false;
  int64_t n = 0;
  std::vector<int64_t> items;
};

// Recursive descent over expr := term ('+' term)*, term := atom ('*' atom)*,
// atom := integer | '(' expr ')' | '[' [expr (',' expr)*] ']' (list items are integers).
class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}

  Value parse() {
    Value v = expr();
    if (at_ < s_.size()) fail();
    return v;
  }

 private:
  static constexpr int64_t kMaxLength = int64_t(1) << 24;

  [[noreturn]] void fail() const { throw Error("Invalid pattern: " + s_); }
  bool eat(char c) {
    if (at_ < s_.size() && s_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }

  Value expr() {
    Value v = term();
    while (eat('+')) {
      const Value r = term();
      if (v.list != r.list) fail();
      if (v.list) {
        v.items.insert(v.items.end(), r.items.begin(), r.items.end());
        if (int64_t(v.items.size()) > kMaxLength) fail();
      } else {
        v.n += r.n;
      }
    }
    return v;
  }

  Value term() {
    Value v = atom();
    while (eat('*')) {
      const Value r = atom();
      if (v.list && r.list) fail();
      if (!v.list && !r.list) {
        v.n *= r.n;
        continue;
      }
      const Value& l = v.list ? v : r;
      const int64_t times = v.list ? r.n : v.n;
      if (times > 0 && int64_t(l.items.size()) * times > kMaxLength) fail();
      Value out;
      out.list = true;
      for (int64_t i = 0; i < times; ++i)
        out.items.insert(out.items.end(), l.items.begin(), l.items.end());
      v = std::move(out);
    }
    return v;
  }

  Value atom() {
    Value v;
    if (eat('(')) {
      v = expr();
      if (!eat(')')) fail();
      return v;
    }
    if (eat('[')) {
      v.list = true;
      if (eat(']')) return v;
      do {
        const Value item = expr();
        if (item.list) fail();
        v.items.push_back(item.n);
      } while (eat(','));
      if (!eat(']')) fail();
      return v;
    }
    if (at_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[at_]))) fail();
    while (at_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[at_]))) {
      v.n = v.n * 10 + (s_[at_++] - '0');
      if (v.n > kMaxLength) fail();
    }
    return v;
  }

  const std::string& s_;
  size_t at_ = 0;
};

}  // namespace

void parse_moe_layer_freq(const std::string& s, int64_t& freq, std::vector<int64_t>& pattern) {
  pattern.clear();
  freq = 1;
  if (s.find('[') == std::string::npos) {  // Megatron: int(x)
    size_t used = 0;
    try {
      freq = std::stoll(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    MT_CHECK(used > 0 && used == s.size(), "--moe-layer-freq: invalid int value: '", s, "'");
    return;
  }
  for (const char c : s) {
    const bool ok = std::isdigit(static_cast<unsigned char>(c)) || c == ',' || c == '[' ||
                    c == ']' || c == '(' || c == ')' || c == '+' || c == '*';
    if (!ok) throw Error("Invalid pattern: " + s);
  }
  const Value v = Parser(s).parse();
  if (!v.list || v.items.empty()) throw Error("Invalid pattern: " + s);
  pattern = v.items;
}

std::string moe_layer_freq_string(int64_t freq, const std::vector<int64_t>& pattern) {
  if (pattern.empty()) return std::to_string(freq);
  std::string s = "[";
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(pattern[i]);
  }
  s += ']';
  return s;
}

}  // namespace mtron
