// defines: format_plans, plans_json, cluster_summary
//
// What `mtron plan` prints: a table for people (top N, the reasons, the memory and time
// breakdown of the best plan, why common alternatives lose), or JSON for tools.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "mtron/core/model_config.h"
#include "mtron/plan/search.h"

namespace mtron::plan {

std::string cluster_summary(const Cluster& c);
std::string format_plans(const ModelConfig& m,
                         const Cluster& c,
                         const SearchOptions& o,
                         const SearchResult& r);
nlohmann::json plans_json(const ModelConfig& m,
                          const Cluster& c,
                          const SearchOptions& o,
                          const SearchResult& r);

}  // namespace mtron::plan
