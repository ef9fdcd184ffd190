#include "mtron/plan/doctor.h"

#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <map>
#include <optional>

namespace mtron::plan {
namespace {

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

std::string evidence(const LogReport& log, int64_t line) {
  std::string text = trim(log.lines[size_t(line - 1)]);
  if (text.size() > 220) text = text.substr(0, 217) + "...";
  return fmt::format("line {}: {}", line, text);
}

bool contains(const std::string& haystack_lower, const char* needle_lower) {
  return haystack_lower.find(needle_lower) != std::string::npos;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// "2024-05-01 12:00:00" or "2024-05-01T12:00:00" (optionally with .ffffff) anywhere in the
// line -> seconds (as UTC; only differences matter).
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

// Rank from "[mtron r3/8]", "[rank3]:" or an srun label "3: ".
int parse_rank(const std::string& s) {
  if (auto p = s.find("[mtron r"); p != std::string::npos) return std::atoi(s.c_str() + p + 8);
  if (auto p = s.find("[rank"); p != std::string::npos) return std::atoi(s.c_str() + p + 5);
  size_t i = 0;
  while (i < s.size() && s[i] == ' ') ++i;
  size_t j = i;
  while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
  if (j > i && j < s.size() && s[j] == ':') return std::atoi(s.c_str() + i);
  return -1;
}

// Megatron's per-iteration line: "iteration N/ M | key: value | key: value |".
std::optional<IterationRecord> parse_iteration(const std::string& s, int64_t line_no) {
  size_t p = s.find("iteration ");
  while (p != std::string::npos) {
    size_t i = p + 10;
    while (i < s.size() && s[i] == ' ') ++i;
    char* end = nullptr;
    const long long it = std::strtoll(s.c_str() + i, &end, 10);
    size_t j = size_t(end - s.c_str());
    if (j > i && j < s.size() && s[j] == '/') {
      IterationRecord r;
      r.line = line_no;
      r.iteration = it;
      r.train_iters = std::strtoll(s.c_str() + j + 1, nullptr, 10);
      r.timestamp = parse_timestamp(s);
      r.rank = parse_rank(s);
      size_t k = s.find('|', j);
      while (k != std::string::npos) {
        const size_t next = s.find('|', k + 1);
        const std::string field =
            s.substr(k + 1, next == std::string::npos ? std::string::npos : next - k - 1);
        const size_t colon = field.rfind(':');
        if (colon != std::string::npos) {
          const std::string key = lower(trim(field.substr(0, colon)));
          const std::string val = lower(trim(field.substr(colon + 1)));
          const double v = std::strtod(val.c_str(), nullptr);
          const bool bad =
              val.find("nan") != std::string::npos || val.find("inf") != std::string::npos;
          if (key == "elapsed time per iteration (ms)") r.elapsed_ms = v;
          if (key.rfind("throughput per gpu", 0) == 0) r.tflops = v;
          if (key == "lm loss") {
            r.loss = v;
            r.loss_nan = bad;
          }
          if (key == "grad norm") {
            r.grad_norm = v;
            r.grad_nan = bad;
          }
          if (key == "loss scale") r.loss_scale = v;
          if (key == "number of skipped iterations") r.skipped = int64_t(v);
          if (key == "number of nan iterations") r.nan_iterations = int64_t(v);
        }
        k = next;
      }
      return r;
    }
    p = s.find("iteration ", p + 1);
  }
  return std::nullopt;
}

Finding make(Severity sev, const char* kind, std::string title, double score) {
  Finding f;
  f.severity = sev;
  f.kind = kind;
  f.title = std::move(title);
  f.score = score;
  return f;
}

void add_evidence(Finding& f, const LogReport& log, int64_t line, size_t max_lines = 4) {
  if (f.evidence.size() < max_lines) f.evidence.push_back(evidence(log, line));
}

// --- Detectors ---------------------------------------------------------------------------------

void find_oom(const LogReport& log, std::vector<Finding>* out) {
  static const char* kPatterns[] = {
      "out of memory",          "outofmemoryerror",           "std::bad_alloc",
      "cannot allocate memory", "cublas_status_alloc_failed", "oom-kill",
      "killed process",         "exited on signal 9"};
  Finding f = make(Severity::kCritical, "oom", "", 100);
  std::string tried;
  for (size_t i = 0; i < log.lines.size(); ++i) {
    const std::string l = lower(log.lines[i]);
    bool hit = false;
    for (const char* p : kPatterns) hit |= contains(l, p);
    if (!hit) continue;
    add_evidence(f, log, int64_t(i + 1));
    if (auto p = l.find("tried to allocate"); p != std::string::npos && tried.empty()) {
      const std::string& orig = log.lines[i];
      const size_t end = orig.find_first_of(".(;", p + 18);
      tried = trim(orig.substr(p + 18, end == std::string::npos ? 16 : end - p - 18));
    }
  }
  if (f.evidence.empty()) return;
  int64_t last_iter = log.iterations.empty() ? 0 : log.iterations.back().iteration;
  f.title = fmt::format("out of memory{}{}",
                        last_iter > 0 ? fmt::format(" after iteration {}", last_iter)
                                      : " before the first logged iteration",
                        tried.empty() ? "" : fmt::format(" (tried to allocate {})", tried));
  f.fixes = {
      "recompute activations: --recompute-granularity selective, or full "
      "(--recompute-granularity full --recompute-method uniform --recompute-num-layers 1)",
      "shard the optimizer state: --use-distributed-optimizer",
      "a smaller --micro-batch-size (keep --global-batch-size: more micro-batches)",
      "more model parallelism: a larger --pipeline-model-parallel-size, or "
      "--tensor-model-parallel-size with --sequence-parallel",
      "check the layout first: `mtron plan` prints the memory per GPU of each layout"};
  out->push_back(f);
}

void find_nan(const LogReport& log, std::vector<Finding>* out) {
  Finding f = make(Severity::kCritical, "nan", "", 90);
  int64_t first = -1;
  for (const auto& r : log.iterations) {
    if (r.loss_nan || r.grad_nan || r.nan_iterations > 0) {
      if (first < 0) first = r.iteration;
      add_evidence(f, log, r.line, 3);
    }
  }
  for (size_t i = 0; i < log.lines.size(); ++i) {
    const std::string l = lower(log.lines[i]);
    if (contains(l, "found nan") || contains(l, "nan in") || contains(l, "found inf") ||
        contains(l, "is nan") || contains(l, "detected nan")) {
      add_evidence(f, log, int64_t(i + 1));
      if (first < 0) first = 0;
    }
  }
  if (f.evidence.empty()) return;
  f.title = first > 0 ? fmt::format("NaN/Inf in the loss or gradients from iteration {}", first)
                      : "NaN/Inf in the loss or gradients";
  f.fixes = {"lower --lr or lengthen --lr-warmup-iters; keep --clip-grad 1.0",
             "train in --bf16 rather than --fp16 (no overflow to Inf in bf16's range)",
             "a smaller --init-method-std (e.g. 0.006 for large hidden sizes)",
             "check the data around the failing iteration (corrupt or repeated documents)",
             "resume from the last checkpoint before the first NaN"};
  out->push_back(f);
}

// The run's own series: when several ranks log iteration lines, the last rank's (Megatron
// logs on the last rank; its loss is the global one).
std::vector<const IterationRecord*> series(const LogReport& log) {
  int rank = -1;
  for (const auto& r : log.iterations) rank = std::max(rank, r.rank);
  std::vector<const IterationRecord*> v;
  for (const auto& r : log.iterations)
    if (r.rank == rank) v.push_back(&r);
  return v;
}

// Loss points of the run, one per logged iteration.
std::vector<const IterationRecord*> loss_points(const LogReport& log) {
  std::vector<const IterationRecord*> v;
  for (const IterationRecord* r : series(log))
    if (r->loss > 0 && !r->loss_nan && std::isfinite(r->loss)) v.push_back(r);
  return v;
}

void find_loss_anomalies(const LogReport& log, std::vector<Finding>* out) {
  const auto pts = loss_points(log);
  if (pts.size() < 10) return;
  const size_t w = 5;
  // Divergence: after a minimum, the smoothed loss climbs well above it and stays there.
  std::vector<double> smooth(pts.size());
  for (size_t i = 0; i < pts.size(); ++i) {
    std::vector<double> win;
    for (size_t j = i >= w / 2 ? i - w / 2 : 0; j < std::min(pts.size(), i + w / 2 + 1); ++j)
      win.push_back(pts[j]->loss);
    smooth[i] = median(win);
  }
  size_t argmin = 0;
  for (size_t i = 0; i < smooth.size(); ++i)
    if (smooth[i] < smooth[argmin]) argmin = i;
  const double tail = median({smooth.end() - std::min<size_t>(w, smooth.size()), smooth.end()});
  const double lo = smooth[argmin];
  if (argmin + w < smooth.size() && tail > lo * 1.2 && tail - lo > 0.3) {
    Finding f =
        make(Severity::kCritical, "divergence",
             fmt::format("loss diverges: {:.3f} at iteration {} rises to {:.3f} by "
                         "iteration {}",
                         lo, pts[argmin]->iteration, pts.back()->loss, pts.back()->iteration),
             80);
    add_evidence(f, log, pts[argmin]->line);
    size_t start = argmin;
    while (start < smooth.size() && smooth[start] < lo * 1.1) ++start;
    if (start < pts.size()) add_evidence(f, log, pts[start]->line);
    add_evidence(f, log, pts.back()->line);
    f.fixes = {"a longer warmup: raise --lr-warmup-iters (e.g. 1-2% of --train-iters)",
               "a lower peak --lr", "--clip-grad 1.0 (global-norm clipping) if it is off or larger",
               "a smaller --init-method-std such as 0.006 for wide models",
               "--bf16 instead of --fp16; check the data for repeated or corrupt documents"};
    out->push_back(f);
    return;  // a spike report inside a divergence adds nothing
  }
  // Spikes: a point far above the recent median that comes back down.
  Finding f = make(Severity::kWarning, "loss_spike", "", 50);
  int count = 0;
  double worst = 0;
  int64_t worst_iter = 0;
  for (size_t i = w; i < pts.size(); ++i) {
    std::vector<double> before;
    for (size_t j = i - w; j < i; ++j) before.push_back(pts[j]->loss);
    const double base = median(before);
    const double jump = pts[i]->loss - base;
    if (pts[i]->loss < base * 1.25 || jump < 0.3) continue;
    std::vector<double> after;
    for (size_t j = i + 1; j < std::min(pts.size(), i + 1 + w); ++j) after.push_back(pts[j]->loss);
    if (after.empty() || median(after) > base * 1.1) continue;  // not recovered: not a spike
    ++count;
    add_evidence(f, log, pts[i]->line);
    if (jump / base > worst) {
      worst = jump / base;
      worst_iter = pts[i]->iteration;
    }
  }
  if (count == 0) return;
  f.title = fmt::format("{} loss spike{} (worst +{:.0f}% at iteration {}), recovered", count,
                        count == 1 ? "" : "s", 100 * worst, worst_iter);
  f.score += count;
  f.fixes = {"if spikes recur: lower --lr or lengthen --lr-warmup-iters",
             "keep --clip-grad 1.0; a smaller --adam-beta2 (0.95) reacts faster to gradient "
             "scale changes",
             "look at the batches of the spiking iterations for bad data"};
  out->push_back(f);
}

void find_skipped(const LogReport& log, std::vector<Finding>* out) {
  Finding f = make(Severity::kWarning, "skipped_iterations", "", 60);
  int64_t total = 0;
  double min_scale = -1;
  for (const auto& r : log.iterations) {
    if (r.skipped > 0) {
      total += r.skipped;
      add_evidence(f, log, r.line);
    }
    if (r.loss_scale > 0)
      min_scale = min_scale < 0 ? r.loss_scale : std::min(min_scale, r.loss_scale);
  }
  if (total == 0) return;
  f.title = fmt::format("{} skipped iteration{} (fp16 loss-scale overflow){}", total,
                        total == 1 ? "" : "s",
                        min_scale >= 0 ? fmt::format("; loss scale fell to {:g}", min_scale) : "");
  if (min_scale >= 0 && min_scale <= 1) {
    f.severity = Severity::kCritical;
    f.title += ": gradients overflow even unscaled";
  }
  f.score += double(total);
  f.fixes = {"--bf16 instead of --fp16 (bf16 has fp32's range: no loss scaling, no skips)",
             "a lower --lr or a longer --lr-warmup-iters if the overflows persist",
             "--initial-loss-scale 65536 (2^16) instead of 2^32 shortens the first skips"};
  out->push_back(f);
}

void find_throughput(const LogReport& log, const DoctorOptions& o, std::vector<Finding>* out) {
  std::vector<const IterationRecord*> pts;
  for (const IterationRecord* r : series(log))
    if (r->elapsed_ms > 0) pts.push_back(r);
  if (pts.size() < 6) return;
  // The first logged interval includes start-up; skip it.
  const size_t start = 1;
  std::vector<double> tf, ms;
  for (size_t i = start; i < pts.size(); ++i) {
    ms.push_back(pts[i]->elapsed_ms);
    if (pts[i]->tflops > 0) tf.push_back(pts[i]->tflops);
  }
  // Low MFU: against the plan's prediction, else against the hardware peak.
  if (!tf.empty()) {
    const double achieved = median(tf);
    std::string why;
    double score = 0;
    if (o.expected_tflops > 0 && achieved < 0.75 * o.expected_tflops) {
      why = fmt::format("{:.1f} TFLOP/s/GPU against {:.1f} predicted by the plan ({:.0f}%)",
                        achieved, o.expected_tflops, 100 * achieved / o.expected_tflops);
      score = 1 - achieved / o.expected_tflops;
    } else if (o.expected_tflops <= 0 && o.peak_flops > 0) {
      const double mfu = achieved * 1e12 / o.peak_flops;
      const double floor = o.gpu ? 0.25 : 0.10;
      if (mfu < floor) {
        why = fmt::format(
            "{:.1f} TFLOP/s/GPU is {:.1f}% MFU against {} (well-tuned Megatron "
            "runs reach 35-50%)",
            achieved, 100 * mfu, o.peak_name);
        score = 1 - mfu / floor;
      }
    }
    if (!why.empty()) {
      Finding f = make(Severity::kWarning, "low_mfu", "low MFU: " + why, 40 + 10 * score);
      add_evidence(f, log, pts[start]->line);
      add_evidence(f, log, pts.back()->line);
      f.fixes = {
          "a larger --micro-batch-size if memory allows (bigger GEMMs, fewer pipeline bubbles)",
          "fused (flash) attention and --sequence-parallel with TP > 1",
          "keep --tensor-model-parallel-size <= 8, inside one node's NVLink",
          "--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather",
          "more micro-batches per step (--global-batch-size) or interleaving "
          "(--num-virtual-stages-per-pipeline-rank) when PP > 1",
          "check the network: NCCL_DEBUG=INFO shows which transport the collectives use"};
      out->push_back(f);
    }
  }
  // Throughput drop: the iteration time rises and stays up.
  if (ms.size() < 6) return;
  const size_t half = ms.size() / 2;
  const double base = median({ms.begin(), ms.begin() + long(half)});
  for (size_t i = 2; i + 3 <= ms.size(); ++i) {
    const double win = median({ms.begin() + long(i), ms.begin() + long(i + 3)});
    const double rest = median({ms.begin() + long(i), ms.end()});
    if (win > 1.3 * base && rest > 1.25 * base && ms[i] > 1.3 * base) {
      const double before = median({ms.begin(), ms.begin() + long(i)});
      if (rest < 1.25 * before) continue;
      Finding f =
          make(Severity::kWarning, "throughput_drop",
               fmt::format("throughput drops at iteration {}: {:.0f} -> {:.0f} ms per "
                           "iteration (+{:.0f}%)",
                           pts[start + i]->iteration, before, rest, 100 * (rest / before - 1)),
               45);
      add_evidence(f, log, pts[start + i - 1]->line);
      add_evidence(f, log, pts[start + i]->line);
      add_evidence(f, log, pts.back()->line);
      f.fixes = {
          "look for a straggler: Megatron's --log-straggler, or nvidia-smi/dmesg on each "
          "node (thermal or power throttling, ECC errors, a failing link)",
          "another job on the nodes, or the file system: data loading "
          "(--num-workers) and checkpoint saves (--async-save) show up as slow steps",
          "NCCL_DEBUG=INFO for a collective that fell back to a slower transport"};
      out->push_back(f);
      return;
    }
  }
}

void find_stragglers(const LogReport& log, std::vector<Finding>* out) {
  Finding f = make(Severity::kWarning, "straggler", "", 55);
  double worst = 1;
  std::string who, against;
  auto consider = [&](double ratio, size_t line, std::string name) {
    if (ratio < 1.15) return;
    add_evidence(f, log, int64_t(line + 1));
    if (ratio > worst) {
      worst = ratio;
      who = std::move(name);
      against = "the fastest rank";
    }
  };
  for (size_t i = 0; i < log.lines.size(); ++i) {
    const std::string& s = log.lines[i];
    // Megatron's StragglerDetector: "MnRtt/Rnk: 3453.08ms/8 | MxRtt/Rnk: 3468.20ms/0".
    if (auto mn = s.find("MnRtt/Rnk:"), mx = s.find("MxRtt/Rnk:");
        mn != std::string::npos && mx != std::string::npos) {
      const double lo = std::atof(s.c_str() + mn + 10), hi = std::atof(s.c_str() + mx + 10);
      const size_t slash = s.find("ms/", mx);
      const int rank = slash == std::string::npos ? -1 : std::atoi(s.c_str() + slash + 3);
      if (lo > 0) consider(hi / lo, i, fmt::format("rank {}", rank));
    }
    // Megatron's timers: "(min, max) time across ranks (ms):" then "name ....: (min, max)".
    if (s.find("time across ranks (ms):") != std::string::npos &&
        s.find("(min, max)") != std::string::npos) {
      for (size_t j = i + 1; j < log.lines.size(); ++j) {
        const std::string& t = log.lines[j];
        const size_t open = t.rfind(": (");
        if (open == std::string::npos) break;
        double lo = 0, hi = 0;
        if (std::sscanf(t.c_str() + open + 3, "%lf, %lf", &lo, &hi) != 2) break;
        const std::string name = trim(t.substr(0, t.find_first_of(".:")));
        const bool step_timer = name.find("forward-backward") != std::string::npos ||
                                name.find("optimizer") != std::string::npos;
        if (step_timer && lo > 1.0) consider(hi / lo, j, "timer " + name);
      }
    }
  }
  // Per-rank iteration lines (mtron logs with a rank prefix on several ranks).
  std::map<int, std::vector<double>> per_rank;
  for (const auto& r : log.iterations)
    if (r.rank >= 0 && r.elapsed_ms > 0) per_rank[r.rank].push_back(r.elapsed_ms);
  if (per_rank.size() >= 2) {
    std::vector<double> meds;
    for (auto& [rank, v] : per_rank) meds.push_back(median(v));
    const double typical = median(meds);
    for (auto& [rank, v] : per_rank) {
      const double m = median(v);
      if (m > 1.15 * typical) {
        for (const auto& r : log.iterations)
          if (r.rank == rank) {
            add_evidence(f, log, r.line);
            break;
          }
        if (m / typical > worst) {
          worst = m / typical;
          who = fmt::format("rank {}", rank);
          against = "the median rank";
        }
      }
    }
  }
  if (f.evidence.empty()) return;
  f.title = fmt::format("straggler: {} is {:.0f}% slower than {}", who, 100 * (worst - 1), against);
  f.score += worst;
  f.fixes = {
      "find the slow GPU or node: nvidia-smi -q (clocks, temperature, power, ECC), "
      "dmesg (Xid errors), and its NIC's link state",
      "rerun with --log-straggler to name the rank every log interval",
      "exclude the node (sbatch --exclude) and resume from the last checkpoint",
      "with PP: uneven stages (--decoder-first/last-pipeline-num-layers) also look like "
      "stragglers; `mtron plan` shows the per-stage balance"};
  out->push_back(f);
}

void find_hang(const LogReport& log, std::vector<Finding>* out) {
  // Not a bare "timeout": Megatron prints its arguments (distributed_timeout_minutes) at start.
  static const char* kPatterns[] = {"watchdog caught", "collective operation timeout",
                                    "before timing out", "timed out", "deadlock detected"};
  Finding f = make(Severity::kCritical, "hang", "", 85);
  for (size_t i = 0; i < log.lines.size(); ++i) {
    const std::string l = lower(log.lines[i]);
    for (const char* p : kPatterns)
      if (contains(l, p)) {
        add_evidence(f, log, int64_t(i + 1));
        break;
      }
  }
  // A log whose timestamps go on long after the last iteration line: no progress.
  std::vector<double> gaps;
  const IterationRecord* prev = nullptr;
  for (const IterationRecord* r : series(log)) {
    if (r->timestamp < 0) continue;
    if (prev) gaps.push_back(r->timestamp - prev->timestamp);
    prev = r;
  }
  if (prev && gaps.size() >= 3) {
    const double typical = median(gaps);
    double last_ts = -1;
    int64_t last_line = 0;
    for (size_t i = size_t(prev->line); i < log.lines.size(); ++i) {
      const double ts = parse_timestamp(log.lines[i]);
      if (ts > last_ts) {
        last_ts = ts;
        last_line = int64_t(i + 1);
      }
    }
    const double stall = last_ts - prev->timestamp;
    if (last_ts > 0 && stall > std::max(10 * typical, 60.0)) {
      add_evidence(f, log, prev->line);
      add_evidence(f, log, last_line);
      f.title = fmt::format(
          "hang: no iteration for {:.0f} s after iteration {} (one logged "
          "interval takes {:.0f} s)",
          stall, prev->iteration, typical);
    }
  }
  if (f.evidence.empty()) return;
  if (f.title.empty()) {
    f.title = log.iterations.empty()
                  ? "hang: a collective timed out before the first logged iteration"
                  : fmt::format("hang: a collective timed out after iteration {}",
                                log.iterations.back().iteration);
  }
  f.fixes = {
      "a rank died or diverged from the others' call sequence: read every rank's log for the "
      "first error (the timeout is only the symptom)",
      "with PP: mismatched --micro-batch-size/--seq-length across ranks, or uneven data, "
      "desynchronise the send/recv pairs",
      "NCCL_DEBUG=INFO (GPUs) shows the last collective of each rank; a larger "
      "--distributed-timeout-minutes only helps slow but progressing steps",
      "check the network (ibstat, link flaps) and the node health of the stuck ranks"};
  out->push_back(f);
}

}  // namespace

LogReport parse_log(const std::vector<std::string>& lines) {
  LogReport r;
  r.lines = lines;
  for (size_t i = 0; i < lines.size(); ++i)
    if (auto it = parse_iteration(lines[i], int64_t(i + 1))) r.iterations.push_back(*it);
  return r;
}

std::vector<Finding> diagnose(const LogReport& log, const DoctorOptions& o) {
  std::vector<Finding> out;
  find_oom(log, &out);
  find_nan(log, &out);
  find_hang(log, &out);
  find_loss_anomalies(log, &out);
  find_skipped(log, &out);
  find_stragglers(log, &out);
  find_throughput(log, o, &out);
  std::stable_sort(out.begin(), out.end(), [](const Finding& a, const Finding& b) {
    if (a.severity != b.severity) return a.severity < b.severity;
    return a.score > b.score;
  });
  return out;
}

std::string format_findings(const std::string& name,
                            const LogReport& log,
                            const std::vector<Finding>& findings) {
  std::string s = fmt::format("mtron doctor: {}: {} lines, {} iteration lines", name,
                              log.lines.size(), log.iterations.size());
  if (!log.iterations.empty())
    s += fmt::format(" (iterations {}..{} of {})", log.iterations.front().iteration,
                     log.iterations.back().iteration, log.iterations.back().train_iters);
  if (findings.empty()) return s + "\nno problems found\n";
  s += fmt::format("; {} finding{}\n", findings.size(), findings.size() == 1 ? "" : "s");
  for (size_t i = 0; i < findings.size(); ++i) {
    const Finding& f = findings[i];
    s += fmt::format("\n{}. [{}] {}\n", i + 1,
                     f.severity == Severity::kCritical ? "critical" : "warning", f.title);
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
    a.push_back({{"severity", f.severity == Severity::kCritical ? "critical" : "warning"},
                 {"kind", f.kind},
                 {"title", f.title},
                 {"evidence", f.evidence},
                 {"fixes", f.fixes}});
  return a;
}

}  // namespace mtron::plan
