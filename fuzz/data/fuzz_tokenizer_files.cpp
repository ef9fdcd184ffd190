// Fuzzes the tokenizer file parsers and the tokenizers they build: GPT-2 vocab JSON + merges
// (Gpt2Tokenizer) and Hugging Face tokenizer.json + tokenizer_config.json (HfTokenizer). Once a
// file pair loads, a fixed text and the rest of the input are encoded and decoded.
// Input: one mode byte, then the two files separated by "\n====\n", then "\n====\n" and text.
// A rejected file or text must be an mtron::Error; anything else is a finding.
#include <cstdint>
#include <memory>
#include <string>

#include "fuzz_util.h"
#include "mtron/core/error.h"
#include "mtron/data/gpt2_tokenizer.h"
#include "mtron/data/hf_tokenizer.h"

using namespace mtron::data;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  fuzz::FuzzInput in(data, size);
  const uint8_t mode = in.byte() % 2;
  const std::string a(in.part()), b(in.part());
  const std::string text(in.rest());
  try {
    std::unique_ptr<Tokenizer> tok;
    if (mode == 0) {
      tok = std::make_unique<Gpt2Tokenizer>(a, b, "vocab.json", "merges.txt");
    } else {
      tok = std::make_unique<HfTokenizer>(a, b, "tokenizer.json");
    }
    for (const std::string& t :
         {std::string("Hello world! It's 12 o'clock \xC3\xA9\xE6\x97\xA5 \xF0\x9F\x98\x80  \n"),
          text}) {
      try {
        const auto ids = tok->encode(t);
        (void)tok->decode(ids);
      } catch (const mtron::Error&) {
      }
    }
    (void)tok->eod();
    (void)tok->vocab_size();
  } catch (const mtron::Error&) {
  }
  return 0;
}
