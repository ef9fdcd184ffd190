// defines: Tokenizer, TokenizerOptions, make_tokenizer, check_tokenizer_type, tokenizer_types
//
// One interface for every tokenizer, chosen by Megatron's --tokenizer-type name:
//
//   GPT2BPETokenizer           --vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt
//   SentencePieceTokenizer     --tokenizer-model m.model        (libsentencepiece)
//   GPTSentencePieceTokenizer  --tokenizer-model m.model        (same as above, see below)
//   Llama2Tokenizer            --tokenizer-model m.model        (SentencePiece, BOS first)
//   HuggingFaceTokenizer       --tokenizer-model tokenizer.json or a folder holding it
//   NullTokenizer              --vocab-size N [--null-tokenizer-eod-id E]
//
// Semantics follow Megatron-Core's current tokenizer system (megatron/core/tokenizers):
// - encode() is Megatron's `tokenize(text)`; it never appends EOD (preprocess does, with
//   --append-eod). HuggingFaceTokenizer includes the special tokens of the tokenizer's post
//   processor (e.g. a BOS), as `tokenizer(text).input_ids` does.
// - eod() is Megatron's `eod`: GPT-2 `<|endoftext|>`; SentencePiece: the model's EOS id;
//   Hugging Face: the `eos_token` of tokenizer_config.json; Null: vocab_size - 1 by default.
// - vocab_size() is the unpadded size (Megatron pads it for the embedding, not here).
//
// encode() and decode() are const and thread-safe: several preprocess workers share one
// tokenizer (each thread keeps its own BPE cache).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mtron::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Appends the ids of `text` to `out`.
  virtual void encode(std::string_view text, std::vector<int32_t>& out) const = 0;
  std::vector<int32_t> encode(std::string_view text) const {
    std::vector<int32_t> ids;
    encode(text, ids);
    return ids;
  }
  virtual std::string decode(std::span<const int32_t> ids) const = 0;

  virtual int32_t eod() const = 0;
  virtual int64_t vocab_size() const = 0;
  // Megatron's pad id, when the tokenizer defines one.
  virtual std::optional<int32_t> pad() const { return std::nullopt; }
  // The --tokenizer-type name this tokenizer was built from.
  virtual std::string type() const = 0;
};

// The tokenizer flags of Megatron's _add_tokenizer_args that mtron supports.
struct TokenizerOptions {
  std::string type;                    // --tokenizer-type
  std::string vocab_file;              // --vocab-file
  std::string merge_file;              // --merge-file
  std::string model;                   // --tokenizer-model
  std::optional<int64_t> vocab_size;   // --vocab-size (NullTokenizer)
  std::optional<int64_t> null_eod_id;  // --null-tokenizer-eod-id
  std::optional<int64_t> null_pad_id;  // --null-tokenizer-pad-id
};

// Builds the tokenizer; a user mistake (unknown type, missing flag or file, malformed file)
// throws mtron::Error naming the flag and the file.
std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerOptions& opts);

// The accepted --tokenizer-type names.
const std::vector<std::string>& tokenizer_types();
// Throws mtron::Error unless `type` is one of tokenizer_types() (opens no file).
void check_tokenizer_type(const std::string& type);

}  // namespace mtron::data
