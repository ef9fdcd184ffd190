// defines: ModelEntry, model_catalog, find_model, parse_model_args
//
// Published models as Megatron model flags (catalog/models/*.json, embedded at build time).
// An entry is a list of flags, so a catalog model goes through exactly the parsing and
// validation of a model given by hand (core/model_flags.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mtron/core/model_config.h"

namespace mtron::plan {

struct ModelEntry {
  std::string name;
  std::vector<std::string> aliases;
  std::string description;
  std::string source;
  std::vector<std::string> args;  // {"--num-layers", "32", "--swiglu", ...}
  int64_t global_batch_size = 0;  // published batch in sequences (0: unknown)
};

const std::vector<ModelEntry>& model_catalog();
// By name or alias, case-insensitive; throws mtron::Error listing the known names.
const ModelEntry& find_model(std::string_view name);

// A model from Megatron's model flags and --vocab-size (a later flag overrides an earlier
// one), finalized. Throws mtron::Error naming a flag it does not know.
ModelConfig parse_model_args(const std::vector<std::string>& args);

}  // namespace mtron::plan
