#include "mtron/plan/calibration.h"

#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "mtron/core/error.h"

namespace mtron::plan {
namespace {

using nlohmann::json;

const char* op_name(Collective c) {
  switch (c) {
    case Collective::kAllReduce:
      return "all_reduce";
    case Collective::kAllGather:
      return "all_gather";
    case Collective::kReduceScatter:
      return "reduce_scatter";
    case Collective::kAllToAll:
      return "all_to_all";
    case Collective::kSendRecv:
      return "send_recv";
  }
  MT_ASSERT(false, "bad Collective");
}

Collective parse_op(const std::string& s) {
  for (Collective c : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                       Collective::kAllToAll, Collective::kSendRecv})
    if (s == op_name(c)) return c;
  MT_CHECK(false, "calibration: unknown collective '", s, "'");
}

// Weighted least squares over the columns in `use` (relative error: each row is divided by its
// measured time). Solves the normal equations by Gaussian elimination; returns false when the
// system is singular.
template <size_t K>
bool least_squares(const std::vector<std::array<double, K>>& x,
                   const std::vector<double>& y,
                   const std::vector<double>& weight,
                   const std::array<bool, K>& use,
                   std::array<double, K>* coef) {
  std::array<std::array<double, K + 1>, K> a{};
  for (size_t r = 0; r < x.size(); ++r) {
    const double w = weight[r] / (y[r] * y[r]);
    for (size_t i = 0; i < K; ++i) {
      if (!use[i]) continue;
      for (size_t j = 0; j < K; ++j)
        if (use[j]) a[i][j] += w * x[r][i] * x[r][j];
      a[i][K] += w * x[r][i] * y[r];
    }
  }
  for (size_t i = 0; i < K; ++i)
    if (!use[i]) a[i][i] = 1;  // fixes the unused coefficient at 0
  for (size_t c = 0; c < K; ++c) {
    size_t piv = c;
    for (size_t r = c + 1; r < K; ++r)
      if (std::abs(a[r][c]) > std::abs(a[piv][c])) piv = r;
    if (std::abs(a[piv][c]) < 1e-300) return false;
    std::swap(a[c], a[piv]);
    for (size_t r = 0; r < K; ++r) {
      if (r == c) continue;
      const double f = a[r][c] / a[c][c];
      for (size_t j = c; j <= K; ++j) a[r][j] -= f * a[c][j];
    }
  }
  for (size_t i = 0; i < K; ++i) (*coef)[i] = a[i][K] / a[i][i];
  return true;
}

// Non-negative least squares by trying every subset of columns that holds the first (K is 2 or
// 3): the feasible fit with the smallest weighted relative error.
template <size_t K>
std::array<double, K> nonnegative_fit(const std::vector<std::array<double, K>>& x,
                                      const std::vector<double>& y,
                                      const std::vector<double>& weight) {
  std::array<double, K> best{};
  double best_err = std::numeric_limits<double>::infinity();
  // Every subset of terms keeps the first, the rate the fit is for: a fit that explained the
  // times without it (from bytes or a fixed cost alone, as noisy samples of nearly collinear
  // terms can) would report an infinite rate. The first term alone always fits a positive
  // coefficient, since every time is positive.
  for (unsigned mask = 1; mask < (1u << K); mask += 2) {
    std::array<bool, K> use{};
    for (size_t i = 0; i < K; ++i) use[i] = mask & (1u << i);
    std::array<double, K> c{};
    if (!least_squares(x, y, weight, use, &c)) continue;
    bool ok = true;
    for (size_t i = 0; i < K; ++i) ok &= c[i] >= 0;
    if (!ok) continue;
    double sq = 0;
    for (size_t r = 0; r < x.size(); ++r) {
      double pred = 0;
      for (size_t i = 0; i < K; ++i) pred += c[i] * x[r][i];
      const double rel = (pred - y[r]) / y[r];
      sq += weight[r] * rel * rel;
    }
    if (sq < best_err) {
      best_err = sq;
      best = c;
    }
  }
  return best;
}

// Robust version: iteratively reweighted towards the least absolute relative error, so a few
// measurements disturbed by other processes (a shared machine) do not pull the fit. Reports
// the median relative error of the fit.
template <size_t K>
std::array<double, K> robust_fit(const std::vector<std::array<double, K>>& x,
                                 const std::vector<double>& y,
                                 double* median_rel_error) {
  std::vector<double> w(x.size(), 1.0), rel(x.size());
  std::array<double, K> c{};
  for (int iter = 0; iter < 8; ++iter) {
    c = nonnegative_fit(x, y, w);
    for (size_t r = 0; r < x.size(); ++r) {
      double pred = 0;
      for (size_t i = 0; i < K; ++i) pred += c[i] * x[r][i];
      rel[r] = std::abs(pred - y[r]) / y[r];
      w[r] = 1.0 / std::max(rel[r], 0.02);
    }
  }
  std::vector<double> sorted = rel;
  std::sort(sorted.begin(), sorted.end());
  *median_rel_error = sorted.empty() ? 0 : sorted[sorted.size() / 2];
  return c;
}

double ring_fraction(Collective op, int64_t n) {
  const double frac = double(n - 1) / double(n);
  return op == Collective::kAllReduce ? 2 * frac : op == Collective::kSendRecv ? 1.0 : frac;
}

json samples_json(const std::vector<GemmSample>& v) {
  json a = json::array();
  for (const auto& s : v) a.push_back({{"M", s.M}, {"N", s.N}, {"K", s.K}, {"seconds", s.seconds}});
  return a;
}

}  // namespace

std::string default_calibration_path() {
  if (const char* env = std::getenv("MTRON_CALIBRATION"); env && *env) return env;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.cache/mtron/calibration.json";
}

GemmFit fit_gemm(const std::vector<GemmSample>& samples, Precision p) {
  MT_CHECK(!samples.empty(), "calibration: no GEMM samples to fit");
  std::vector<std::array<double, 3>> x;
  std::vector<double> y;
  for (const auto& s : samples) {
    const double M = double(s.M), N = double(s.N), K = double(s.K);
    x.push_back({2 * M * N * K, gemm_operand_bytes(M, N, K, p), 1.0});
    y.push_back(s.seconds);
  }
  GemmFit f;
  const auto c = robust_fit(x, y, &f.median_rel_error);
  f.flops = c[0] > 0 ? 1 / c[0] : std::numeric_limits<double>::infinity();
  f.bandwidth = c[1] > 0 ? 1 / c[1] : std::numeric_limits<double>::infinity();
  f.overhead = c[2];
  return f;
}

Link fit_link(const std::vector<CollectiveSample>& samples) {
  std::vector<std::array<double, 2>> x;
  std::vector<double> y;
  for (const auto& s : samples) {
    if (s.ranks < 2) continue;
    const double steps = std::min(double(s.ranks - 1), 2 * std::log2(double(s.ranks)) + 1) *
                         (s.op == Collective::kAllReduce ? 2 : 1);
    x.push_back(
        {ring_fraction(s.op, s.ranks) * s.bytes, s.op == Collective::kSendRecv ? 1 : steps});
    y.push_back(s.seconds);
  }
  Link l;
  l.name = "shared memory";
  if (x.empty()) return l;
  double err = 0;
  const auto c = robust_fit(x, y, &err);
  l.bandwidth = c[0] > 0 ? 1 / c[0] : std::numeric_limits<double>::infinity();
  l.latency = c[1];
  return l;
}

AttentionFit fit_attention(const std::vector<AttentionSample>& samples) {
  AttentionFit f;
  if (samples.empty()) return f;
  // The rate each sample implies under the time model, then the median.
  std::vector<double> rates;
  for (const auto& s : samples) {
    const double tokens = double(s.B * s.S), width = double(s.H * s.D);
    const double keys = double(s.S) * (s.causal ? 1.0 : 2.0);  // a full square: twice the work
    const auto [fwd, bwd] = fused_attention_seconds(1.0, tokens, keys, width, double(s.S));
    rates.push_back((fwd + bwd) / s.seconds);
  }
  std::vector<double> sorted = rates;
  std::sort(sorted.begin(), sorted.end());
  f.flops = sorted[sorted.size() / 2];
  std::vector<double> rel;
  for (double r : rates) rel.push_back(std::abs(f.flops / r - 1));
  std::sort(rel.begin(), rel.end());
  f.median_rel_error = rel[rel.size() / 2];
  return f;
}

const RankCalibration* gpu_entry(const Calibration& cal, const Cluster& c) {
  for (const auto& [device, r] : cal.gpus)
    for (const auto& name : c.hardware.device_names)
      if (name == device) return &r;
  return nullptr;
}

Calibration load_calibration(const std::string& path) {
  std::ifstream in(path);
  MT_CHECK(in, "cannot read the calibration file ", path,
           " (run `mpirun -np N mtron plan --calibrate` first, or pass --calibration FILE)");
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  MT_CHECK(!j.is_discarded(), "calibration file ", path, " is not valid JSON");
  Calibration c;
  try {
    c.host = j.value("host", "");
    c.cpu = j.value("cpu", "");
    c.date = j.value("date", "");
    for (const json& e : j.at("entries")) {
      RankCalibration r;
      r.device = e.value("device", "cpu");
      r.ranks_per_node = e.at("ranks_per_node").get<int64_t>();
      r.threads_per_rank = e.value("threads_per_rank", int64_t(1));
      r.memory_bandwidth = e.at("memory_bandwidth").get<double>();
      for (const auto& [prec, arr] : e.at("gemm").items()) {
        auto& v = r.gemm[prec];
        for (const json& s : arr)
          v.push_back({s.at("M").get<int64_t>(), s.at("N").get<int64_t>(), s.at("K").get<int64_t>(),
                       s.at("seconds").get<double>()});
        r.gemm_fit[prec] = fit_gemm(v, parse_precision(prec));
      }
      for (const json& s : e.value("collectives", json::array()))
        r.collectives.push_back({parse_op(s.at("op").get<std::string>()),
                                 s.at("ranks").get<int64_t>(), s.at("bytes").get<double>(),
                                 s.at("seconds").get<double>()});
      r.link = fit_link(r.collectives);
      for (const json& s : e.value("attention", json::array()))
        r.attention.push_back({s.at("B").get<int64_t>(), s.at("S").get<int64_t>(),
                               s.at("H").get<int64_t>(), s.at("G").get<int64_t>(),
                               s.at("D").get<int64_t>(), s.value("causal", true),
                               s.at("seconds").get<double>()});
      r.attention_fit = fit_attention(r.attention);
      if (r.device == "cpu")
        c.by_ranks[r.ranks_per_node] = std::move(r);
      else
        c.gpus[r.device] = std::move(r);
    }
  } catch (const json::exception& e) {
    MT_CHECK(false, "calibration file ", path, " is malformed: ", e.what());
  }
  MT_CHECK(!c.by_ranks.empty() || !c.gpus.empty(), "calibration file ", path, " has no entries");
  return c;
}

Calibration load_or_new_calibration(const std::string& path) {
  return std::filesystem::exists(path) ? load_calibration(path) : Calibration{};
}

void save_calibration(const Calibration& c, const std::string& path) {
  json entries = json::array();
  std::vector<const RankCalibration*> all;
  for (const auto& [n, r] : c.by_ranks) all.push_back(&r);
  for (const auto& [d, r] : c.gpus) all.push_back(&r);
  for (const RankCalibration* rp : all) {
    const RankCalibration& r = *rp;
    json gemm = json::object(), fits = json::object();
    for (const auto& [prec, v] : r.gemm) {
      gemm[prec] = samples_json(v);
      const GemmFit f = fit_gemm(v, parse_precision(prec));
      fits[prec] = {{"gflops", f.flops / 1e9},
                    {"gbps", f.bandwidth / 1e9},
                    {"overhead_us", f.overhead * 1e6},
                    {"median_rel_error", f.median_rel_error}};
    }
    json coll = json::array();
    for (const auto& s : r.collectives)
      coll.push_back(
          {{"op", op_name(s.op)}, {"ranks", s.ranks}, {"bytes", s.bytes}, {"seconds", s.seconds}});
    const Link l = fit_link(r.collectives);
    json attn = json::array();
    for (const auto& a : r.attention)
      attn.push_back({{"B", a.B},
                      {"S", a.S},
                      {"H", a.H},
                      {"G", a.G},
                      {"D", a.D},
                      {"causal", a.causal},
                      {"seconds", a.seconds}});
    const AttentionFit af = fit_attention(r.attention);
    entries.push_back({{"device", r.device},
                       {"ranks_per_node", r.ranks_per_node},
                       {"threads_per_rank", r.threads_per_rank},
                       {"memory_bandwidth", r.memory_bandwidth},
                       {"gemm", gemm},
                       {"collectives", coll},
                       {"attention", attn},
                       {"fitted",
                        {{"gemm", fits},
                         {"attention_tflops", af.flops / 1e12},
                         {"attention_median_rel_error", af.median_rel_error},
                         {"link_gbps", std::isfinite(l.bandwidth) ? l.bandwidth / 1e9 : 0.0},
                         {"link_latency_us", l.latency * 1e6}}}});
  }
  const json j = {{"host", c.host}, {"cpu", c.cpu}, {"date", c.date}, {"entries", entries}};
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    MT_CHECK(out, "cannot write the calibration file ", tmp);
    out << j.dump(2) << "\n";
    MT_CHECK(out.good(), "writing ", tmp, " failed");
  }
  std::filesystem::rename(tmp, path);
}

namespace {

const GemmFit& gemm_fit_for(const RankCalibration& e, Precision p) {
  const std::string prec(precision_name(p));
  auto it = e.gemm_fit.find(prec);
  MT_CHECK(
      it != e.gemm_fit.end(), "the calibration of ", e.device, " has no ", prec,
      " GEMM measurements (measured: ",
      [&] {
        std::string s;
        for (const auto& [k, v] : e.gemm_fit) s += (s.empty() ? "" : ", ") + k;
        return s;
      }(),
      ")");
  return it->second;
}

// A GPU: the catalog's parameters, with what was measured on that GPU model.
PerfParams gpu_perf(const Calibration& cal, const Cluster& c, Precision p) {
  const RankCalibration* e = gpu_entry(cal, c);
  MT_CHECK(e, "the calibration has no entry for ", c.hardware.description,
           " (run `mtron plan --calibrate --device cuda` on one)");
  PerfParams pp = perf_from_hardware(c, p);
  const GemmFit& g = gemm_fit_for(*e, p);
  pp.gemm_flops = g.flops;
  pp.gemm_bandwidth = g.bandwidth;
  pp.gemm_overhead = g.overhead;
  pp.gemm_k_overhead = 0;           // in the fitted per-call overhead and bandwidth terms
  pp.gemm_overlaps_memory = false;  // the fitted model: compute + operand bytes
  if (e->attention_fit.flops > 0) pp.attention_flops = e->attention_fit.flops;
  if (e->memory_bandwidth > 0) pp.memory_bandwidth = e->memory_bandwidth;
  if (e->link.bandwidth > 0 && std::isfinite(e->link.bandwidth)) {
    pp.nvlink.bandwidth = e->link.bandwidth;
    pp.nvlink.latency = e->link.latency;
  }
  return pp;
}

}  // namespace

PerfParams perf_from_calibration(const Calibration& cal, const Cluster& c, Precision p) {
  if (!c.hardware.is_cpu) return gpu_perf(cal, c, p);
  MT_CHECK(!cal.by_ranks.empty(),
           "the calibration has no CPU entry (run `mpirun -np N mtron "
           "plan --calibrate` on this machine)");
  const int64_t want = c.devices_per_node;
  // The entry measured with this many ranks, else the nearest (by ratio), rescaled: the node's
  // cores, memory bandwidth and shared-memory bandwidth are shared by its ranks.
  const RankCalibration* e = nullptr;
  double best = std::numeric_limits<double>::infinity();
  for (const auto& [n, r] : cal.by_ranks) {
    const double d = std::abs(std::log(double(n) / double(want)));
    if (d < best) {
      best = d;
      e = &r;
    }
  }
  MT_ASSERT(e, "empty calibration");
  const double scale = double(e->ranks_per_node) / double(want);
  const GemmFit& g = gemm_fit_for(*e, p);
  PerfParams pp;
  pp.gemm_flops = g.flops * scale;
  pp.gemm_bandwidth = g.bandwidth * scale;
  pp.gemm_overhead = g.overhead;
  pp.gemm_overlaps_memory = false;
  pp.attention_flops = pp.gemm_flops;
  pp.fused_attention = false;
  pp.fused_bias = false;
  pp.memory_bandwidth = e->memory_bandwidth * scale;
  pp.peak_flops = c.device().mfu_peak_flops(p);
  Link link = e->link;
  if (!(link.bandwidth > 0)) {  // measured with one rank: no collectives, keep the estimate
    link.bandwidth = c.device().nvlink_bandwidth * c.hardware.achievable.nvlink;
    link.latency = c.hardware.nvlink_latency;
  } else {
    link.bandwidth *= scale;
  }
  link.name = "shared memory";
  pp.nvlink = pp.pcie = pp.network = link;
  pp.nvlink_domain = pp.devices_per_node = want;
  pp.overlap_interference = 1.0;  // the CPU trainer does not overlap; kept for completeness
  return pp;
}

}  // namespace mtron::plan
