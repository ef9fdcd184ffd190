// Data-layer benchmarks (bench/README.md, "Data"):
//
//   bench_data tokenize   <demo.jsonl> <gpt2-vocab.json> <gpt2-merges.txt>
//       GPT-2 BPE alone on one thread (no JSON, no I/O): MB/s and tokens/s, first pass (cold
//       word cache) and second pass (warm).
//   bench_data preprocess <demo.jsonl> <gpt2-vocab.json> <gpt2-merges.txt> [workers...]
//       the whole `mtron preprocess` pipeline (read, JSON, tokenize, write .bin/.idx) with each
//       worker count (default 1 2): MB/s and tokens/s of input.
//   bench_data index [GB]
//       synthesises GB (default 1) of uint16 tokens in documents of 1..2047 tokens, then times
//       opening/validating the dataset, building the GPT indices (seq 2048, 1 epoch and 3 epochs),
//       writing and reloading the index cache, and random sample reads.
#include <sys/resource.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "mtron/core/error.h"
#include "mtron/core/timer.h"
#include "mtron/data/gpt_dataset.h"
#include "mtron/data/indexed_dataset.h"
#include "mtron/data/preprocess.h"
#include "mtron/data/tokenizer.h"

using namespace mtron;
using namespace mtron::data;

namespace {

// CPU seconds (user + system) used by the process so far.
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;
}

std::string temp_dir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "mtron-bench-XXXXXX").string();
  return mkdtemp(tmpl.data());
}

int bench_tokenize(const std::string& jsonl, const std::string& vocab, const std::string& merges) {
  std::vector<std::string> texts;
  std::size_t bytes = 0;
  std::ifstream f(jsonl);
  for (std::string line; std::getline(f, line);) {
    texts.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
    bytes += texts.back().size();
  }
  TokenizerOptions o;
  o.type = "GPT2BPETokenizer";
  o.vocab_file = vocab;
  o.merge_file = merges;
  auto tok = make_tokenizer(o);
  std::vector<int32_t> ids;
  for (const char* pass : {"cold", "warm"}) {
    std::size_t tokens = 0;
    const double t0 = now_seconds();
    for (const auto& t : texts) {
      ids.clear();
      tok->encode(t, ids);
      tokens += ids.size();
    }
    const double dt = now_seconds() - t0;
    std::printf(
        "tokenize (GPT-2, 1 thread, %s cache): %.1f MB in %.2f s: %.2f MB/s, %.2f M tokens/s\n",
        pass, bytes / 1e6, dt, bytes / 1e6 / dt, tokens / 1e6 / dt);
  }
  return 0;
}

int bench_preprocess(const std::string& jsonl,
                     const std::string& vocab,
                     const std::string& merges,
                     std::vector<int> workers) {
  if (workers.empty()) workers = {1, 2};
  const std::string dir = temp_dir();
  for (int w : workers) {
    PreprocessOptions o;
    o.input = jsonl;
    o.output_prefix = dir + "/out";
    o.tokenizer.type = "GPT2BPETokenizer";
    o.tokenizer.vocab_file = vocab;
    o.tokenizer.merge_file = merges;
    o.append_eod = true;
    o.workers = w;
    o.progress = ProgressStyle::kNone;
    const double cpu0 = cpu_seconds();
    const PreprocessStats st = preprocess(o);
    const double cpu = cpu_seconds() - cpu0;
    std::printf(
        "preprocess (GPT-2, %d worker%s): %.1f MB, %lld documents in %.2f s: %.2f MB/s, %.2f M "
        "tokens/s; "
        "%.2f CPU s: %.2f MB per CPU-second; peak RSS %.0f MB\n",
        w, w > 1 ? "s" : "", st.input_bytes / 1e6, (long long)st.documents, st.seconds,
        st.input_bytes / 1e6 / st.seconds, st.tokens / 1e6 / st.seconds, cpu,
        st.input_bytes / 1e6 / cpu, peak_rss_mb());
  }
  std::filesystem::remove_all(dir);
  return 0;
}

int bench_index(double gb) {
  const std::string dir = temp_dir();
  const std::string prefix = dir + "/synthetic";
  const int64_t tokens_wanted = int64_t(gb * 1e9 / 2);  // uint16
  double t0 = now_seconds();
  {
    IndexedDatasetWriter w(prefix, TokenDType::kUInt16);
    std::mt19937 rng(1);
    std::vector<int32_t> doc;
    for (int64_t done = 0; done < tokens_wanted;) {
      doc.resize(1 + rng() % 2047);
      for (auto& t : doc) t = int32_t(rng() % 50257);
      w.add_document(doc);
      done += int64_t(doc.size());
    }
    w.finalize();
  }
  std::printf("index: wrote %.2f GB of uint16 tokens in %.1f s\n", gb, now_seconds() - t0);
  t0 = now_seconds();
  auto data = std::make_shared<IndexedDataset>(prefix);
  std::printf("index: open + validate (%lld documents, %lld tokens): %.3f s\n",
              (long long)data->num_sequences(), (long long)data->num_tokens(), now_seconds() - t0);
  const int64_t seq = 2048, per_epoch = (data->num_tokens() - 1) / seq;
  for (int64_t epochs : {1, 3}) {
    t0 = now_seconds();
    const GPTIndices ix =
        build_gpt_indices(*data, 0, data->num_sequences(), epochs * per_epoch, seq, 1234);
    std::printf("index: GPT indices, seq %lld, %lld epoch%s (%lld samples): %.3f s\n",
                (long long)seq, (long long)ix.num_epochs, ix.num_epochs > 1 ? "s" : "",
                (long long)ix.shuffle_index.size(), now_seconds() - t0);
  }
  const GPTDatasetConfig cfg{seq, 1234, dir + "/cache", true};
  t0 = now_seconds();
  GPTDataset built(data, 0, data->num_sequences(), per_epoch, Split::kTrain, cfg);
  std::printf("index: GPTDataset build + validate + write cache: %.3f s\n", now_seconds() - t0);
  t0 = now_seconds();
  GPTDataset loaded(data, 0, data->num_sequences(), per_epoch, Split::kTrain, cfg);
  std::printf("index: GPTDataset load cache + validate: %.3f s (from cache: %s)\n",
              now_seconds() - t0, loaded.loaded_from_cache() ? "yes" : "no");
  std::vector<int32_t> s(std::size_t(loaded.sample_length()));
  std::mt19937_64 rng(2);
  const int n = 20000;
  t0 = now_seconds();
  for (int i = 0; i < n; ++i) loaded.get(int64_t(rng() % uint64_t(loaded.size())), s.data());
  const double dt = now_seconds() - t0;
  std::printf("index: random sample reads: %.0f samples/s (%.2f GB/s of int32 tokens)\n", n / dt,
              n * double(s.size()) * 4 / dt / 1e9);
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "tokenize" && argc == 5) return bench_tokenize(argv[2], argv[3], argv[4]);
    if (mode == "preprocess" && argc >= 5) {
      std::vector<int> w;
      for (int i = 5; i < argc; ++i) w.push_back(std::atoi(argv[i]));
      return bench_preprocess(argv[2], argv[3], argv[4], w);
    }
    if (mode == "index") return bench_index(argc > 2 ? std::atof(argv[2]) : 1.0);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_data: %s\n", e.what());
    return 2;
  }
  std::fprintf(stderr,
               "usage: bench_data tokenize|preprocess <demo.jsonl> <vocab> <merges> [workers...]\n"
               "       bench_data index [GB]\n");
  return 2;
}
