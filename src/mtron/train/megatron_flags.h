// defines: add_compat_flags, last_occurrence_only, check_unknown_flags
//
// The Megatron flags of real launch scripts that `mtron train` accepts without them changing
// anything (an implementation detail mtron always has or never needs: kernel fusions, data-loader
// workers, garbage collection, profiler windows, checkpoint formats, ...): each is accepted and
// reported once in a note. Flags that need a service mtron cannot reach are rejected with what to
// use instead. docs/flags.md lists them all.
#pragma once

#include <CLI/App.hpp>
#include <string>
#include <vector>

namespace mtron::train {

// Registers the flags; their notes go to `notes` when given.
void add_compat_flags(CLI::App& app, std::vector<std::string>& notes);

// argparse keeps the last occurrence of a flag that takes a list of values (--data-path A B
// --data-path C means C); CLI11 would concatenate them. Returns argv without the earlier
// occurrences (and their values) of `list_flags`.
std::vector<std::string> last_occurrence_only(int argc,
                                              char** argv,
                                              const std::vector<std::string>& list_flags);

// After parsing with allow_extras(): throws mtron::Error for the first argument no flag took,
// naming the closest known flag ("unknown flag --train-iter; did you mean --train-iters?").
void check_unknown_flags(const CLI::App& app);

}  // namespace mtron::train
