#include "mtron/plan/model_catalog.h"

#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "mtron/core/error.h"
#include "mtron/core/model_flags.h"
#include "mtron/embedded/model_catalog_files.h"

namespace mtron::plan {
namespace {

using nlohmann::json;

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = char(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

// A JSON scalar as a flag value: integers without a decimal point, floats in shortest form.
std::string flag_value(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number_float()) return fmt::format("{}", v.get<double>());
  MT_ASSERT(false, "catalog flag value must be a string or a number: ", v.dump());
}

std::vector<ModelEntry> load() {
  std::vector<ModelEntry> out;
  for (const auto& [path, text] : embedded::model_catalog_files()) {
    json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
    MT_ASSERT(!doc.is_discarded(), "embedded catalog ", path, " is not valid JSON");
    for (const json& j : doc.at("models")) {
      ModelEntry e;
      e.name = j.at("name").get<std::string>();
      e.aliases = j.value("aliases", std::vector<std::string>{});
      e.description = j.value("description", "");
      e.source = j.value("source", "");
      e.global_batch_size = j.value("global_batch_size", int64_t(0));
      for (const auto& [key, v] : j.at("args").items()) {
        if (v.is_boolean()) {
          if (v.get<bool>()) e.args.push_back("--" + key);
          continue;
        }
        e.args.push_back("--" + key);
        e.args.push_back(flag_value(v));
      }
      out.push_back(std::move(e));
    }
  }
  return out;
}

}  // namespace

const std::vector<ModelEntry>& model_catalog() {
  static const std::vector<ModelEntry> catalog = load();
  return catalog;
}

const ModelEntry& find_model(std::string_view name) {
  const std::string l = lower(name);
  std::string known;
  for (const ModelEntry& e : model_catalog()) {
    if (lower(e.name) == l) return e;
    for (const auto& a : e.aliases)
      if (lower(a) == l) return e;
    known += (known.empty() ? "" : ", ") + e.name;
  }
  MT_CHECK(false, "unknown model '", name, "' (known: ", known,
           "; or give the shape with Megatron's flags: --num-layers --hidden-size ...)");
}

ModelConfig parse_model_args(const std::vector<std::string>& args) {
  CLI::App app;
  ModelConfig m;
  add_model_flags(app, m);
  app.add_option("--vocab-size", m.vocab_size)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11's order
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    MT_CHECK(false, "bad model flags: ", e.what());
  }
  m.finalize();
  return m;
}

}  // namespace mtron::plan
