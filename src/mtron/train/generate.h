// defines: SamplingOptions, sample_token, TextCodec, make_text_codec, generate, generate_main
//
// `mtron generate --load DIR --prompt "..."`: text from a checkpoint, token by token with a KV
// cache (model/inference.h). Sampling as Megatron's text generation and Hugging Face's: greedy
// when --temperature 0 or --top-k 1; otherwise softmax(logits / temperature) restricted to the
// top k tokens (--top-k > 0), then to the smallest set whose probability reaches --top-p
// (nucleus, --top-p > 0), and one draw. Draws are counter-based (Philox keyed by --seed, indexed
// by the position), so a seed gives the same text on every machine. Generation stops after
// --max-new-tokens or at the tokenizer's end-of-document token (unless --ignore-eos). The
// prompt is text in the checkpoint's tokenizer (--prompt) or token ids (--prompt-ids); the output
// is the decoded text (or ids, --print-ids).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mtron/checkpoint/manifest.h"
#include "mtron/data/tokenizer.h"
#include "mtron/model/inference.h"

namespace mtron::train {

struct SamplingOptions {
  float temperature = 1.0f;  // 0: greedy
  int64_t top_k = 0;         // 0: no limit
  float top_p = 0.0f;        // 0: no nucleus limit
};

// The next token from logits[vocab] (the real vocabulary, no padding) for a uniform draw u in
// [0, 1).
int32_t sample_token(const float* logits, int64_t vocab, const SamplingOptions& o, double u);

// Text <-> ids for generation.
struct TextCodec {
  std::unique_ptr<data::Tokenizer> tokenizer;
  std::vector<int32_t> encode(const std::string& text) const { return tokenizer->encode(text); }
  std::string decode(std::span<const int32_t> ids) const { return tokenizer->decode(ids); }
  int32_t eod() const { return tokenizer->eod(); }
};

// The tokenizer a checkpoint was trained with (its manifest's record, which --tokenizer-type and
// the file flags override), built by the data layer (data/tokenizer.h). Its vocabulary must be
// the model's.
TextCodec make_text_codec(const checkpoint::TokenizerRecord& t, int64_t vocab_size);

// Appends up to max_new tokens to `prompt` (which is run first, as one prefill). Returns the new
// tokens (ending with stop when it was produced).
std::vector<int32_t> generate(model::InferenceModel& m,
                              std::span<const int32_t> prompt,
                              int64_t vocab_size,
                              int64_t max_new,
                              const SamplingOptions& o,
                              uint64_t seed,
                              std::optional<int32_t> stop);

// `mtron generate` entry point: returns the process exit code.
int generate_main(int argc, char** argv);

}  // namespace mtron::train
