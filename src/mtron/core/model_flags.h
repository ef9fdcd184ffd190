// defines: add_model_flags, model_flag_args
//
// Megatron's model-shape flags (arguments.py: names, defaults, help texts),
// registered once so `mtron train` and `mtron plan` accept exactly the same spellings. Repeating
// a flag keeps the last value, as argparse does, so a catalog model's flags can be followed by
// the user's overrides.
#pragma once

#include <CLI/App.hpp>
#include <string>
#include <vector>

#include "mtron/core/model_config.h"

namespace mtron {

// Registers the flags (groups "Model" and "Mixture of experts") and stores their defaults into
// `m`: Megatron's (dropout 0.1 included). --vocab-size belongs to the tokenizer flags (the
// trainer's). Call m.finalize() after parsing.
void add_model_flags(CLI::App& app, ModelConfig& m);

// The inverse: every model flag with its value for `m` (finalized), in registration order, so
// a launch script or a checkpoint manifest states the whole shape, plus --vocab-size. Parsing
// the result with add_model_flags (and --vocab-size) gives `m` back.
std::vector<std::string> model_flag_args(const ModelConfig& m);

}  // namespace mtron
