// Helpers for the planner tests: catalog models through the same flag parsing as `mtron plan`.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <string>
#include <vector>

#include "mtron/core/model_flags.h"
#include "mtron/plan/model_catalog.h"
#include "mtron/plan/search.h"

namespace mtron::plan::test {

// A catalog model, then `extra` flags (which override it), parsed and finalized.
inline ModelConfig model(const std::string& name, std::vector<std::string> extra = {}) {
  CLI::App app;
  ModelConfig m;
  add_model_flags(app, m);
  app.add_option("--vocab-size", m.vocab_size)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::vector<std::string> args = find_model(name).args;
  args.insert(args.end(), extra.begin(), extra.end());
  std::reverse(args.begin(), args.end());
  app.parse(args);
  m.finalize();
  return m;
}

inline Cluster gpus(const std::string& hardware, int64_t n) {
  Cluster c;
  c.hardware = find_hardware(hardware);
  c.num_devices = n;
  c.devices_per_node = std::min<int64_t>(n, c.hardware.gpus_per_node);
  return c;
}

inline SearchResult plan(const ModelConfig& m, const Cluster& c, SearchOptions o) {
  return search_layouts(m, c, perf_from_hardware(c, o.precision), o);
}

}  // namespace mtron::plan::test
