#include "mtron/data/hf_pipeline.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include "mtron/core/error.h"
#include "mtron/data/regex.h"
#include "mtron/data/unicode.h"

namespace mtron::data::hf {

namespace {

using json = nlohmann::json;

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  std::size_t pos = 0, hit;
  while ((hit = s.find(from, pos)) != std::string::npos) {
    out.append(s, pos, hit - pos);
    out.append(to);
    pos = hit + from.size();
  }
  if (pos == 0) return;
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

// A Hugging Face "pattern": {"String": literal} or {"Regex": pattern}.
struct Pattern {
  std::string literal;
  std::unique_ptr<Regex> regex;

  Pattern(const json& j, const std::string& where) {
    MT_CHECK(j.is_object(), where, ": pattern must be {\"String\": ...} or {\"Regex\": ...}");
    if (j.contains("String")) {
      literal = j.at("String").get<std::string>();
    } else if (j.contains("Regex")) {
      regex = std::make_unique<Regex>(j.at("Regex").get<std::string>(), where);
    } else {
      MT_CHECK(false, where, ": pattern must be {\"String\": ...} or {\"Regex\": ...}");
    }
  }
  // (begin, end) of each non-overlapping match.
  std::vector<std::pair<std::size_t, std::size_t>> matches(std::string_view s) const {
    std::vector<std::pair<std::size_t, std::size_t>> m;
    if (regex) {
      regex->for_each_match(s, [&](std::size_t b, std::size_t e) { m.emplace_back(b, e); });
    } else if (!literal.empty()) {
      for (std::size_t p = s.find(literal); p != std::string_view::npos;
           p = s.find(literal, p + literal.size()))
        m.emplace_back(p, p + literal.size());
    }
    return m;
  }
};

// ---------------------------------------------------------------------------------------------
// Normalizers

struct UnicodeNormalizer : Normalizer {
  const icu::Normalizer2* norm;
  explicit UnicodeNormalizer(const icu::Normalizer2* n) : norm(n) {}
  void apply(std::string& s) const override {
    if (is_ascii(s)) return;  // every normalization form leaves ASCII unchanged
    UErrorCode st = U_ZERO_ERROR;
    std::string out;
    icu::StringByteSink<std::string> sink(&out);
    norm->normalizeUTF8(0, icu::StringPiece(s.data(), int32_t(s.size())), sink, nullptr, st);
    MT_CHECK(U_SUCCESS(st), "Unicode normalization failed: ", u_errorName(st));
    s = std::move(out);
  }
};

struct Lowercase : Normalizer {
  void apply(std::string& s) const override {
    if (is_ascii(s)) {
      for (char& c : s)
        if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
      return;
    }
    icu::UnicodeString u = icu::UnicodeString::fromUTF8(s);
    u.toLower(icu::Locale::getRoot());
    s.clear();
    u.toUTF8String(s);
  }
};

struct Prepend : Normalizer {
  std::string prefix;
  void apply(std::string& s) const override {
    if (!s.empty()) s.insert(0, prefix);
  }
};

struct Replace : Normalizer {
  std::unique_ptr<Pattern> pattern;
  std::string content;
  void apply(std::string& s) const override {
    if (!pattern->regex) return replace_all(s, pattern->literal, content);
    const auto m = pattern->matches(s);
    if (m.empty()) return;
    std::string out;
    std::size_t last = 0;
    for (auto [b, e] : m) {
      out.append(s, last, b - last);
      out += content;
      last = e;
    }
    out.append(s, last, std::string::npos);
    s = std::move(out);
  }
};

struct Strip : Normalizer {
  bool left = true, right = true;
  void apply(std::string& s) const override {
    std::size_t b = 0, e = s.size();
    if (left)
      for (std::size_t i = 0; i < s.size();) {
        std::size_t j = i;
        if (!is_white_space(utf8_next(s, j))) break;
        b = i = j;
      }
    if (right)
      while (e > b) {
        std::size_t k = e - 1;
        while (k > b && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
        std::size_t j = k;
        if (!is_white_space(utf8_next(s, j))) break;
        e = k;
      }
    s = s.substr(b, e - b);
  }
};

struct NormalizerSequence : Normalizer {
  std::vector<std::unique_ptr<Normalizer>> steps;
  void apply(std::string& s) const override {
    for (const auto& n : steps) n->apply(s);
  }
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const json& j, const std::string& where) {
  const std::string type = j.value("type", "");
  UErrorCode st = U_ZERO_ERROR;
  std::unique_ptr<Normalizer> n;
  if (type == "Sequence") {
    auto seq = std::make_unique<NormalizerSequence>();
    for (const auto& s : j.at("normalizers")) seq->steps.push_back(make_normalizer(s, where));
    n = std::move(seq);
  } else if (type == "NFC") {
    n = std::make_unique<UnicodeNormalizer>(icu::Normalizer2::getNFCInstance(st));
  } else if (type == "NFD") {
    n = std::make_unique<UnicodeNormalizer>(icu::Normalizer2::getNFDInstance(st));
  } else if (type == "NFKC") {
    n = std::make_unique<UnicodeNormalizer>(icu::Normalizer2::getNFKCInstance(st));
  } else if (type == "NFKD") {
    n = std::make_unique<UnicodeNormalizer>(icu::Normalizer2::getNFKDInstance(st));
  } else if (type == "Lowercase") {
    n = std::make_unique<Lowercase>();
  } else if (type == "Prepend") {
    auto p = std::make_unique<Prepend>();
    p->prefix = j.at("prepend").get<std::string>();
    n = std::move(p);
  } else if (type == "Replace") {
    auto r = std::make_unique<Replace>();
    r->pattern = std::make_unique<Pattern>(j.at("pattern"), where + " normalizer Replace");
    r->content = j.at("content").get<std::string>();
    n = std::move(r);
  } else if (type == "Strip") {
    auto s = std::make_unique<Strip>();
    s->left = j.value("strip_left", true);
    s->right = j.value("strip_right", true);
    n = std::move(s);
  } else {
    MT_CHECK(false, where, ": unsupported normalizer type '", type, "'");
  }
  MT_CHECK(U_SUCCESS(st), where, ": ICU normalizer unavailable: ", u_errorName(st));
  return n;
}

namespace {

// ---------------------------------------------------------------------------------------------
// Pre-tokenizers. A piece remembers whether it starts the original text (Metaspace "first").

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

SplitBehavior parse_behavior(const std::string& b, const std::string& where) {
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  MT_CHECK(false, where, ": unknown split behavior '", b, "'");
  return SplitBehavior::kIsolated;
}

// Splits `p` at `matches` (sorted, non-overlapping) as Hugging Face's
// NormalizedString::split(pattern, behavior) does, appending the non-empty parts to `out`.
void split_piece(const Piece& p,
                 const std::vector<std::pair<std::size_t, std::size_t>>& matches,
                 SplitBehavior behavior,
                 bool invert,
                 std::vector<Piece>& out) {
  struct Part {
    std::size_t b, e;
    bool match;
  };
  std::vector<Part> parts;
  std::size_t last = 0;
  for (auto [b, e] : matches) {
    if (b > last) parts.push_back({last, b, invert});
    parts.push_back({b, e, !invert});
    last = e;
  }
  if (last < p.text.size()) parts.push_back({last, p.text.size(), invert});

  std::vector<std::pair<std::size_t, std::size_t>> spans;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Part& q : parts)
        if (!q.match) spans.emplace_back(q.b, q.e);
      break;
    case SplitBehavior::kIsolated:
      for (const Part& q : parts) spans.emplace_back(q.b, q.e);
      break;
    case SplitBehavior::kContiguous:
      for (const Part& q : parts) {
        if (q.match && !spans.empty() && parts[&q - parts.data() - 1].match)
          spans.back().second = q.e;
        else
          spans.emplace_back(q.b, q.e);
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Part& q : parts) {
        if (q.match && !spans.empty() && !parts[&q - parts.data() - 1].match)
          spans.back().second = q.e;
        else
          spans.emplace_back(q.b, q.e);
      }
      break;
    case SplitBehavior::kMergedWithNext: {
      bool pending = false;
      for (const Part& q : parts) {
        if (pending && !q.match) {
          spans.back().second = q.e;
          pending = false;
        } else {
          spans.emplace_back(q.b, q.e);
          pending = q.match;
        }
      }
      break;
    }
  }
  for (auto [b, e] : spans)
    if (e > b) out.push_back({p.text.substr(b, e - b), p.first && b == 0});
}

struct SplitPre : PreTokenizer {
  std::unique_ptr<Pattern> pattern;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  void apply(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (const Piece& p : pieces) split_piece(p, pattern->matches(p.text), behavior, invert, out);
    pieces = std::move(out);
  }
};

struct ByteLevelPre : PreTokenizer {
  bool add_prefix_space = false;
  std::unique_ptr<Regex> gpt2;  // set when use_regex
  ByteUnicodeMap bytes;
  void apply(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (Piece& p : pieces) {
      if (add_prefix_space && !p.text.starts_with(' ')) p.text.insert(0, 1, ' ');
      if (gpt2) {
        std::vector<std::pair<std::size_t, std::size_t>> m;
        gpt2->for_each_match(p.text, [&](std::size_t b, std::size_t e) { m.emplace_back(b, e); });
        split_piece(p, m, SplitBehavior::kIsolated, false, out);
      } else {
        out.push_back(std::move(p));
      }
    }
    for (Piece& p : out) p.text = bytes.encode(p.text);
    pieces = std::move(out);
  }
};

enum class PrependScheme { kAlways, kFirst, kNever };

PrependScheme parse_prepend_scheme(const json& j) {
  if (j.contains("prepend_scheme")) {
    const std::string s = j.at("prepend_scheme").get<std::string>();
    return s == "first"   ? PrependScheme::kFirst
           : s == "never" ? PrependScheme::kNever
                          : PrependScheme::kAlways;
  }
  return j.value("add_prefix_space", true) ? PrependScheme::kAlways : PrependScheme::kNever;
}

struct MetaspacePre : PreTokenizer {
  std::string replacement;
  PrependScheme scheme = PrependScheme::kAlways;
  bool split = true;
  void apply(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (Piece& p : pieces) {
      replace_all(p.text, " ", replacement);
      const bool prepend =
          scheme == PrependScheme::kAlways || (scheme == PrependScheme::kFirst && p.first);
      if (prepend && !p.text.starts_with(replacement)) p.text.insert(0, replacement);
      if (split) {
        std::vector<std::pair<std::size_t, std::size_t>> m;
        for (std::size_t q = p.text.find(replacement); q != std::string::npos;
             q = p.text.find(replacement, q + replacement.size()))
          m.emplace_back(q, q + replacement.size());
        split_piece(p, m, SplitBehavior::kMergedWithNext, false, out);
      } else {
        out.push_back(std::move(p));
      }
    }
    pieces = std::move(out);
  }
};

struct DigitsPre : PreTokenizer {
  bool individual = false;
  void apply(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (const Piece& p : pieces) {
      std::vector<std::pair<std::size_t, std::size_t>> m;
      for (std::size_t i = 0; i < p.text.size(); ++i)
        if (p.text[i] >= '0' && p.text[i] <= '9') m.emplace_back(i, i + 1);
      split_piece(p, m, individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, false,
                  out);
    }
    pieces = std::move(out);
  }
};

struct PreTokenizerSequence : PreTokenizer {
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  void apply(std::vector<Piece>& pieces) const override {
    for (const auto& s : steps) s->apply(pieces);
  }
};

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j, const std::string& where) {
  const std::string type = j.value("type", "");
  if (type == "Sequence") {
    auto seq = std::make_unique<PreTokenizerSequence>();
    for (const auto& s : j.at("pretokenizers")) seq->steps.push_back(make_pre_tokenizer(s, where));
    return seq;
  }
  if (type == "Split") {
    auto s = std::make_unique<SplitPre>();
    s->pattern = std::make_unique<Pattern>(j.at("pattern"), where + " pre_tokenizer Split");
    s->behavior = parse_behavior(j.value("behavior", "Isolated"), where);
    s->invert = j.value("invert", false);
    return s;
  }
  if (type == "ByteLevel") {
    auto b = std::make_unique<ByteLevelPre>();
    b->add_prefix_space = j.value("add_prefix_space", true);
    if (j.value("use_regex", true)) b->gpt2 = std::make_unique<Regex>(kGpt2Pattern, where);
    return b;
  }
  if (type == "Metaspace") {
    auto m = std::make_unique<MetaspacePre>();
    m->replacement = j.value("replacement", "\u2581");
    m->scheme = parse_prepend_scheme(j);
    m->split = j.value("split", true);
    return m;
  }
  if (type == "Digits") {
    auto d = std::make_unique<DigitsPre>();
    d->individual = j.value("individual_digits", false);
    return d;
  }
  MT_CHECK(false, where, ": unsupported pre_tokenizer type '", type, "'");
  return nullptr;
}

namespace {

// ---------------------------------------------------------------------------------------------
// Decoders: token strings in, token strings out; the result is their concatenation.

struct ByteLevelDec : Decoder {
  ByteUnicodeMap bytes;
  void apply(std::vector<std::string>& tokens) const override {
    std::string raw, tb;
    for (const std::string& t : tokens) raw += bytes.decode(t, tb) ? tb : t;
    tokens.assign(1, utf8_decode_replace(raw));
  }
};

struct ReplaceDec : Decoder {
  std::string from, to;
  void apply(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) replace_all(t, from, to);
  }
};

struct ByteFallbackDec : Decoder {
  static int byte_of(const std::string& t) {
    if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>') return -1;
    int v = 0;
    for (int k = 3; k < 5; ++k) {
      const char c = t[k];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) return -1;
      v = v * 16 + d;
    }
    return v;
  }
  void apply(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    const auto flush = [&] {
      if (pending.empty()) return;
      if (utf8_valid(pending)) {
        out.push_back(pending);
      } else {
        for (std::size_t k = 0; k < pending.size(); ++k) out.emplace_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (auto& t : tokens) {
      const int b = byte_of(t);
      if (b >= 0) {
        pending.push_back(char(b));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }
};

struct FuseDec : Decoder {
  void apply(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, all);
  }
};

struct StripDec : Decoder {
  std::string content;
  int start = 0, stop = 0;
  void apply(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      std::size_t b = 0, e = t.size();
      for (int k = 0; k < start && t.compare(b, content.size(), content) == 0 && b < e; ++k)
        b += content.size();
      for (int k = 0; k < stop && e >= b + content.size() &&
                      t.compare(e - content.size(), content.size(), content) == 0;
           ++k)
        e -= content.size();
      t = t.substr(b, e - b);
    }
  }
};

struct MetaspaceDec : Decoder {
  std::string replacement;
  PrependScheme scheme = PrependScheme::kAlways;
  void apply(std::vector<std::string>& tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i)
      replace_all(tokens[i], replacement, i == 0 && scheme != PrependScheme::kNever ? "" : " ");
  }
};

struct DecoderSequence : Decoder {
  std::vector<std::unique_ptr<Decoder>> steps;
  void apply(std::vector<std::string>& tokens) const override {
    for (const auto& s : steps) s->apply(tokens);
  }
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const json& j, const std::string& where) {
  const std::string type = j.value("type", "");
  if (type == "Sequence") {
    auto seq = std::make_unique<DecoderSequence>();
    for (const auto& s : j.at("decoders")) seq->steps.push_back(make_decoder(s, where));
    return seq;
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDec>();
  if (type == "Replace") {
    auto r = std::make_unique<ReplaceDec>();
    const json& p = j.at("pattern");
    MT_CHECK(p.contains("String"), where, ": decoder Replace supports String patterns only");
    r->from = p.at("String").get<std::string>();
    r->to = j.at("content").get<std::string>();
    return r;
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDec>();
  if (type == "Fuse") return std::make_unique<FuseDec>();
  if (type == "Strip") {
    auto s = std::make_unique<StripDec>();
    s->content = j.at("content").get<std::string>();
    s->start = j.value("start", 0);
    s->stop = j.value("stop", 0);
    return s;
  }
  if (type == "Metaspace") {
    auto m = std::make_unique<MetaspaceDec>();
    m->replacement = j.value("replacement", "\u2581");
    m->scheme = parse_prepend_scheme(j);
    return m;
  }
  MT_CHECK(false, where, ": unsupported decoder type '", type, "'");
  return nullptr;
}

}  // namespace mtron::data::hf
