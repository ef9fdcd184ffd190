#include "mtron/core/hardware.h"

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "mtron/core/error.h"
#include "mtron/embedded/hardware_catalog_files.h"

namespace mtron {
namespace {

using nlohmann::json;

constexpr double kGB = 1e9;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = char(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

// The catalog file that defines `key` ("hardware", "networks", "cpus"), merged over all files.
std::vector<json> catalog_entries(const char* key) {
  std::vector<json> out;
  for (const auto& [path, text] : embedded::hardware_catalog_files()) {
    json doc;
    try {
      doc = json::parse(text);
    } catch (const json::exception& e) {
      MT_ASSERT(false, "embedded catalog ", path, " is not valid JSON: ", e.what());
    }
    if (doc.contains(key))
      for (const json& e : doc[key]) out.push_back(e);
  }
  return out;
}

Achievable parse_achievable(const json& j) {
  Achievable a;
  a.gemm = j.value("gemm", a.gemm);
  a.gemm_fp8 = j.value("gemm_fp8", 0.8 * a.gemm);
  a.gemm_fp32 = j.value("gemm_fp32", a.gemm);
  a.gemm_k_overhead = j.value("gemm_k_overhead", 0.0);
  a.step_overhead = j.value("step_overhead_ms", 0.0) * 1e-3;
  a.attention = j.value("attention", a.attention);
  a.memory = j.value("memory", a.memory);
  a.nvlink = j.value("nvlink", a.nvlink);
  a.network = j.value("network", a.network);
  return a;
}

std::vector<Network> load_networks() {
  std::vector<Network> out;
  for (const json& j : catalog_entries("networks")) {
    Network n;
    n.name = j.at("name").get<std::string>();
    n.description = j.value("description", "");
    n.bandwidth = j.at("gbps_per_nic").get<double>() * kGB;
    n.latency = j.value("latency_us", 0.0) * 1e-6;
    out.push_back(n);
  }
  return out;
}

Hardware parse_gpu(const json& j) {
  Hardware h;
  h.name = j.at("name").get<std::string>();
  h.description = j.value("description", "");
  h.aliases = j.value("aliases", std::vector<std::string>{});
  h.device_names = j.value("device_names", std::vector<std::string>{});
  const json& p = j.at("peak_tflops");
  h.peak_fp32 = p.value("fp32", 0.0) * 1e12;
  h.peak_bf16 = p.value("bf16", 0.0) * 1e12;
  h.peak_fp16 = p.value("fp16", 0.0) * 1e12;
  h.peak_fp8 = p.value("fp8", 0.0) * 1e12;
  h.memory_bytes = j.at("memory_gib").get<double>() * kGiB;
  h.memory_bandwidth = j.at("memory_bandwidth_gbps").get<double>() * kGB;
  h.gpus_per_node = j.at("gpus_per_node").get<int>();
  h.nvlink_domain = j.value("nvlink_domain", h.gpus_per_node);
  h.nvlink_bandwidth = j.at("nvlink_gbps").get<double>() * kGB;
  h.nvlink_latency = j.value("nvlink_latency_us", 10.0) * 1e-6;
  h.pcie_bandwidth = j.value("pcie_gbps", 32.0) * kGB;
  h.network = find_network(j.value("network", "none"));
  h.nics_per_node = j.value("nics_per_node", h.gpus_per_node);
  h.achievable = parse_achievable(j.value("achievable", json::object()));
  return h;
}

struct CpuInfo {
  std::string vendor, model_name;
  int family = -1, model = -1;
  double mhz = 0;
  std::vector<std::string> flags;
  bool has(std::string_view f) const {
    return std::find(flags.begin(), flags.end(), f) != flags.end();
  }
};

// x86 names its vendor, model and flags (vendor_id, model, flags); aarch64 its implementer, part
// and features (CPU implementer, CPU part, Features) and often no model name at all.
CpuInfo read_cpuinfo(std::istream& in) {
  CpuInfo c;
  std::string line;
  while (std::getline(in, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) {
      if (!c.flags.empty()) break;  // first processor block is enough
      continue;
    }
    std::string key = line.substr(0, colon);
    key.erase(key.find_last_not_of(" \t") + 1);
    std::string val = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "vendor_id" || key == "CPU implementer") c.vendor = val;
    if (key == "model name") c.model_name = val;
    if (key == "cpu family") c.family = std::atoi(val.c_str());
    if (key == "model") c.model = std::atoi(val.c_str());
    if (key == "CPU part") c.model = int(std::strtol(val.c_str(), nullptr, 16));
    if (key == "cpu MHz") c.mhz = std::atof(val.c_str());
    if (key == "flags" || key == "Features") {
      std::istringstream ss(val);
      for (std::string f; ss >> f;) c.flags.push_back(f);
    }
  }
  if (c.model_name.empty() && c.vendor.rfind("0x", 0) == 0)
    c.model_name = fmt::format("CPU implementer {}, part {:#x}", c.vendor, c.model);
  // aarch64 kernels print no clock in /proc/cpuinfo: take cpufreq's maximum (kHz).
  if (c.mhz <= 0) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
    double khz = 0;
    if (f >> khz) c.mhz = khz / 1000.0;
  }
  return c;
}

// Cores of this node available to the job: the container's cpuset when there is one, else
// the online CPUs. Not this process's affinity mask: under mpirun each rank is bound to a
// share of the node, and the node is what is described here.
int node_cores() {
  for (const char* path :
       {"/sys/fs/cgroup/cpuset.cpus.effective", "/sys/fs/cgroup/cpuset/cpuset.effective_cpus"}) {
    std::ifstream in(path);
    std::string list;
    if (!(in >> list)) continue;
    int n = 0;
    std::istringstream ss(list);
    for (std::string range; std::getline(ss, range, ',');) {
      const auto dash = range.find('-');
      n += dash == std::string::npos
               ? 1
               : std::atoi(range.c_str() + dash + 1) - std::atoi(range.c_str()) + 1;
    }
    if (n > 0) return n;
  }
  return int(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
}

double mem_total_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  while (in >> key) {
    if (key == "MemTotal:") {
      in >> kb;
      return kb * 1024.0;
    }
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

// The clock the cores run at, in MHz: a chain of dependent integer adds (one cycle each on every
// x86-64 and Arm core), timed; the fastest of 20 samples of about 0.2 ms each, so that a sample
// the scheduler did not interrupt (other ranks share the cores) sets it. Some 5 ms once a
// process.
double measure_clock_mhz() {
  double best = 0;
  for (int s = 0; s < 20; ++s) {
    uint64_t x = 0;
    constexpr int kIters = 1 << 16, kAdds = 8;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kIters; ++i) {
      for (int a = 0; a < kAdds; ++a) {
        asm volatile("" : "+r"(x));  // keeps each add: the compiler cannot fold the chain
        x += 1;
      }
    }
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (t > 0) best = std::max(best, double(kIters) * kAdds / t / 1e6);
  }
  return best;
}

bool profile_matches(const json& match, const CpuInfo& c) {
  if (match.contains("vendor") && match["vendor"].get<std::string>() != c.vendor) return false;
  if (match.contains("family") && match["family"].get<int>() != c.family) return false;
  if (match.contains("models")) {
    auto models = match["models"].get<std::vector<int>>();
    if (std::find(models.begin(), models.end(), c.model) == models.end()) return false;
  }
  for (const auto& f : match.value("flags", std::vector<std::string>{}))
    if (!c.has(f)) return false;
  return true;
}

}  // namespace

double Hardware::peak_flops(Precision p) const {
  switch (p) {
    case Precision::kFP32:
      return peak_fp32;
    case Precision::kBF16:
      return peak_bf16;
    case Precision::kFP16:
      return peak_fp16;
    case Precision::kFP8:
      return peak_fp8;
  }
  MT_ASSERT(false, "bad Precision");
}

double Hardware::mfu_peak_flops(Precision p) const {
  return peak_flops(p == Precision::kFP8 ? Precision::kBF16 : p);
}

double Hardware::gemm_efficiency(Precision p) const {
  switch (p) {
    case Precision::kFP32:
      return achievable.gemm_fp32;
    case Precision::kFP8:
      return achievable.gemm_fp8;
    default:
      return achievable.gemm;
  }
}

double Hardware::inter_node_bandwidth() const {
  if (gpus_per_node <= 0) return 0;
  return network.bandwidth * nics_per_node / gpus_per_node;
}

std::string Hardware::peak_description(Precision p) const {  // the MFU denominator
  const char* unit = !is_cpu ? "GPU" : ranks_per_node > 0 ? "rank" : "core";
  const Precision q = p == Precision::kFP8 ? Precision::kBF16 : p;
  std::string s = fmt::format("{} {} dense peak {:.4g} TFLOP/s per {}", description,
                              precision_name(q), peak_flops(q) / 1e12, unit);
  // The two peaks users confuse (989 and 1979 TFLOP/s on an H100): say which one this is.
  if (peak_fp8 > 0 && q != Precision::kFP32)
    s += fmt::format(" (fp8 dense peak {:.4g}; fp8 runs are quoted against the {} peak too)",
                     peak_fp8 / 1e12, precision_name(q));
  return s;
}

const std::vector<Network>& network_catalog() {
  static const std::vector<Network> networks = load_networks();
  return networks;
}

const Network& find_network(std::string_view name) {
  const std::string l = lower(name);
  std::string known;
  for (const Network& n : network_catalog()) {
    if (lower(n.name) == l) return n;
    known += (known.empty() ? "" : ", ") + n.name;
  }
  MT_CHECK(false, "unknown network '", name, "' (known: ", known, ")");
}

const std::vector<Hardware>& hardware_catalog() {
  static const std::vector<Hardware> catalog = [] {
    std::vector<Hardware> v;
    for (const json& j : catalog_entries("hardware")) v.push_back(parse_gpu(j));
    v.push_back(detect_local_cpu());
    return v;
  }();
  return catalog;
}

Hardware find_hardware(std::string_view name) {
  const std::string l = lower(name);
  if (l == "local-cpu" || l == "cpu") return detect_local_cpu();
  std::string known;
  for (const Hardware& h : hardware_catalog()) {
    if (lower(h.name) == l) return h;
    for (const auto& a : h.aliases)
      if (lower(a) == l) return h;
    known += (known.empty() ? "" : ", ") + h.name;
  }
  MT_CHECK(false, "unknown hardware '", name, "' (known: ", known,
           "; add an entry to catalog/hardware/*.json)");
}

const Hardware* find_hardware_by_device_name(std::string_view device_name) {
  for (const Hardware& h : hardware_catalog())
    for (const auto& d : h.device_names)
      if (d == device_name) return &h;
  return nullptr;
}

Hardware detect_local_cpu() {
  static const double measured_mhz = measure_clock_mhz();
  std::ifstream in("/proc/cpuinfo");
  return detect_cpu(in, measured_mhz);
}

Hardware detect_cpu(std::istream& cpuinfo, double measured_mhz) {
  CpuInfo info = read_cpuinfo(cpuinfo);
  // A VM's /proc/cpuinfo reports its base (or TSC) clock while the cores run at their boost
  // clock: the measured clock where it is higher.
  const bool measured = measured_mhz > info.mhz;
  if (measured) info.mhz = measured_mhz;
  const int cores = node_cores();
  for (const json& p : catalog_entries("cpus")) {
    if (!profile_matches(p.value("match", json::object()), info)) continue;
    Hardware h;
    h.name = "local-cpu";
    h.is_cpu = true;
    h.aliases = {"cpu"};
    const std::string model = info.model_name.empty() ? "unknown model" : info.model_name;
    h.description = fmt::format("{} ({}), {} cores", p.at("name").get<std::string>(), model, cores);
    if (p.contains("per_core_gflops")) {
      const json& g = p["per_core_gflops"];
      h.peak_fp32 = g.value("fp32", 0.0) * 1e9;
      h.peak_bf16 = g.value("bf16", 0.0) * 1e9;
      h.peak_fp16 = g.value("fp16", 0.0) * 1e9;
      h.peak_fp8 = g.value("fp8", 0.0) * 1e9;
    } else {
      const double hz = (info.mhz > 0 ? info.mhz : 2000.0) * 1e6;
      h.description += fmt::format(" at {:.2f} GHz{}", hz / 1e9,
                                   measured       ? " (measured)"
                                   : info.mhz > 0 ? ""
                                                  : " (assumed)");
      const json& f = p.at("flops_per_cycle");
      h.peak_fp32 = f.value("fp32", 0.0) * hz;
      h.peak_bf16 = f.value("bf16", 0.0) * hz;
      h.peak_fp16 = f.value("fp16", 0.0) * hz;
      h.peak_fp8 = f.value("fp8", 0.0) * hz;
    }
    h.memory_bytes = mem_total_bytes();
    h.memory_bandwidth = (p.at("memory_bandwidth_gbps").get<double>() +
                          (cores - 1) * p.value("memory_bandwidth_gbps_per_extra_core", 0.0)) *
                         kGB;
    h.gpus_per_node = cores;
    h.nvlink_domain = cores;
    h.nvlink_bandwidth = p.at("shm_gbps").get<double>() * kGB;
    h.nvlink_latency = p.value("shm_latency_us", 1.0) * 1e-6;
    h.pcie_bandwidth = h.nvlink_bandwidth;
    h.network = find_network("eth-100");
    h.nics_per_node = 1;
    h.achievable = parse_achievable(p.value("achievable", json::object()));
    return h;
  }
  MT_ASSERT(false, "catalog/hardware/cpu.json has no catch-all CPU profile");
}

Hardware rank_device(const Hardware& node, int ranks_per_node) {
  MT_CHECK(ranks_per_node >= 1, "ranks per node must be >= 1 (got ", ranks_per_node, ")");
  if (!node.is_cpu) return node;
  MT_ASSERT(node.ranks_per_node == 0, "rank_device() takes a node description");
  const int cores = node.gpus_per_node;
  // Each rank runs cores/ranks threads; beyond one rank per core the ranks time-share.
  const double share = double(cores) / ranks_per_node;
  Hardware r = node;
  r.ranks_per_node = ranks_per_node;
  r.peak_fp32 *= share;
  r.peak_bf16 *= share;
  r.peak_fp16 *= share;
  r.peak_fp8 *= share;
  r.memory_bytes /= ranks_per_node;
  r.memory_bandwidth /= ranks_per_node;
  r.nvlink_bandwidth /= ranks_per_node;
  r.pcie_bandwidth /= ranks_per_node;
  r.gpus_per_node = ranks_per_node;
  r.nvlink_domain = ranks_per_node;
  return r;
}

}  // namespace mtron
