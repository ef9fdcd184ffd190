// Helpers for the planner tests: catalog models through the same flag parsing as `mtron plan`,
// clusters, layouts.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "mtron/plan/model_catalog.h"
#include "mtron/plan/search.h"
#include "test_helpers.h"

namespace mtron::plan::test {

using tests::error_of;

// A catalog model, then `extra` flags (which override it), parsed and finalized.
inline ModelConfig model(const std::string& name, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = find_model(name).args;
  args.insert(args.end(), extra.begin(), extra.end());
  return parse_model_args(args);
}

inline Cluster gpus(const std::string& hardware, int64_t n) {
  Cluster c;
  c.hardware = find_hardware(hardware);
  c.num_devices = n;
  c.devices_per_node = std::min<int64_t>(n, c.hardware.gpus_per_node);
  return c;
}

// A layout of these sizes finalized for m, sequence parallel wherever TP > 1.
inline Layout layout(const ModelConfig& m, const tests::Sizes& s) {
  Layout l;
  l.parallel = tests::layout(s);
  l.parallel.sequence_parallel = s.tp > 1;
  l.parallel.finalize(m);
  return l;
}

inline SearchResult plan(const ModelConfig& m, const Cluster& c, SearchOptions o) {
  return search_layouts(m, c, perf_from_hardware(c, o.precision), o);
}

}  // namespace mtron::plan::test
