// defines: PreprocessOptions, PreprocessStats, preprocess, preprocess_main
//
// `mtron preprocess`: JSONL (or plain text) -> Megatron indexed datasets, one per JSON key:
// `<output-prefix>_<key>_document.{bin,idx}`, byte for byte what Megatron's
// tools/preprocess_data.py writes for the same input and tokenizer (same flags).
//
// Input: one document per line. `.txt` files (also `.txt.gz`, `.txt.zst`) hold the text itself;
// anything else is JSON lines (`.jsonl`, `.json`, compressed or not). gzip and zstd are
// recognised by their magic bytes. A key's value is a string (one sequence) or a list of
// strings (one sequence each, as Megatron's sentence-split input).
//
// Streaming: a reader thread, `workers` tokenizer threads and the writer (the calling thread)
// pass bounded batches of lines, so memory does not grow with the input; output order is input
// order. A malformed line (bad JSON, missing key, non-string value, invalid UTF-8) is reported
// with its file and line number and is fatal, or skipped and counted with skip_malformed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mtron/data/tokenizer.h"

namespace mtron::data {

enum class ProgressStyle { kAuto, kBar, kLines, kNone };

struct PreprocessOptions {
  std::string input;                              // --input
  std::vector<std::string> json_keys{"text"};     // --json-keys
  std::string output_prefix;                      // --output-prefix
  TokenizerOptions tokenizer;                     // --tokenizer-type, --vocab-file, ...
  bool append_eod = false;                        // --append-eod
  int workers = 1;                                // --workers
  int64_t log_interval = 1000;                    // --log-interval (documents)
  bool skip_malformed = false;                    // --skip-malformed-lines
  ProgressStyle progress = ProgressStyle::kAuto;  // bar on a terminal, plain lines otherwise
};

struct PreprocessStats {
  int64_t documents = 0;     // lines written (per key, every key sees every good line)
  int64_t skipped = 0;       // malformed lines skipped
  int64_t empty = 0;         // documents with no tokens (for the first key)
  int64_t tokens = 0;        // over all keys, EOD included
  uint64_t input_bytes = 0;  // uncompressed bytes read
  double seconds = 0;
  std::vector<std::string> outputs;  // the dataset prefixes written, one per key
};

// Runs the whole conversion; user errors throw mtron::Error.
PreprocessStats preprocess(const PreprocessOptions& opts);

// `mtron preprocess <flags>`: parses Megatron's flags, runs, prints totals; returns the exit
// status (0, or 2 on a user error, printed as one line).
int preprocess_main(int argc, char** argv);

}  // namespace mtron::data
