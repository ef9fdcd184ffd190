#include "mtron/data/hf_tokenizer.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "mtron/core/error.h"
#include "mtron/data/bpe.h"
#include "mtron/data/hf_pipeline.h"
#include "mtron/data/mapped_file.h"
#include "mtron/data/unicode.h"

namespace mtron::data {

namespace {

using json = nlohmann::json;
using hf::Decoder;
using hf::make_decoder;
using hf::make_normalizer;
using hf::make_pre_tokenizer;
using hf::Normalizer;
using hf::Piece;
using hf::PreTokenizer;

// A token id from the file: an integer in [0, 2^31). nlohmann's get<int>() on a float is a
// float-to-int conversion, undefined when out of range, hence the type check first.
int32_t token_id(const json& v, const std::string& path, const std::string& what) {
  MT_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < (int64_t(1) << 31),
           path, ": ", what, " has invalid id ", v.dump());
  return int32_t(v.get<int64_t>());
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
      const int64_t id = token_id(idj, path, "token '" + tok + "'");
      m.vocab[tok] = int32_t(id);
      max_id = std::max(max_id, id);
    }
    const json& added = j.value("added_tokens", json::array());
    for (const auto& a : added)
      max_id = std::max<int64_t>(max_id, token_id(a.at("id"), path, "an added token"));
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
      AddedToken t{a.at("content").get<std::string>(), token_id(a.at("id"), path, "an added token"),
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
            (seen_seq ? m.suffix_ids : m.prefix_ids)
                .push_back(token_id(id, path, "a special token"));
        }
      } else {
        MT_CHECK(type == "ByteLevel", path, ": unsupported post_processor type '", type, "'");
      }
    };
    post(j.value("post_processor", json()));
    for (const auto* ids : {&m.prefix_ids, &m.suffix_ids})
      for (int32_t id : *ids)
        MT_CHECK(std::size_t(id) < m.id_to_token.size() && !m.id_to_token[id].empty(), path,
                 ": post_processor special token id ", id, " is not in the vocabulary");

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
