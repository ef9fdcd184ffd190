// defines: add_model_flags
//
// Megatron's model-shape flags (reference/megatron.md section 5), registered on a CLI11 app.
// `mtron train` and `mtron plan` both call this, so they accept exactly the same flags.
#pragma once

#include <CLI/CLI.hpp>

#include "mtron/core/model_config.h"

namespace mtron {

void add_model_flags(CLI::App& app, ModelConfig& m);

}  // namespace mtron
