// `mtron doctor`'s input and output: the log parser (Megatron's per-iteration line in its
// formats, the rank prefixes of launchers, lines wrapped by a terminal, the device the log
// names) and the report of the findings.
#include "mtron/plan/doctor_io.h"

#include <fmt/core.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>

#include "mtron/plan/doctor.h"

namespace mtron::plan {
namespace doctor_detail {

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r\n");
  return s.substr(a, b - a + 1);
}

double parse_timestamp(const std::string& s) {
  for (size_t i = 0; i + 19 <= s.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i])) || s[i + 4] != '-' || s[i + 7] != '-' ||
        (s[i + 10] != ' ' && s[i + 10] != 'T') || s[i + 13] != ':' || s[i + 16] != ':')
      continue;
    std::tm tm{};
    if (std::sscanf(s.c_str() + i, "%4d-%2d-%2d%*c%2d:%2d:%2d", &tm.tm_year, &tm.tm_mon,
                    &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec) != 6)
      continue;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    double t = double(timegm(&tm));
    if (i + 19 < s.size() && s[i + 19] == '.') t += std::atof(s.c_str() + i + 19);
    return t;
  }
  return -1;
}

}  // namespace doctor_detail

namespace {

using doctor_detail::lower;
using doctor_detail::parse_timestamp;
using doctor_detail::trim;

// Rank from "[mtron r3/8]", "[rank3]:", torchrun's "[default3]:" or an srun label "3: ".
int parse_rank(const std::string& s) {
  for (const char* tag : {"[mtron r", "[rank", "[default"}) {
    const size_t p = s.find(tag);
    if (p != std::string::npos && std::isdigit(static_cast<unsigned char>(s[p + strlen(tag)])))
      return std::atoi(s.c_str() + p + strlen(tag));
  }
  size_t i = 0;
  while (i < s.size() && s[i] == ' ') ++i;
  size_t j = i;
  while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
  if (j > i && j < s.size() && s[j] == ':') return std::atoi(s.c_str() + i);
  return -1;
}

// Where "iteration N/ M" starts in the line (npos when it has none); *slash gets the '/'.
size_t find_iteration(const std::string& s, size_t* slash) {
  for (size_t p = s.find("iteration "); p != std::string::npos; p = s.find("iteration ", p + 1)) {
    size_t i = p + 10;
    while (i < s.size() && s[i] == ' ') ++i;
    size_t j = i;
    while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
    if (j > i && j < s.size() && s[j] == '/') {
      *slash = j;
      return p;
    }
  }
  return std::string::npos;
}

bool numeric(const std::string& v) {
  if (v.empty()) return false;
  char* end = nullptr;
  std::strtod(v.c_str(), &end);
  return end != v.c_str() || v.find("nan") != std::string::npos ||
         v.find("inf") != std::string::npos;
}

// One "key: value" (or v1's "key value") field into the record.
void parse_field(const std::string& field, IterationRecord* r) {
  std::string key, val;
  if (const size_t colon = field.rfind(':'); colon != std::string::npos) {
    key = lower(trim(field.substr(0, colon)));
    val = lower(trim(field.substr(colon + 1)));
  } else {  // Megatron v1: "lm loss 6.750E+00", "loss scale 64.0"
    const std::string f = lower(trim(field));
    const size_t space = f.rfind(' ');
    if (space == std::string::npos) return;
    key = trim(f.substr(0, space));
    val = f.substr(space + 1);
  }
  if (!numeric(val)) return;
  const double v = std::strtod(val.c_str(), nullptr);
  const bool bad = val.find("nan") != std::string::npos || val.find("inf") != std::string::npos;
  if (key == "elapsed time per iteration (ms)") r->elapsed_ms = v;
  if (key == "elapsed time per iteration (s)") r->elapsed_ms = 1000 * v;
  if (key.rfind("throughput per gpu", 0) == 0 || key == "tflops") r->tflops = v;
  if (key == "mfu") r->mfu = v / 100;
  if (key == "lm loss") {
    r->has_loss = true;
    r->loss = bad ? -1 : v;
    r->loss_nan = bad;
  }
  if (key == "grad norm") {
    r->grad_norm = bad ? -1 : v;
    r->grad_nan = bad;
  }
  if (key == "loss scale") r->loss_scale = v;
  if (key == "number of skipped iterations") r->skipped = int64_t(v);
  if (key == "number of nan iterations") r->nan_iterations = int64_t(v);
  if (key == "loss scale" || key == "grad norm" || key == "number of skipped iterations" ||
      key == "number of nan iterations")
    r->after_loss_fields = true;
}

// The '|'-terminated fields of `s` from `from` on; the unterminated tail (a line cut off or
// wrapped) is left out.
void parse_fields(const std::string& s, size_t from, IterationRecord* r) {
  for (size_t k = s.find('|', from); k != std::string::npos;) {
    const size_t next = s.find('|', k + 1);
    if (next == std::string::npos) break;
    parse_field(s.substr(k + 1, next - k - 1), r);
    k = next;
  }
}

std::optional<IterationRecord> parse_iteration(const std::string& s, int64_t line_no) {
  size_t slash = 0;
  const size_t p = find_iteration(s, &slash);
  if (p == std::string::npos) return std::nullopt;
  IterationRecord r;
  r.line = line_no;
  r.iteration = std::strtoll(s.c_str() + p + 10, nullptr, 10);
  r.train_iters = std::strtoll(s.c_str() + slash + 1, nullptr, 10);
  r.timestamp = parse_timestamp(s);
  r.rank = parse_rank(s);
  parse_fields(s, slash, &r);
  return r;
}

LogDevice detect_device(const std::vector<std::string>& lines) {
  for (const std::string& line : lines) {
    if (line.find("threads per rank") != std::string::npos) return LogDevice::kCpu;
    const std::string l = lower(line);
    for (const char* gpu : {"one gpu per rank", "cuda", "nccl", "cublas", "gpu 0;"})
      if (l.find(gpu) != std::string::npos) return LogDevice::kGpu;
  }
  return LogDevice::kUnknown;
}

const char* severity_name(Severity s) {
  return s == Severity::kCritical ? "critical" : s == Severity::kWarning ? "warning" : "info";
}

}  // namespace

LogReport parse_log(const std::vector<std::string>& lines) {
  LogReport r;
  r.lines = lines;
  r.device = detect_device(lines);
  for (size_t i = 0; i < lines.size(); ++i) {
    std::optional<IterationRecord> it = parse_iteration(lines[i], int64_t(i + 1));
    if (!it) continue;
    // A line wrapped by the terminal goes on in the next ones: "...| lm lo" + "ss: 2.5E+00 |".
    std::string joined = lines[i];
    size_t slash = 0;
    while (trim(joined).back() != '|' && i + 1 < lines.size() &&
           lines[i + 1].find('|') != std::string::npos &&
           find_iteration(lines[i + 1], &slash) == std::string::npos &&
           parse_timestamp(lines[i + 1]) < 0) {
      joined += lines[++i];
      it = parse_iteration(joined, it->line);
    }
    r.iterations.push_back(*it);
  }
  return r;
}

std::string format_findings(const std::string& name,
                            const LogReport& log,
                            const std::vector<Finding>& findings) {
  std::string s = fmt::format("mtron doctor: {}: {} lines, {} iteration lines", name,
                              log.lines.size(), log.iterations.size());
  if (!log.iterations.empty())
    s += fmt::format(" (iterations {}..{} of {})", log.iterations.front().iteration,
                     log.iterations.back().iteration, log.iterations.back().train_iters);
  if (!has_problems(findings)) {
    s += "\nno problems found\n";
    if (findings.empty()) return s;
  } else {
    s += fmt::format("; {} finding{}\n", findings.size(), findings.size() == 1 ? "" : "s");
  }
  for (size_t i = 0; i < findings.size(); ++i) {
    const Finding& f = findings[i];
    s += fmt::format("\n{}. [{}] {}\n", i + 1, severity_name(f.severity), f.title);
    s += "   evidence:\n";
    for (const auto& e : f.evidence) s += "     " + e + "\n";
    s += "   fix:\n";
    for (const auto& x : f.fixes) s += "     - " + x + "\n";
  }
  return s;
}

nlohmann::json findings_json(const std::vector<Finding>& findings) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& f : findings)
    a.push_back({{"severity", severity_name(f.severity)},
                 {"kind", f.kind},
                 {"title", f.title},
                 {"evidence", f.evidence},
                 {"fixes", f.fixes}});
  return a;
}

bool has_problems(const std::vector<Finding>& findings) {
  for (const Finding& f : findings)
    if (f.severity != Severity::kInfo) return true;
  return false;
}

}  // namespace mtron::plan
