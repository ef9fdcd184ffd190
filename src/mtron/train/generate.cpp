#include "mtron/train/generate.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "mtron/checkpoint/whole_model.h"
#include "mtron/core/log.h"
#include "mtron/core/philox.h"
#include "mtron/core/timer.h"
#include "mtron/parallel/launch.h"

namespace mtron::train {

int32_t sample_token(const float* logits, int64_t vocab, const SamplingOptions& o, double u) {
  MT_ASSERT(vocab >= 1, "empty vocabulary");
  if (o.temperature <= 0.0f || o.top_k == 1) {
    return int32_t(std::max_element(logits, logits + vocab) - logits);
  }
  // Candidates by decreasing logit (ties: lower id first), the top k of them when limited.
  std::vector<int32_t> idx(static_cast<size_t>(vocab));
  std::iota(idx.begin(), idx.end(), 0);
  auto before = [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  };
  const int64_t k = o.top_k > 0 ? std::min(o.top_k, vocab) : vocab;
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), before);
  idx.resize(size_t(k));
  std::vector<double> p(idx.size());
  const double mx = logits[idx[0]], t = o.temperature;
  double sum = 0;
  for (size_t i = 0; i < idx.size(); ++i) sum += p[i] = std::exp((logits[idx[i]] - mx) / t);
  size_t n = idx.size();
  if (o.top_p > 0.0f) {
    // Keep the smallest prefix whose probability reaches top_p (at least one token).
    double c = 0;
    for (n = 0; n < idx.size();) {
      c += p[n++] / sum;
      if (c >= double(o.top_p)) break;
    }
    sum = std::accumulate(p.begin(), p.begin() + long(n), 0.0);
  }
  double c = 0;
  for (size_t i = 0; i < n; ++i) {
    c += p[i] / sum;
    if (u < c) return idx[i];
  }
  return idx[n - 1];
}

TextCodec make_text_codec(const checkpoint::TokenizerRecord& t, int64_t vocab_size) {
  data::TokenizerOptions o;
  o.type = t.type.empty() ? "NullTokenizer" : t.type;
  o.vocab_file = t.vocab_file;
  o.merge_file = t.merge_file;
  o.model = t.model;
  if (o.type == "NullTokenizer") o.vocab_size = vocab_size;
  TextCodec c{data::make_tokenizer(o)};
  MT_CHECK(c.tokenizer->vocab_size() == vocab_size, "tokenizer ", o.type, " has ",
           c.tokenizer->vocab_size(), " tokens but the model's vocabulary is ", vocab_size,
           " (pass the tokenizer the model was trained with)");
  return c;
}

namespace {

// "3 17 5" -> ids in [0, vocab).
std::vector<int32_t> parse_ids(const std::string& text, int64_t vocab) {
  std::vector<int32_t> ids;
  std::istringstream in(text);
  std::string w;
  while (in >> w) {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(w, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    MT_CHECK(used == w.size() && v >= 0 && v < vocab, "--prompt-ids: '", w,
             "' is not a token id in [0, ", vocab, ")");
    ids.push_back(int32_t(v));
  }
  return ids;
}

}  // namespace

std::vector<int32_t> generate(model::InferenceModel& m,
                              std::span<const int32_t> prompt,
                              int64_t vocab_size,
                              int64_t max_new,
                              const SamplingOptions& o,
                              uint64_t seed,
                              std::optional<int32_t> stop) {
  MT_CHECK(!prompt.empty(), "the prompt is empty");
  std::vector<float> logits(static_cast<size_t>(m.padded_vocab()));
  std::vector<int32_t> out;
  const PhiloxKey key = rng_key(seed, "generate");
  m.reset();
  m.forward(prompt.data(), int64_t(prompt.size()), logits.data(), false);
  for (int64_t i = 0; i < max_new; ++i) {
    const uint64_t step = uint64_t(prompt.size()) + uint64_t(i);
    const double u = double(u64_at(key, step) >> 11) * 0x1.0p-53;
    const int32_t t = sample_token(logits.data(), vocab_size, o, u);
    out.push_back(t);
    if ((stop && t == *stop) || i + 1 == max_new) break;
    m.forward(&t, 1, logits.data(), false);
  }
  return out;
}

int generate_main(int argc, char** argv) {
  return run_main(argc, argv, [&](Launch& launch) {
    log_init(launch.rank(), launch.size());
    CLI::App app{"mtron generate: sample text from a checkpoint (KV cache, one process)."};
    app.name("mtron generate");
    app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    std::string load, prompt, prompt_ids;
    int64_t max_new = 64;
    SamplingOptions o;
    uint64_t seed = 1234;
    bool ignore_eos = false, print_ids = false;
    checkpoint::TokenizerRecord tok;
    app.add_option("--load", load, "Checkpoint (a --save directory or an iter_* directory)")
        ->required();
    auto* p = app.add_option("--prompt", prompt, "Prompt text");
    app.add_option("--prompt-ids", prompt_ids, "Prompt as space-separated token ids")->excludes(p);
    app.add_option("--max-new-tokens", max_new, "Tokens to generate (default 64)");
    app.add_option("--temperature", o.temperature, "Softmax temperature; 0: greedy (default 1)");
    app.add_option("--top-k", o.top_k, "Sample among the k most likely tokens; 0: all");
    app.add_option("--top-p", o.top_p, "Nucleus sampling threshold; 0: off");
    app.add_option("--seed", seed, "Random seed (default 1234)");
    app.add_flag("--ignore-eos", ignore_eos, "Do not stop at the end-of-document token");
    app.add_flag("--print-ids", print_ids, "Print token ids instead of text");
    app.add_option("--tokenizer-type", tok.type, "Tokenizer (default: the checkpoint's)");
    app.add_option("--vocab-file", tok.vocab_file, "GPT-2 vocab.json");
    app.add_option("--merge-file", tok.merge_file, "GPT-2 merges.txt");
    app.add_option("--tokenizer-model", tok.model, "SentencePiece/HF tokenizer file");
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp&) {
      std::fputs(app.help().c_str(), stdout);
      return 0;
    } catch (const CLI::ParseError& e) {
      throw Error(e.what());
    }
    MT_CHECK(!prompt.empty() || !prompt_ids.empty(), "pass --prompt TEXT or --prompt-ids IDS");
    MT_CHECK(max_new >= 1, "--max-new-tokens must be positive (got ", max_new, ")");
    MT_CHECK(o.temperature >= 0, "--temperature must be >= 0 (got ", o.temperature, ")");
    MT_CHECK(o.top_k >= 0, "--top-k must be >= 0 (got ", o.top_k, ")");
    MT_CHECK(o.top_p >= 0 && o.top_p <= 1, "--top-p must be in [0, 1] (got ", o.top_p, ")");

    auto m = checkpoint::load_whole_model(load);
    const int64_t V = m->cfg.vocab_size;
    checkpoint::TokenizerRecord rec = m->manifest.tokenizer;
    if (!tok.type.empty()) rec = tok;
    const TextCodec codec = make_text_codec(rec, V);
    const std::vector<int32_t> ids =
        prompt_ids.empty() ? codec.encode(prompt) : parse_ids(prompt_ids, V);
    MT_CHECK(!ids.empty(), "the prompt has no tokens");
    int64_t cap = int64_t(ids.size()) + max_new;
    if (m->cfg.position_embedding_type == PositionEmbedding::kLearnedAbsolute) {
      MT_CHECK(int64_t(ids.size()) < m->cfg.max_position_embeddings, "the prompt (", ids.size(),
               " tokens) fills the model's ", m->cfg.max_position_embeddings, " positions");
      cap = std::min(cap, m->cfg.max_position_embeddings);
    }
    model::InferenceModel im(m->cfg, *m->chunk, cap);
    const double t0 = now_seconds();
    const std::vector<int32_t> out =
        generate(im, ids, V, cap - int64_t(ids.size()), o, seed,
                 ignore_eos ? std::nullopt : std::optional<int32_t>(codec.eod()));
    const double dt = now_seconds() - t0;
    std::vector<int32_t> all = ids;
    all.insert(all.end(), out.begin(), out.end());
    std::string text;
    if (print_ids) {
      for (size_t i = 0; i < all.size(); ++i) text += (i ? " " : "") + std::to_string(all[i]);
    } else {
      text = codec.decode(all);
    }
    std::fputs((text + "\n").c_str(), stdout);
    std::fflush(stdout);
    log_info(
        "generated {} tokens after a {}-token prompt in {:.2f} s ({:.1f} tokens/s), {} from {}; "
        "KV cache {:.2f} MiB for {} positions{}",
        out.size(), ids.size(), dt, double(out.size()) / std::max(dt, 1e-9),
        codec.tokenizer->type(), m->dir, double(im.cache_bytes()) / (1 << 20), cap,
        m->cfg.mla.enabled ? " (the compressed latent of multi-latent attention)" : "");
    return 0;
  });
}

}  // namespace mtron::train
