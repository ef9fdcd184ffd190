#include "mtron/data/hf_tokenizer.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "mtron/core/error.h"
#include "mtron/data/bpe.h"
#include "mtron/data/mapped_file.h"
#include "mtron/data/regex.h"
#include "mtron/data/unicode.h"

namespace mtron::data {

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

struct Normalizer {
  virtual ~Normalizer() = default;
  virtual void apply(std::string& s) const = 0;
};

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

// ---------------------------------------------------------------------------------------------
// Pre-tokenizers. A piece remembers whether it starts the original text (Metaspace "first").

struct Piece {
  std::string text;
  bool first;
};

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

struct PreTokenizer {
  virtual ~PreTokenizer() = default;
  virtual void apply(std::vector<Piece>& pieces) const = 0;
};

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

// ---------------------------------------------------------------------------------------------
// Decoders: token strings in, token strings out; the result is their concatenation.

struct Decoder {
  virtual ~Decoder() = default;
  virtual void apply(std::vector<std::string>& tokens) const = 0;
};

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

// ---------------------------------------------------------------------------------------------
// Added tokens: matched leftmost-longest in the text before the model runs.

struct AddedToken {
  std::string content;
  int32_t id;
  bool lstrip, rstrip, single_word;
};

struct Segment {
  std::size_t b, e;
  int32_t added_id;  // -1: ordinary text
};

class AddedMatcher {
 public:
  void add(AddedToken t) {
    if (t.content.empty()) return;
    auto& bucket = by_first_[static_cast<unsigned char>(t.content[0])];
    bucket.push_back(tokens_.size());
    tokens_.push_back(std::move(t));
    std::stable_sort(bucket.begin(), bucket.end(), [&](std::size_t a, std::size_t b) {
      return tokens_[a].content.size() > tokens_[b].content.size();
    });
  }
  bool empty() const { return tokens_.empty(); }

  void split(std::string_view s, std::vector<Segment>& out) const {
    const auto word = [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
             (static_cast<unsigned char>(c) >= 0x80);
    };
    const auto space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
    std::size_t last = 0, i = 0;
    while (i < s.size()) {
      const auto& bucket = by_first_[static_cast<unsigned char>(s[i])];
      const AddedToken* hit = nullptr;
      for (std::size_t k : bucket) {
        const AddedToken& t = tokens_[k];
        if (s.compare(i, t.content.size(), t.content) != 0) continue;
        if (t.single_word && ((i > 0 && word(s[i - 1])) ||
                              (i + t.content.size() < s.size() && word(s[i + t.content.size()]))))
          continue;
        hit = &t;
        break;
      }
      if (!hit) {
        ++i;
        continue;
      }
      std::size_t b = i, e = i + hit->content.size();
      if (hit->lstrip)
        while (b > last && space(s[b - 1])) --b;
      if (hit->rstrip)
        while (e < s.size() && space(s[e])) ++e;
      if (b > last) out.push_back({last, b, -1});
      out.push_back({b, e, hit->id});
      last = i = e;
    }
    if (last < s.size()) out.push_back({last, s.size(), -1});
  }

 private:
  std::vector<AddedToken> tokens_;
  std::vector<std::size_t> by_first_[256];
};

std::string token_content(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content")) return j.at("content").get<std::string>();
  return {};
}

}  // namespace

// ---------------------------------------------------------------------------------------------

struct HfTokenizer::Impl {
  std::string path;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Decoder> decoder;
  AddedMatcher raw_added, normalized_added;

  // BPE model
  std::unordered_map<std::string, int32_t> vocab;
  std::vector<std::string> id_to_token;  // model vocab and added tokens
  BpeMerges merges;
  int32_t byte_tokens[256];
  bool byte_fallback = false, ignore_merges = false, fuse_unk = false;
  int32_t unk_id = -1;

  // post processor "single" template: ids before and after the sequence
  std::vector<int32_t> prefix_ids, suffix_ids;

  int32_t eod = -1, pad = -1;
  int64_t vocab_size = 0;
  uint64_t cache_owner = next_tokenizer_id();

  int32_t lookup(const std::string& token) const {
    auto it = vocab.find(token);
    return it == vocab.end() ? -1 : it->second;
  }

  void encode_piece(const std::string& piece, std::vector<int32_t>& out) const {
    if (ignore_merges) {
      const int32_t id = lookup(piece);
      if (id >= 0) {
        out.push_back(id);
        return;
      }
    }
    BpeWordCache& cache = BpeWordCache::for_thread(cache_owner);
    if (const auto* hit = cache.find(piece)) {
      out.insert(out.end(), hit->begin(), hit->end());
      return;
    }
    std::vector<int32_t> syms;
    std::size_t i = 0;
    bool last_unk = false;
    while (i < piece.size()) {
      const std::size_t b = i;
      utf8_next(piece, i);
      const std::string ch = piece.substr(b, i - b);
      const int32_t id = lookup(ch);
      if (id >= 0) {
        syms.push_back(id);
        last_unk = false;
        continue;
      }
      if (byte_fallback) {
        bool all = true;
        for (char c : ch) all = all && byte_tokens[static_cast<unsigned char>(c)] >= 0;
        if (all) {
          for (char c : ch) syms.push_back(byte_tokens[static_cast<unsigned char>(c)]);
          last_unk = false;
          continue;
        }
      }
      MT_CHECK(unk_id >= 0, path, ": character '", ch,
               "' is not in the vocabulary and the model has no unk_token");
      if (!(fuse_unk && last_unk)) syms.push_back(unk_id);
      last_unk = true;
    }
    merges.apply(syms);
    cache.insert(piece, syms);
    out.insert(out.end(), syms.begin(), syms.end());
  }

  void encode_text(std::string text, bool first, std::vector<int32_t>& out) const {
    if (normalizer) normalizer->apply(text);
    std::vector<Segment> segs;
    if (normalized_added.empty()) {
      segs.push_back({0, text.size(), -1});
    } else {
      normalized_added.split(text, segs);
    }
    for (const Segment& s : segs) {
      if (s.added_id >= 0) {
        out.push_back(s.added_id);
        continue;
      }
      std::vector<Piece> pieces{{text.substr(s.b, s.e - s.b), first && s.b == 0}};
      if (pre_tokenizer) pre_tokenizer->apply(pieces);
      for (const Piece& p : pieces) encode_piece(p.text, out);
    }
  }
};

HfTokenizer::~HfTokenizer() = default;

HfTokenizer::HfTokenizer(const std::string& text,
                         const std::string& config_text,
                         const std::string& path)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = path;
  json j, cfg;
  try {
    j = json::parse(text);
    if (!config_text.empty()) cfg = json::parse(config_text);
  } catch (const json::exception& e) {
    MT_CHECK(false, "--tokenizer-model ", path, ": not valid JSON (", e.what(), ")");
  }
  try {
    MT_CHECK(j.is_object() && j.contains("model"), "--tokenizer-model ", path,
             ": not a Hugging Face tokenizer.json (no \"model\")");
    const json& model = j.at("model");
    const std::string mtype = model.value("type", "BPE");
    MT_CHECK(mtype == "BPE", "--tokenizer-model ", path, ": model type '", mtype,
             "' is not supported (BPE only)");
    MT_CHECK(model.value("dropout", json()).is_null() || model.at("dropout").get<double>() == 0.0,
             path, ": BPE dropout is not supported");
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      const json v = model.value(k, json());
      MT_CHECK(v.is_null() || v.get<std::string>().empty(), path, ": BPE ", k, " is not supported");
    }
    m.byte_fallback = model.value("byte_fallback", false);
    m.ignore_merges = model.value("ignore_merges", false);
    m.fuse_unk = model.value("fuse_unk", false);

    const json& vocab = model.at("vocab");
    MT_CHECK(vocab.is_object(), path, ": model.vocab must be an object");
    int64_t max_id = -1;
    m.vocab.reserve(vocab.size());
    for (const auto& [tok, idj] : vocab.items()) {
      const int64_t id = idj.get<int64_t>();
      MT_CHECK(id >= 0 && id < (int64_t(1) << 31), path, ": token '", tok, "' has invalid id ", id);
      m.vocab[tok] = int32_t(id);
      max_id = std::max(max_id, id);
    }
    const json& added = j.value("added_tokens", json::array());
    for (const auto& a : added) max_id = std::max(max_id, a.at("id").get<int64_t>());
    // Ids are (nearly) dense in real files; a huge id would only make the id table huge.
    const int64_t entries = int64_t(vocab.size() + added.size());
    MT_CHECK(max_id < 2 * entries + 1024, path, ": token id ", max_id, " is far beyond the ",
             entries, " tokens of the file");
    m.id_to_token.assign(std::size_t(max_id + 1), std::string());
    for (const auto& [tok, id] : m.vocab) m.id_to_token[id] = tok;

    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      m.byte_tokens[b] = m.lookup(name);
    }
    const json unk = model.value("unk_token", json());
    if (unk.is_string()) m.unk_id = m.lookup(unk.get<std::string>());

    const json& merges = model.at("merges");
    int32_t rank = 0;
    for (const auto& mj : merges) {
      std::string a, b;
      if (mj.is_array()) {
        MT_CHECK(mj.size() == 2, path, ": merge ", rank, " is not a pair");
        a = mj[0].get<std::string>();
        b = mj[1].get<std::string>();
      } else {
        const std::string s = mj.get<std::string>();
        const auto sp = s.find(' ');
        MT_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos, path,
                 ": merge ", rank, " '", s, "' is not two tokens separated by one space");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      }
      const int32_t ia = m.lookup(a), ib = m.lookup(b), im = m.lookup(a + b);
      MT_CHECK(ia >= 0 && ib >= 0 && im >= 0, path, ": merge ", rank, " ('", a, "', '", b,
               "') uses or produces a token missing from the vocabulary");
      m.merges.add(ia, ib, im, rank);
      ++rank;
    }

    std::unordered_map<std::string, int32_t> added_ids;
    for (const auto& a : added) {
      AddedToken t{a.at("content").get<std::string>(), a.at("id").get<int32_t>(),
                   a.value("lstrip", false), a.value("rstrip", false),
                   a.value("single_word", false)};
      MT_CHECK(t.id >= 0, path, ": added token '", t.content, "' has a negative id");
      m.id_to_token[t.id] = t.content;
      added_ids[t.content] = t.id;
      if (a.value("normalized", false)) {
        m.normalized_added.add(t);
      } else {
        m.raw_added.add(t);
      }
    }
    // len(tokenizer): distinct token strings over the vocabulary and the added tokens.
    m.vocab_size = int64_t(m.vocab.size());
    for (const auto& [content, id] : added_ids)
      if (!m.vocab.count(content)) ++m.vocab_size;

    if (!j.value("normalizer", json()).is_null())
      m.normalizer = make_normalizer(j.at("normalizer"), path);
    if (!j.value("pre_tokenizer", json()).is_null())
      m.pre_tokenizer = make_pre_tokenizer(j.at("pre_tokenizer"), path);
    if (!j.value("decoder", json()).is_null()) m.decoder = make_decoder(j.at("decoder"), path);

    // Post processor: collect the special ids around the single sequence "A".
    const std::function<void(const json&)> post = [&](const json& p) {
      if (p.is_null()) return;
      const std::string type = p.value("type", "");
      if (type == "Sequence") {
        for (const auto& q : p.at("processors")) post(q);
      } else if (type == "TemplateProcessing") {
        bool seen_seq = false;
        for (const auto& item : p.at("single")) {
          if (item.contains("Sequence")) {
            seen_seq = true;
            continue;
          }
          const std::string name = item.at("SpecialToken").at("id").get<std::string>();
          const json& st = p.at("special_tokens").at(name);
          for (const auto& id : st.at("ids"))
            (seen_seq ? m.suffix_ids : m.prefix_ids).push_back(id.get<int32_t>());
        }
      } else {
        MT_CHECK(type == "ByteLevel", path, ": unsupported post_processor type '", type, "'");
      }
    };
    post(j.value("post_processor", json()));

    const auto special_id = [&](const char* key) -> int32_t {
      const std::string t = token_content(cfg.is_object() ? cfg.value(key, json()) : json());
      if (t.empty()) return -1;
      auto it = added_ids.find(t);
      if (it != added_ids.end()) return it->second;
      const int32_t id = m.lookup(t);
      MT_CHECK(id >= 0, path, ": ", key, " '", t, "' of tokenizer_config.json is not a token");
      return id;
    };
    m.eod = special_id("eos_token");
    m.pad = special_id("pad_token");
  } catch (const json::exception& e) {
    MT_CHECK(false, "--tokenizer-model ", path, ": malformed tokenizer.json (", e.what(), ")");
  }
}

std::unique_ptr<HfTokenizer> HfTokenizer::from_path(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  MT_CHECK(fs::exists(path, ec), "--tokenizer-model ", path, ": no such file or directory");
  const fs::path file =
      fs::is_directory(path, ec) ? fs::path(path) / "tokenizer.json" : fs::path(path);
  MT_CHECK(fs::exists(file, ec), "--tokenizer-model ", path, ": no tokenizer.json in this folder");
  const fs::path cfg = file.parent_path() / "tokenizer_config.json";
  return std::make_unique<HfTokenizer>(
      read_file(file.string()), fs::exists(cfg, ec) ? read_file(cfg.string()) : std::string(),
      file.string());
}

void HfTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  const std::size_t bad = utf8_first_invalid(text);
  MT_CHECK(bad == std::string_view::npos, "invalid UTF-8 at byte ", bad, " of the text");
  const Impl& m = *impl_;
  out.insert(out.end(), m.prefix_ids.begin(), m.prefix_ids.end());
  std::vector<Segment> segs;
  if (m.raw_added.empty()) {
    segs.push_back({0, text.size(), -1});
  } else {
    m.raw_added.split(text, segs);
  }
  for (const Segment& s : segs) {
    if (s.added_id >= 0) {
      out.push_back(s.added_id);
    } else {
      m.encode_text(std::string(text.substr(s.b, s.e - s.b)), s.b == 0, out);
    }
  }
  out.insert(out.end(), m.suffix_ids.begin(), m.suffix_ids.end());
}

std::string HfTokenizer::decode(std::span<const int32_t> ids) const {
  const Impl& m = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    MT_CHECK(id >= 0 && std::size_t(id) < m.id_to_token.size() && !m.id_to_token[id].empty(),
             "cannot decode token id ", id, ": not in ", m.path);
    tokens.push_back(m.id_to_token[id]);
  }
  if (m.decoder) m.decoder->apply(tokens);
  std::string s;
  for (const auto& t : tokens) s += t;
  return s;
}

int32_t HfTokenizer::eod() const {
  return impl_->eod;
}
int64_t HfTokenizer::vocab_size() const {
  return impl_->vocab_size;
}
std::optional<int32_t> HfTokenizer::pad() const {
  if (impl_->pad < 0) return std::nullopt;
  return impl_->pad;
}

}  // namespace mtron::data
