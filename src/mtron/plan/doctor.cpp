#include "mtron/plan/doctor.h"

#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <ctime>
#include <map>
#include <optional>
#include <sstream>

#include "mtron/plan/doctor_io.h"

namespace mtron::plan {
namespace {

using doctor_detail::lower;
using doctor_detail::parse_timestamp;
using doctor_detail::trim;

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

// A fix and the device it applies to: the advice follows the device the run used.
struct Fix {
  enum Device { kAny, kGpu, kCpu };
  const char* text;
  Device device = kAny;
};

std::vector<std::string> fixes_for(bool gpu, std::initializer_list<Fix> all) {
  std::vector<std::string> out;
  for (const Fix& f : all)
    if (f.device == Fix::kAny || (f.device == Fix::kGpu) == gpu) out.push_back(f.text);
  return out;
}

// --- Detectors ---------------------------------------------------------------------------------

void find_oom(const LogReport& log, bool gpu, std::vector<Finding>* out) {
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
    if (auto p = l.find("tried to allocate "); p != std::string::npos && tried.empty()) {
      // "Tried to allocate 9.33 GiB (GPU 0; ...)", "Tried to allocate 20.00 MiB. GPU 0 has ..."
      std::istringstream words(log.lines[i].substr(p + 18));
      std::string amount, unit;
      words >> amount >> unit;
      while (!unit.empty() && (unit.back() == '.' || unit.back() == ',')) unit.pop_back();
      tried = trim(amount + " " + unit);
    }
  }
  if (f.evidence.empty()) return;
  int64_t last_iter = log.iterations.empty() ? 0 : log.iterations.back().iteration;
  f.title = fmt::format("out of memory{}{}",
                        last_iter > 0 ? fmt::format(" after iteration {}", last_iter)
                                      : " before the first logged iteration",
                        tried.empty() ? "" : fmt::format(" (tried to allocate {})", tried));
  f.fixes = fixes_for(
      gpu,
      {{"recompute activations: --recompute-granularity selective, or full "
        "(--recompute-granularity full --recompute-method uniform --recompute-num-layers 1)"},
       {"shard the optimizer state: --use-distributed-optimizer"},
       {"a smaller --micro-batch-size (keep --global-batch-size: more micro-batches)"},
       {"more model parallelism: a larger --pipeline-model-parallel-size, or "
        "--tensor-model-parallel-size with --sequence-parallel"},
       {"fewer MPI ranks per node: each rank holds its own share of the node's memory", Fix::kCpu},
       {"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True when reserved memory is far above "
        "allocated (fragmentation)",
        Fix::kGpu},
       {"check the layout first: `mtron plan` prints the memory per GPU (CPU: per rank) of "
        "each layout"}});
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

// Megatron prints a loss only when its average over the interval is positive: a complete line
// without "lm loss" whose interval was not all skipped iterations had a NaN (or Inf) loss.
bool loss_missing(const IterationRecord& r, const IterationRecord* prev) {
  const int64_t interval = r.iteration - (prev ? prev->iteration : 0);
  return !r.has_loss && r.after_loss_fields && r.skipped < interval;
}

void find_nan(const LogReport& log, std::vector<Finding>* out) {
  Finding f = make(Severity::kCritical, "nan", "", 90);
  int64_t first = -1;
  bool missing = false;
  const IterationRecord* prev = nullptr;
  for (const IterationRecord* r : series(log)) {
    const bool no_loss = loss_missing(*r, prev);
    if (r->loss_nan || r->grad_nan || r->nan_iterations > 0 || no_loss) {
      if (first < 0) first = r->iteration;
      missing |= no_loss;
      add_evidence(f, log, r->line, 3);
    }
    prev = r;
  }
  for (size_t i = 0; i < log.lines.size(); ++i) {
    const std::string l = lower(log.lines[i]);
    // Megatron's result validation names the check that rejected a result ("Unexpected result
    // 10.8 ... (message='found NaN in local forward loss calculation')"): NaN only if the
    // result is.
    if (contains(l, "unexpected result") && contains(l, "message=") &&
        !contains(l, "unexpected result nan") && !contains(l, "unexpected result inf") &&
        !contains(l, "unexpected result -inf"))
      continue;
    if (contains(l, "found nan") || contains(l, "nan in") || contains(l, "found inf") ||
        contains(l, "is nan") || contains(l, "detected nan") || contains(l, "=nan)")) {
      add_evidence(f, log, int64_t(i + 1));
      if (first < 0) first = 0;
    }
  }
  if (f.evidence.empty()) return;
  f.title = first > 0 ? fmt::format("NaN/Inf in the loss or gradients from iteration {}", first)
                      : "NaN/Inf in the loss or gradients";
  if (missing) f.title += " (the iteration line has no lm loss: Megatron leaves out a NaN loss)";
  f.fixes = {"lower --lr or lengthen --lr-warmup-iters; keep --clip-grad 1.0",
             "train in --bf16 rather than --fp16 (no overflow to Inf in bf16's range)",
             "a smaller --init-method-std (e.g. 0.006 for large hidden sizes)",
             "check the data around the failing iteration (corrupt or repeated documents)",
             "resume from the last checkpoint before the first NaN"};
  out->push_back(f);
}

std::vector<std::string> divergence_fixes() {
  return {"a longer warmup: raise --lr-warmup-iters (e.g. 1-2% of --train-iters)",
          "a lower peak --lr", "--clip-grad 1.0 (global-norm clipping) if it is off or larger",
          "a smaller --init-method-std such as 0.006 for wide models",
          "--bf16 instead of --fp16; check the data for repeated or corrupt documents"};
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
    f.fixes = divergence_fixes();
    out->push_back(f);
    return;  // a spike report inside a divergence adds nothing
  }
  // The gradient norm explodes (its last values 10x its median over the first half of the
  // log) while the loss has stopped falling: the divergence before the loss shows it.
  std::vector<const IterationRecord*> gn;
  for (const IterationRecord* r : pts)
    if (r->grad_norm > 0) gn.push_back(r);
  if (gn.size() >= 10) {
    std::vector<double> first, last;
    for (size_t i = 0; i < gn.size() / 2; ++i) first.push_back(gn[i]->grad_norm);
    for (size_t i = gn.size() - w; i < gn.size(); ++i) last.push_back(gn[i]->grad_norm);
    const double base = median(first), now = median(last);
    if (now > 10 * base && now > 1 && tail > lo * 1.02) {
      size_t from = gn.size() / 2;
      while (from < gn.size() && gn[from]->grad_norm < 3 * base) ++from;
      Finding f = make(Severity::kCritical, "divergence",
                       fmt::format("divergence: the gradient norm grows from {:.3g} to {:.3g} "
                                   "(from iteration {}) while the loss stops falling ({:.3f} "
                                   "-> {:.3f})",
                                   base, now, gn[std::min(from, gn.size() - 1)]->iteration, lo,
                                   pts.back()->loss),
                       78);
      add_evidence(f, log, gn[std::min(from, gn.size() - 1)]->line);
      add_evidence(f, log, gn.back()->line);
      f.fixes = divergence_fixes();
      out->push_back(f);
      return;
    }
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

// fp16's dynamic loss scale starts high (Megatron: 2^32) and halves at every overflow until the
// gradients fit: iterations skipped before the first applied step, with the scale still at
// least this, are that warm-up, not a problem.
constexpr double kWarmupScaleFloor = 1024;

// The number after `key` in `l` (lower case), or -1.
double number_after(const std::string& l, const char* key) {
  const size_t p = l.find(key);
  return p == std::string::npos ? -1 : std::atof(l.c_str() + p + strlen(key));
}

void find_skipped(const LogReport& log, std::vector<Finding>* out) {
  Finding warm = make(Severity::kInfo, "loss_scale_warmup", "", 10);
  Finding f = make(Severity::kWarning, "skipped_iterations", "", 60);
  int64_t warmup = 0, total = 0;
  double min_scale = -1, warm_scale = -1;
  double max_scale = -1;
  bool scaler_lines = false;  // DeepSpeed's loss scaler reported
  auto scale_seen = [&](double v) {
    if (v > 0) min_scale = min_scale < 0 ? v : std::min(min_scale, v);
    max_scale = std::max(max_scale, v);
  };
  bool applied = false;  // a step has been applied (an interval not all skipped)
  const IterationRecord* prev = nullptr;
  for (const IterationRecord* r : series(log)) {
    const int64_t interval = r->iteration - (prev ? prev->iteration : 0);
    const bool at_start = r->skipped > 0 && !applied && r->loss_scale >= kWarmupScaleFloor;
    max_scale = std::max(max_scale, r->loss_scale);
    if (at_start) {
      warmup += r->skipped;
      warm_scale = r->loss_scale;
      add_evidence(warm, log, r->line);
    } else {
      total += r->skipped;
      if (r->skipped > 0) add_evidence(f, log, r->line);
      scale_seen(r->loss_scale);
    }
    applied |= r->skipped < interval;
    prev = r;
  }
  // DeepSpeed's loss scaler (Megatron-DeepSpeed runs): "Overflow detected. Skipping step.
  // Attempted loss scale: 8.0, reducing to 4.0", "[deepspeed] OVERFLOW! Rank 0 Skipping step.
  // Attempted loss scale: 65536, reducing to 32768".
  for (size_t i = 0; i < log.lines.size(); ++i) {
    const std::string l = lower(log.lines[i]);
    if (!contains(l, "attempted loss scale:")) continue;
    scaler_lines = true;
    const double to = number_after(l, "reducing to ");
    const bool at_start = total == 0 && to >= kWarmupScaleFloor;
    ++(at_start ? warmup : total);
    add_evidence(at_start ? warm : f, log, int64_t(i + 1));
    if (at_start)
      warm_scale = to;
    else
      scale_seen(to);
  }
  if (warmup > 0) {
    warm.title = fmt::format(
        "fp16 loss-scale warm-up: {} iteration{} skipped at the start while the loss scale came "
        "down to {:.0f} (normal)",
        warmup, warmup == 1 ? "" : "s", warm_scale);
    warm.fixes = {"nothing to fix; --initial-loss-scale 65536 (2^16) instead of 2^32 shortens it"};
    out->push_back(warm);
  }
  if (total == 0) return;
  if (max_scale <= 1 && !scaler_lines) {
    // No dynamic loss scaling (bf16, fp32): an iteration is skipped for NaN/Inf gradients.
    f.title = fmt::format(
        "{} skipped iteration{} (NaN/Inf gradients; the run has no loss "
        "scaling)",
        total, total == 1 ? "" : "s");
    f.fixes = {
        "see the NaN finding: lower --lr, keep --clip-grad 1.0, check the data of the "
        "skipped iterations"};
    out->push_back(f);
    return;
  }
  f.title = fmt::format("{} skipped iteration{} (fp16 loss-scale overflow){}", total,
                        total == 1 ? "" : "s",
                        min_scale >= 0 ? fmt::format("; loss scale fell to {:g}", min_scale) : "");
  if (min_scale >= 0 && min_scale <= 1) {
    f.severity = Severity::kCritical;
    f.title +=
        ": gradients overflow even unscaled, the steps are skipped and the model stops "
        "learning";
  }
  f.score += double(total);
  f.fixes = {"--bf16 instead of --fp16 (bf16 has fp32's range: no loss scaling, no skips)",
             "a lower --lr or a longer --lr-warmup-iters if the overflows persist",
             "look for the layer that overflows (activations growing with depth, bad data)"};
  out->push_back(f);
}

// Where a slow step comes from, by device.
std::vector<std::string> slow_step_fixes(bool gpu) {
  return fixes_for(
      gpu,
      {{"look for a straggler: Megatron's --log-straggler, or nvidia-smi/dmesg on each node "
        "(thermal or power throttling, ECC errors, a failing link)",
        Fix::kGpu},
       {"NCCL_DEBUG=INFO for a collective that fell back to a slower transport", Fix::kGpu},
       {"other processes on the node (top, the load average) and ranks x OMP_NUM_THREADS "
        "within the cores (mpirun --bind-to core)",
        Fix::kCpu},
       {"the file system: data loading (--num-workers) and checkpoint saves (--async-save) show "
        "up as slow steps"}});
}

void find_low_mfu(const LogReport& log,
                  const DoctorOptions& o,
                  bool gpu,
                  const std::vector<const IterationRecord*>& pts,
                  std::vector<Finding>* out) {
  // The first logged interval includes start-up; skip it.
  std::vector<double> tf, logged_mfu;
  for (size_t i = 1; i < pts.size(); ++i) {
    if (pts[i]->tflops > 0) tf.push_back(pts[i]->tflops);
    if (pts[i]->mfu > 0) logged_mfu.push_back(pts[i]->mfu);
  }
  if (tf.empty()) return;
  const double achieved = median(tf);
  std::string why;
  double score = 0;
  if (o.expected_tflops > 0 && achieved < 0.75 * o.expected_tflops) {
    why = fmt::format("{:.4g} TFLOP/s/GPU against {:.4g} predicted by the plan ({:.0f}%)", achieved,
                      o.expected_tflops, 100 * achieved / o.expected_tflops);
    score = 1 - achieved / o.expected_tflops;
  } else if (o.expected_tflops <= 0 && (o.peak_flops > 0 || !logged_mfu.empty())) {
    // Against the given hardware's peak, else the MFU mtron's own line reports.
    const double mfu = o.peak_flops > 0 ? achieved * 1e12 / o.peak_flops : median(logged_mfu);
    const std::string peak = o.peak_flops > 0 ? o.peak_name : "the peak the log names";
    const double floor = gpu ? 0.25 : 0.10;
    if (mfu < floor) {
      why = fmt::format("{:.4g} TFLOP/s/GPU is {:.1f}% MFU against {} ({})", achieved, 100 * mfu,
                        peak,
                        gpu ? "well-tuned Megatron runs reach 35-50% on GPUs"
                            : "mtron's CPU kernels reach 10-40% of a core's peak");
      score = 1 - mfu / floor;
    }
  }
  if (why.empty()) return;
  Finding f = make(Severity::kWarning, "low_mfu", "low MFU: " + why, 40 + 10 * score);
  add_evidence(f, log, pts[1]->line);
  add_evidence(f, log, pts.back()->line);
  f.fixes = fixes_for(
      gpu,
      {{"a larger --micro-batch-size if memory allows (bigger GEMMs, fewer pipeline bubbles)"},
       {"fused (flash) attention and --sequence-parallel with TP > 1", Fix::kGpu},
       {"keep --tensor-model-parallel-size <= 8, inside one node's NVLink", Fix::kGpu},
       {"--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather", Fix::kGpu},
       {"more micro-batches per step (--global-batch-size) or interleaving "
        "(--num-virtual-stages-per-pipeline-rank) when PP > 1"},
       {"check the network: NCCL_DEBUG=INFO shows which transport the collectives use", Fix::kGpu},
       {"--bf16 on CPUs with AMX or AVX-512 BF16; one rank per socket or NUMA node with "
        "OMP_NUM_THREADS = its cores",
        Fix::kCpu},
       {"calibrate and compare: `mpirun -np N mtron plan --calibrate`, then `mtron plan "
        "--hardware local-cpu` predicts the step",
        Fix::kCpu}});
  out->push_back(f);
}

// A slowdown: the iteration time keeps growing (most steps slower than the one before, the
// last quarter of the log at least 1.5x the first).
bool find_slowdown(const LogReport& log,
                   bool gpu,
                   const std::vector<const IterationRecord*>& pts,
                   std::vector<Finding>* out) {
  if (pts.size() < 3) return false;
  int up = 0;
  for (size_t i = 1; i < pts.size(); ++i) up += pts[i]->elapsed_ms > pts[i - 1]->elapsed_ms;
  const size_t q = std::max<size_t>(1, pts.size() / 4);
  std::vector<double> first, last;
  for (size_t i = 0; i < q; ++i) {
    first.push_back(pts[i]->elapsed_ms);
    last.push_back(pts[pts.size() - 1 - i]->elapsed_ms);
  }
  const double a = median(first), b = median(last);
  if (double(up) < 0.6 * double(pts.size() - 1) || b < 1.5 * a) return false;
  Finding f =
      make(Severity::kWarning, "slowdown",
           fmt::format("slowdown: the iteration time grows from {:.0f} to {:.0f} ms "
                       "between iterations {} and {} (+{:.0f}%)",
                       a, b, pts.front()->iteration, pts.back()->iteration, 100 * (b / a - 1)),
           47);
  add_evidence(f, log, pts.front()->line);
  add_evidence(f, log, pts[pts.size() / 2]->line);
  add_evidence(f, log, pts.back()->line);
  f.fixes = slow_step_fixes(gpu);
  f.fixes.insert(f.fixes.begin(),
                 "a step time that keeps growing is usually a leak: host memory (RSS) growing "
                 "with the iterations, state kept per step; a restart from the last checkpoint "
                 "restores the speed for a while");
  out->push_back(f);
  return true;
}

void find_throughput(const LogReport& log,
                     const DoctorOptions& o,
                     bool gpu,
                     std::vector<Finding>* out) {
  std::vector<const IterationRecord*> pts;
  for (const IterationRecord* r : series(log))
    if (r->elapsed_ms > 0) pts.push_back(r);
  if (pts.size() >= 6) find_low_mfu(log, o, gpu, pts, out);
  if (find_slowdown(log, gpu, pts, out) || pts.size() < 7) return;
  // Throughput drop: the iteration time rises and stays up (the first interval, start-up, left
  // out).
  const size_t start = 1;
  std::vector<double> ms;
  for (size_t i = start; i < pts.size(); ++i) ms.push_back(pts[i]->elapsed_ms);
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
      f.fixes = slow_step_fixes(gpu);
      out->push_back(f);
      return;
    }
  }
}

void find_stragglers(const LogReport& log, bool gpu, std::vector<Finding>* out) {
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
  f.fixes = fixes_for(
      gpu, {{"find the slow GPU or node: nvidia-smi -q (clocks, temperature, power, ECC), "
             "dmesg (Xid errors), and its NIC's link state",
             Fix::kGpu},
            {"rerun with --log-straggler to name the rank every log interval", Fix::kGpu},
            {"find the slow rank's cores: other processes on them (top), ranks sharing cores "
             "(mpirun --bind-to core --map-by socket), frequency scaling",
             Fix::kCpu},
            {"exclude the node (sbatch --exclude) and resume from the last checkpoint"},
            {"with PP: uneven stages (--decoder-first/last-pipeline-num-layers) also look like "
             "stragglers; `mtron plan` shows the per-stage balance"}});
  out->push_back(f);
}

void find_hang(const LogReport& log, bool gpu, std::vector<Finding>* out) {
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
    // PyTorch's watchdog names the collective: "WorkNCCL(SeqNum=33, OpType=ALLREDUCE, ...)
    // ran for 607565 milliseconds before timing out".
    std::string what = "a collective";
    for (const std::string& line : log.lines) {
      const size_t op = line.find("OpType=");
      if (op == std::string::npos) continue;
      const size_t end = line.find_first_of(",)", op);
      what = "NCCL " + line.substr(op + 7, end == std::string::npos ? 0 : end - op - 7);
      const double ms = number_after(lower(line), "ran for ");
      if (ms > 0) what += fmt::format(" (ran {:.0f} s)", ms / 1000);
      break;
    }
    f.title = log.iterations.empty()
                  ? fmt::format("hang: {} timed out before the first logged iteration", what)
                  : fmt::format("hang: {} timed out after iteration {}", what,
                                log.iterations.back().iteration);
  }
  f.fixes = fixes_for(
      gpu,
      {{"a rank died or diverged from the others' call sequence: read every rank's log for "
        "the first error (the timeout is only the symptom)"},
       {"with PP: mismatched --micro-batch-size/--seq-length across ranks, or uneven data, "
        "desynchronise the send/recv pairs"},
       {"NCCL_DEBUG=INFO shows the last collective of each rank; a larger "
        "--distributed-timeout-minutes only helps slow but progressing steps",
        Fix::kGpu},
       {"check the network (ibstat, link flaps) and the node health of the stuck ranks", Fix::kGpu},
       {"MPI: a rank blocked in a collective the others left (mpirun --timeout, or attach gdb "
        "to the stuck rank for its stack)",
        Fix::kCpu}});
  out->push_back(f);
}

// Megatron's result validation (--rerun-mode validate_results, megatron/core/
// rerun_state_machine.py): an unexpected result (NaN, Inf, a spiky loss) is recomputed on the same
// GPU; a different result there is a transient hardware error, the same one makes it save a
// checkpoint and exit (code 16) so that the iteration is recomputed on another GPU after resuming,
// where a different result means the first GPU is faulty and the same one a real problem.
void find_result_validation(const LogReport& log, bool gpu, std::vector<Finding>* out) {
  struct Outcome {
    const char* marker;  // lower case
    Severity severity;
    const char* kind;
    const char* title;
    double score;
    bool names_gpu;  // the line's "Rank R, node N, device D" is the GPU under suspicion
  };
  static const Outcome kOutcomes[] = {
      {"possible transient error", Severity::kCritical, "sdc_transient",
       "result validation: an unexpected result was not reproducible on the same GPU: a "
       "transient hardware error (silent data corruption)",
       93, true},
      {"possible persistent error", Severity::kCritical, "sdc_persistent",
       "result validation: an unexpected result reproduced on its GPU but not on another: the "
       "GPU of the first rerun (named in the stopped job's log) computes wrongly",
       94, false},
      {"correct result (but possible application error)", Severity::kCritical, "divergence",
       "result validation: the unexpected result reproduced on a different GPU: not the "
       "hardware, the loss or gradients really went bad",
       91, false},
      {"got rescheduled on the same gpu", Severity::kCritical, "result_validation_pending",
       "result validation: the job resumed on the GPU under suspicion and stopped again: resume "
       "it on another node",
       92, false},
      {"unexpected result is reproducible within the tolerance", Severity::kCritical,
       "result_validation_pending",
       "result validation: an unexpected result reproduced on the same GPU; the job saved a "
       "checkpoint and stopped (exit code 16) to recompute the iteration on another GPU",
       92, true},
  };
  int64_t injected = 0, unexpected = 0;
  std::string where;  // "rank R, node N, device D" of the failing check
  const Outcome* found = nullptr;
  std::vector<int64_t> lines;
  for (size_t i = 0; i < log.lines.size(); ++i) {
    const std::string l = lower(log.lines[i]);
    if (contains(l, "injecting error type") && !injected) injected = int64_t(i + 1);
    if (contains(l, "unexpected result") && contains(l, "message=") && !unexpected)
      unexpected = int64_t(i + 1);
    for (const Outcome& o : kOutcomes) {
      if (!contains(l, o.marker)) continue;
      // The most telling outcome: the order of kOutcomes (a second rerun's decides).
      if (!found || &o < found) found = &o;
      lines.push_back(int64_t(i + 1));
      const std::string& line = log.lines[i];
      if (const size_t r = line.find("Rank "); o.names_gpu && r != std::string::npos) {
        const size_t end = line.find(", iteration", r);
        where = line.substr(r, end == std::string::npos ? std::string::npos : end - r);
      }
    }
  }
  if (!found) return;
  Finding f = make(found->severity, found->kind, found->title, found->score);
  if (found->names_gpu && !where.empty()) f.title += " (" + where + ")";
  if (unexpected) add_evidence(f, log, unexpected);
  for (int64_t line : lines) add_evidence(f, log, line);
  if (injected) {
    // --error-injection-rate / --error-injection-type: the machinery's own test.
    f.severity = Severity::kInfo;
    f.title += ", an error injected on purpose";
    add_evidence(f, log, injected);
    f.fixes = {
        "nothing to fix: --error-injection-rate and --error-injection-type test the "
        "result validation; drop them for real training"};
    out->push_back(f);
    return;
  }
  if (found->kind == std::string("divergence")) {
    f.fixes = divergence_fixes();
  } else if (found->kind == std::string("result_validation_pending")) {
    f.fixes = {
        "resume from the checkpoint it saved (--load, the same flags) on another node: "
        "sbatch --exclude the node named above; the resumed job recomputes the iteration "
        "and says whether the GPU or the run is at fault"};
  } else {
    f.fixes = fixes_for(
        gpu, {{"take the node named above out of service and test its GPU: dcgmi diag -r 3, "
               "nvidia-smi -q (ECC errors, retired pages), dmesg (Xid errors)",
               Fix::kGpu},
              {"resume from the checkpoint (--load) with the node excluded (sbatch --exclude): "
               "validation goes on from the iteration it stopped at"},
              {"rerun the node's cores on a known workload (a memory test, `mtron train` of a "
               "small model compared with another node's losses)",
               Fix::kCpu}});
  }
  out->push_back(f);
}

bool ends_with(const std::string& s, const char* tail) {
  const size_t n = strlen(tail);
  return s.size() > n && s.compare(s.size() - n, n, tail) == 0;
}

// The last Python exception ("RuntimeError: ...", "torch.distributed.DistBackendError: ...")
// or fatal message of the log: its line (0: none).
int64_t fatal_line(const LogReport& log) {
  static const char* kFatal[] = {"terminate called after throwing", "segmentation fault",
                                 "core dumped", "childfailederror", "fatal python error"};
  int64_t line = 0;
  for (size_t i = 0; i < log.lines.size(); ++i) {
    // Without the launcher's prefix ("[rank3]: ", "3: ").
    std::string t = trim(log.lines[i]);
    if (const size_t c = t.find("]: "); c != std::string::npos && t[0] == '[') t = t.substr(c + 3);
    const std::string l = lower(t);
    bool fatal = false;
    for (const char* p : kFatal) fatal |= contains(l, p);
    // "SomeError: message" at the start of the line, as Python prints the exception.
    const size_t colon = t.find(": ");
    if (colon != std::string::npos && t.find(' ') > colon) {
      const std::string name = t.substr(0, colon);
      fatal |= ends_with(name, "Error") || ends_with(name, "Exception");
    }
    if (fatal) line = int64_t(i + 1);
  }
  return line;
}

// A run that ended in an error the other detectors do not name: a Python traceback or a
// fatal error.
void find_crash(const LogReport& log, std::vector<Finding>* out) {
  for (const Finding& f : *out)
    if (f.kind == "oom" || f.kind == "hang") return;  // they name the error already
  int64_t traceback = 0;
  std::string where;  // the innermost function of the last traceback
  for (size_t i = 0; i < log.lines.size(); ++i) {
    const std::string& line = log.lines[i];
    if (line.find("Traceback (most recent call last)") != std::string::npos && !traceback)
      traceback = int64_t(i + 1);
    if (const size_t in = line.find(", in ");
        traceback && in != std::string::npos && line.find("File \"") != std::string::npos)
      where = trim(line.substr(in + 5));
  }
  const int64_t error = fatal_line(log);
  if (!traceback && !error) return;
  const std::string when = log.iterations.empty()
                               ? "before the first logged iteration"
                               : fmt::format("after iteration {}", log.iterations.back().iteration);
  std::string what = error
                         ? trim(log.lines[size_t(error - 1)])
                         : fmt::format("a Python traceback{}", where.empty() ? "" : " in " + where);
  if (what.size() > 160) what = what.substr(0, 157) + "...";
  Finding f = make(Severity::kCritical, "crash", fmt::format("crash {}: {}", when, what), 95);
  if (traceback) add_evidence(f, log, traceback);
  if (error) add_evidence(f, log, error);
  f.fixes = {
      "read the first rank's traceback that names your code (the others often only "
      "report the collective the dead rank left)"};
  if (error && contains(lower(log.lines[size_t(error - 1)]), "nccl"))
    f.fixes.push_back(
        "NCCL errors: NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET for the transport and the "
        "failing peer; NCCL_SOCKET_IFNAME / NCCL_IB_HCA for the right interfaces");
  f.fixes.push_back("resume from the last checkpoint (--load) once fixed");
  out->push_back(f);
}

// Not a single training iteration: the run never got to (or never logged) a step.
void find_no_iterations(const LogReport& log, std::vector<Finding>* out) {
  if (!log.iterations.empty()) return;
  for (const Finding& f : *out)
    if (f.severity == Severity::kCritical) return;  // the error says why
  Finding f = make(Severity::kWarning, "no_iterations",
                   "no training iteration in the log: the run never logged a step", 30);
  f.fixes = {
      "is this the whole log? Megatron logs every --log-interval iterations on the last "
      "rank; with torchrun, --tee 3 keeps each rank's output",
      "a run that stops before its first step: look at the end of the log for the "
      "stage it reached (data loading, checkpoint loading, the first collective)"};
  out->push_back(f);
}

}  // namespace

std::vector<Finding> diagnose(const LogReport& log, const DoctorOptions& o) {
  const bool gpu = log.device == LogDevice::kUnknown ? o.gpu : log.device == LogDevice::kGpu;
  std::vector<Finding> out;
  find_oom(log, gpu, &out);
  find_nan(log, &out);
  find_hang(log, gpu, &out);
  find_crash(log, &out);
  find_result_validation(log, gpu, &out);
  find_loss_anomalies(log, &out);
  find_skipped(log, &out);
  find_stragglers(log, gpu, &out);
  find_throughput(log, o, gpu, &out);
  find_no_iterations(log, &out);
  std::stable_sort(out.begin(), out.end(), [](const Finding& a, const Finding& b) {
    if (a.severity != b.severity) return a.severity < b.severity;
    return a.score > b.score;
  });
  return out;
}

}  // namespace mtron::plan
