// defines: parse_train_flags
//
// `mtron train`'s flag parsing for the tests that build a trainer (or its arguments) from flags;
// include it in tests that link mtron_train.
#pragma once

#include <string>
#include <vector>

#include "mtron/train/args.h"
#include "test_helpers.h"

namespace mtron::tests {

// parse_train_args on `train <words of base> <extra...>` at this world size; its result (false:
// the command is to exit, as after --help).
inline bool parse_train_flags(const std::string& base,
                              const std::vector<std::string>& extra,
                              int64_t world_size,
                              train::TrainArgs& a) {
  std::vector<std::string> args = words("train " + base);
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  return train::parse_train_args(int(argv.size()), argv.data(), world_size, a);
}

}  // namespace mtron::tests
