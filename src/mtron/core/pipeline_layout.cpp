#include "mtron/core/pipeline_layout.h"

#include <cstdint>
#include <regex>

#include "mtron/core/error.h"

namespace mtron {
namespace {

// Every match of `pattern` replaced by its first group repeated (second group) times, matches
// taken left to right without overlap (Python's re.sub, which Megatron uses).
std::string unroll(const std::string& s, const std::regex& pattern) {
  std::string out;
  auto last = s.cbegin();
  for (std::sregex_iterator it(s.begin(), s.end(), pattern), end; it != end; ++it) {
    const std::smatch& m = *it;
    out.append(last, m[0].first);
    const std::string count = m[2].str();
    MT_CHECK(count.size() <= 6, "--pipeline-model-parallel-layout: the repeat count ", count,
             " is too large");
    for (int64_t i = std::stoll(count); i > 0; --i) out += m[1].str();
    last = m[0].second;
  }
  out.append(last, s.cend());
  return out;
}

}  // namespace

std::vector<std::string> parse_pipeline_layout(const std::string& layout) {
  std::string s;
  for (char c : layout)
    if (c != ',') s += c;
  s = unroll(s, std::regex(R"(\(([^)]+)\)\*(\d+))"));
  s = unroll(s, std::regex(R"((.)\*(\d+))"));
  std::vector<std::string> stages(1);
  for (char c : s) {
    if (c == '|') {
      stages.emplace_back();
      continue;
    }
    MT_CHECK(c == 'E' || c == 't' || c == 'm' || c == 'L',
             "--pipeline-model-parallel-layout: invalid layer character '", std::string(1, c),
             "' in stage ", stages.size() - 1, " of '", layout,
             "' (known layer characters: E, L, t, m)");
    stages.back() += c;
  }
  return stages;
}

}  // namespace mtron
