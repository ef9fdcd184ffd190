#include "mtron/data/preprocess.h"

#include <CLI/CLI.hpp>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "mtron/core/error.h"
#include "mtron/core/timer.h"
#include "mtron/data/indexed_dataset.h"
#include "mtron/data/line_reader.h"
#include "mtron/data/progress.h"
#include "mtron/data/unicode.h"

namespace mtron::data {

namespace {

bool is_text_input(const std::string& path) {
  for (const char* ext : {".txt", ".txt.gz", ".txt.zst"})
    if (path.ends_with(ext)) return true;
  return false;
}

// The tokenized form of one batch of lines.
struct EncodedBatch {
  struct Key {
    std::vector<int32_t> tokens;   // all documents of the batch, back to back
    std::vector<int32_t> lengths;  // all sequence lengths, back to back
  };
  std::vector<Key> keys;
  // Per line: number of sequences of each key (row-major [line][key]); -1 marks a bad line.
  std::vector<int32_t> nseq;
  std::vector<std::string> errors;  // per bad line, in order
  int64_t first_line = 1;
  std::size_t lines = 0;
  uint64_t bytes = 0, file_bytes = 0;
};

// Strips nlohmann's "[json.exception.parse_error.101] " prefix.
std::string json_message(const std::exception& e) {
  std::string m = e.what();
  if (m.starts_with("[json.exception.")) {
    const auto p = m.find("] ");
    if (p != std::string::npos) m = m.substr(p + 2);
  }
  return m;
}

class Encoder {
 public:
  Encoder(const PreprocessOptions& o, const Tokenizer& tok, bool text_input)
      : o_(o), tok_(tok), text_input_(text_input) {}

  void encode(const LineBatch& in, EncodedBatch& out) const {
    const std::size_t nk = o_.json_keys.size();
    out.keys.assign(nk, {});
    out.nseq.assign(in.size() * nk, 0);
    out.errors.clear();
    out.first_line = in.first_line;
    out.lines = in.size();
    std::vector<std::string> texts;
    for (std::size_t i = 0; i < in.size(); ++i) {
      std::string err;
      if (!encode_line(in.line(i), out, i, texts, err)) {
        for (std::size_t k = 0; k < nk; ++k) out.nseq[i * nk + k] = -1;
        out.errors.push_back(std::move(err));
      }
    }
  }

 private:
  // Tokenizes one line into `out` (rolled back on failure); false with `err` if malformed.
  bool encode_line(std::string_view line,
                   EncodedBatch& out,
                   std::size_t i,
                   std::vector<std::string>& texts,
                   std::string& err) const {
    const std::size_t nk = o_.json_keys.size();
    std::vector<std::size_t> tok_mark(nk), len_mark(nk);
    for (std::size_t k = 0; k < nk; ++k) {
      tok_mark[k] = out.keys[k].tokens.size();
      len_mark[k] = out.keys[k].lengths.size();
    }
    const auto fail = [&](std::string msg) {
      for (std::size_t k = 0; k < nk; ++k) {
        out.keys[k].tokens.resize(tok_mark[k]);
        out.keys[k].lengths.resize(len_mark[k]);
      }
      err = std::move(msg);
      return false;
    };
    nlohmann::json j;
    if (!text_input_) {
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        return fail("invalid JSON: " + json_message(e));
      }
      if (!j.is_object()) return fail("not a JSON object");
    }
    for (std::size_t k = 0; k < nk; ++k) {
      texts.clear();
      if (text_input_) {
        const std::size_t bad = utf8_first_invalid(line);
        if (bad != std::string_view::npos) return fail(str("invalid UTF-8 at byte ", bad));
        texts.emplace_back(line);
      } else {
        const std::string& key = o_.json_keys[k];
        auto it = j.find(key);
        if (it == j.end()) return fail("no key \"" + key + "\" (--json-keys)");
        if (it->is_string()) {
          texts.push_back(it->get<std::string>());
        } else if (it->is_array()) {
          for (const auto& s : *it) {
            if (!s.is_string()) return fail("\"" + key + "\" is a list holding a non-string");
            texts.push_back(s.get<std::string>());
          }
        } else {
          return fail("\"" + key + "\" is not a string or a list of strings");
        }
      }
      EncodedBatch::Key& kout = out.keys[k];
      int32_t nseq = 0;
      try {
        for (const std::string& t : texts) {
          const std::size_t before = kout.tokens.size();
          tok_.encode(t, kout.tokens);
          const std::size_t n = kout.tokens.size() - before;
          if (n > 0) {  // Megatron drops sentences that tokenize to nothing
            MT_CHECK(n <= 0x7fffffff, "document too long for the format");
            kout.lengths.push_back(int32_t(n));
            ++nseq;
          }
        }
      } catch (const Error& e) {
        return fail(e.what());
      }
      if (nseq > 0 && o_.append_eod) {
        kout.tokens.push_back(tok_.eod());
        ++kout.lengths.back();
      }
      out.nseq[i * nk + k] = nseq;
    }
    return true;
  }

  const PreprocessOptions& o_;
  const Tokenizer& tok_;
  bool text_input_;
};

// Reader -> workers -> writer with a bound on the batches in flight.
class Pipeline {
 public:
  Pipeline(LineReader& reader, const Encoder& enc, int workers)
      : reader_(reader), enc_(enc), max_in_flight_(std::size_t(2 * workers + 2)) {
    threads_.emplace_back([this] { read_loop(); });
    for (int w = 0; w < workers; ++w) threads_.emplace_back([this] { work_loop(); });
  }
  ~Pipeline() {
    {
      std::lock_guard<std::mutex> l(m_);
      abort_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  // The next batch in input order; false at the end. Rethrows a reader/worker failure.
  bool next(EncodedBatch& out) {
    std::unique_lock<std::mutex> l(m_);
    cv_.wait(l, [&] {
      return error_ || done_.count(next_out_) || (read_done_ && next_out_ == read_count_);
    });
    if (error_) std::rethrow_exception(error_);
    if (!done_.count(next_out_)) return false;
    out = std::move(done_[next_out_]);
    done_.erase(next_out_++);
    --in_flight_;
    cv_.notify_all();
    return true;
  }

 private:
  void fail(std::exception_ptr e) {
    std::lock_guard<std::mutex> l(m_);
    if (!error_) error_ = e;
    abort_ = true;
    cv_.notify_all();
  }

  void read_loop() {
    try {
      while (true) {
        {
          std::unique_lock<std::mutex> l(m_);
          cv_.wait(l, [&] { return abort_ || in_flight_ < max_in_flight_; });
          if (abort_) return;
        }
        auto batch = std::make_unique<LineBatch>();
        const bool got = reader_.next(*batch);
        std::lock_guard<std::mutex> l(m_);
        if (!got) {
          read_done_ = true;
          cv_.notify_all();
          return;
        }
        todo_.push_back(
            {read_count_++, std::move(batch), reader_.bytes_read(), reader_.file_bytes_read()});
        ++in_flight_;
        cv_.notify_all();
      }
    } catch (...) {
      fail(std::current_exception());
    }
  }

  void work_loop() {
    try {
      while (true) {
        Job job;
        {
          std::unique_lock<std::mutex> l(m_);
          cv_.wait(l, [&] { return abort_ || !todo_.empty() || read_done_; });
          if (abort_ || todo_.empty()) return;
          job = std::move(todo_.front());
          todo_.pop_front();
        }
        EncodedBatch out;
        enc_.encode(*job.batch, out);
        out.bytes = job.bytes;
        out.file_bytes = job.file_bytes;
        std::lock_guard<std::mutex> l(m_);
        done_[job.index] = std::move(out);
        cv_.notify_all();
      }
    } catch (...) {
      fail(std::current_exception());
    }
  }

  struct Job {
    std::size_t index = 0;
    std::unique_ptr<LineBatch> batch;
    uint64_t bytes = 0, file_bytes = 0;  // reader position after this batch
  };

  LineReader& reader_;
  const Encoder& enc_;
  const std::size_t max_in_flight_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Job> todo_;
  std::map<std::size_t, EncodedBatch> done_;
  std::size_t read_count_ = 0, next_out_ = 0, in_flight_ = 0;
  bool read_done_ = false, abort_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> threads_;
};

std::string human_bytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) {
    b /= 1000;
    ++u;
  }
  char s[32];
  std::snprintf(s, sizeof(s), u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return s;
}

}  // namespace

PreprocessStats preprocess(const PreprocessOptions& o) {
  MT_CHECK(!o.input.empty(), "--input is required");
  MT_CHECK(!o.output_prefix.empty(), "--output-prefix is required");
  MT_CHECK(!o.json_keys.empty(), "--json-keys needs at least one key");
  MT_CHECK(o.workers >= 1, "--workers must be >= 1 (got ", o.workers, ")");
  const bool text_input = is_text_input(o.input);
  MT_CHECK(!text_input || o.json_keys.size() == 1,
           "--json-keys: a .txt input has one text per line, so only one key can be given");

  const double t0 = now_seconds();
  auto tok = make_tokenizer(o.tokenizer);
  MT_CHECK(!o.append_eod || tok->eod() >= 0, "--append-eod: ", tok->type(),
           " has no end-of-document token");
  LineReader reader(o.input);
  const TokenDType dtype = optimal_token_dtype(tok->vocab_size());

  // The prefix's folder is created, as Megatron's preprocess_data.py users expect of
  // `--output-prefix data/corpus` on a fresh checkout.
  const std::filesystem::path folder = std::filesystem::path(o.output_prefix).parent_path();
  if (!folder.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(folder, ec);
    MT_CHECK(!ec, "--output-prefix ", o.output_prefix, ": cannot create ", folder.string(), ": ",
             ec.message());
  }
  PreprocessStats st;
  std::vector<std::unique_ptr<IndexedDatasetWriter>> writers;
  for (const auto& key : o.json_keys) {
    st.outputs.push_back(o.output_prefix + "_" + key + "_document");
    writers.push_back(std::make_unique<IndexedDatasetWriter>(st.outputs.back(), dtype));
  }
  const Progress::Style style = o.progress == ProgressStyle::kAuto    ? Progress::auto_style()
                                : o.progress == ProgressStyle::kBar   ? Progress::Style::kBar
                                : o.progress == ProgressStyle::kLines ? Progress::Style::kLines
                                                                      : Progress::Style::kNone;
  if (style != Progress::Style::kNone) {
    const char* comp = reader.compression() == Compression::kGzip   ? ", gzip"
                       : reader.compression() == Compression::kZstd ? ", zstd"
                                                                    : "";
    std::fprintf(
        stderr, "preprocess: %s (%s%s, %s) -> %s; %s (vocab %lld, eod %d), %s tokens, %d workers\n",
        o.input.c_str(), human_bytes(double(reader.file_size())).c_str(), comp,
        text_input ? "text lines" : "JSON lines", st.outputs[0].c_str(), tok->type().c_str(),
        (long long)tok->vocab_size(), tok->eod(), token_dtype_name(dtype), o.workers);
  }
  Progress progress(style, "preprocess", reader.file_size(), o.log_interval);

  Encoder enc(o, *tok, text_input);
  const std::size_t nk = o.json_keys.size();
  int64_t reported = 0;
  {
    Pipeline pipe(reader, enc, o.workers);
    EncodedBatch b;
    while (pipe.next(b)) {
      std::vector<std::size_t> tok_pos(nk, 0), len_pos(nk, 0);
      std::size_t err = 0;
      for (std::size_t i = 0; i < b.lines; ++i) {
        if (b.nseq[i * nk] < 0) {
          const std::string where = str(o.input, ":", b.first_line + int64_t(i), ": ");
          MT_CHECK(o.skip_malformed, where, b.errors[err],
                   " (--skip-malformed-lines skips such lines)");
          if (reported++ < 20)
            std::fprintf(stderr, "preprocess: skipped %s%s\n", where.c_str(),
                         b.errors[err].c_str());
          ++err;
          ++st.skipped;
          continue;
        }
        for (std::size_t k = 0; k < nk; ++k) {
          const auto& kb = b.keys[k];
          const int32_t ns = b.nseq[i * nk + k];
          int64_t ntok = 0;
          for (int32_t s = 0; s < ns; ++s) ntok += kb.lengths[len_pos[k] + s];
          writers[k]->add_document(std::span(kb.tokens.data() + tok_pos[k], std::size_t(ntok)),
                                   std::span(kb.lengths.data() + len_pos[k], std::size_t(ns)));
          tok_pos[k] += std::size_t(ntok);
          len_pos[k] += std::size_t(ns);
          st.tokens += ntok;
          if (k == 0 && ntok == 0) ++st.empty;
        }
        ++st.documents;
      }
      st.input_bytes = b.bytes;
      progress.update(st.documents + st.skipped, b.bytes, b.file_bytes);
    }
  }
  for (auto& w : writers) w->finalize();
  progress.finish();
  if (st.skipped > 20)
    std::fprintf(stderr, "preprocess: ... %lld malformed lines skipped in all\n",
                 (long long)st.skipped);
  st.seconds = now_seconds() - t0;
  return st;
}

int preprocess_main(int argc, char** argv) {
  CLI::App app{"mtron preprocess: JSONL or text -> Megatron .bin/.idx token files",
               "mtron preprocess"};
  PreprocessOptions o;
  bool split_sentences = false, keep_newlines = false, keep_sequential = false,
       find_optimal = false;
  std::string lang = "english", progress = "auto";
  int partitions = 1, vocab_extra_ids = 0;
  int64_t vocab_size = 0, null_eod = -1, null_pad = -1;
  o.workers = int(std::max(1u, std::thread::hardware_concurrency()));

  app.add_option("--input", o.input, "input file: .jsonl/.json (or .txt), optionally .gz/.zst")
      ->required();
  app.add_option("--json-keys", o.json_keys, "JSON keys to extract (one output per key)")
      ->capture_default_str();
  app.add_option("--output-prefix", o.output_prefix, "writes <prefix>_<key>_document.{bin,idx}")
      ->required();
  app.add_flag("--append-eod", o.append_eod, "append the end-of-document token to each document");
  app.add_option("--workers", o.workers, "tokenizer threads")->capture_default_str();
  app.add_option("--log-interval", o.log_interval,
                 "documents between progress lines (non-terminal)")
      ->capture_default_str();
  app.add_option("--tokenizer-type", o.tokenizer.type,
                 "GPT2BPETokenizer, SentencePieceTokenizer, GPTSentencePieceTokenizer, "
                 "HuggingFaceTokenizer, NullTokenizer");
  app.add_option("--vocab-file", o.tokenizer.vocab_file, "GPT-2 vocab JSON");
  app.add_option("--merge-file", o.tokenizer.merge_file, "GPT-2 merges text");
  app.add_option("--tokenizer-model", o.tokenizer.model,
                 "SentencePiece model, or tokenizer.json (or its folder)");
  app.add_option("--vocab-size", vocab_size, "NullTokenizer vocabulary size");
  app.add_option("--null-tokenizer-eod-id", null_eod,
                 "NullTokenizer EOD id (default vocab-size - 1)");
  app.add_option("--null-tokenizer-pad-id", null_pad, "NullTokenizer pad id (default -1: none)");
  app.add_option("--vocab-extra-ids", vocab_extra_ids, "not supported (must be 0)");
  app.add_flag("--skip-malformed-lines", o.skip_malformed,
               "skip (and count) malformed lines instead of stopping");
  app.add_option("--progress", progress,
                 "auto (bar on a terminal, lines otherwise), bar, lines, none")
      ->check(CLI::IsMember({"auto", "bar", "lines", "none"}))
      ->capture_default_str();
  // Megatron flags accepted for compatibility.
  app.add_flag("--split-sentences", split_sentences, "not supported (needs NLTK)");
  app.add_flag("--keep-newlines", keep_newlines, "only meaningful with --split-sentences");
  app.add_option("--lang", lang, "only meaningful with --split-sentences");
  app.add_option("--partitions", partitions,
                 "must be 1 (mtron uses --workers threads on one file)");
  app.add_flag("--keep-sequential-samples", keep_sequential, "always true in mtron");
  app.add_flag("--find-optimal-num-workers", find_optimal, "not supported");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "mtron preprocess: error: %s\n", e.what());
    return 2;
  }
  try {
    MT_CHECK(!split_sentences,
             "--split-sentences is not supported (Megatron uses NLTK for it); give pre-split "
             "sentences as a JSON list of strings instead");
    MT_CHECK(!find_optimal, "--find-optimal-num-workers is not supported");
    MT_CHECK(
        partitions == 1, "--partitions ", partitions,
        " is not supported: mtron tokenizes one input with --workers threads (use --partitions 1)");
    MT_CHECK(vocab_extra_ids == 0, "--vocab-extra-ids is not supported");
    if (app.count("--vocab-size")) o.tokenizer.vocab_size = vocab_size;
    if (app.count("--null-tokenizer-eod-id")) o.tokenizer.null_eod_id = null_eod;
    if (app.count("--null-tokenizer-pad-id")) o.tokenizer.null_pad_id = null_pad;
    o.progress = progress == "bar"     ? ProgressStyle::kBar
                 : progress == "lines" ? ProgressStyle::kLines
                 : progress == "none"  ? ProgressStyle::kNone
                                       : ProgressStyle::kAuto;
    const PreprocessStats st = preprocess(o);
    std::fprintf(
        stderr,
        "preprocess: done in %.1f s: %lld documents (%lld skipped, %lld empty), %lld tokens, "
        "%s read (%.2f MB/s, %.2f M tokens/s)\n",
        st.seconds, (long long)st.documents, (long long)st.skipped, (long long)st.empty,
        (long long)st.tokens, human_bytes(double(st.input_bytes)).c_str(),
        st.input_bytes / st.seconds / 1e6, st.tokens / st.seconds / 1e6);
    for (const auto& p : st.outputs)
      std::fprintf(stderr, "preprocess: wrote %s.bin and %s.idx\n", p.c_str(), p.c_str());
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "mtron preprocess: error: %s\n", e.what());
    return 2;
  }
}

}  // namespace mtron::data
