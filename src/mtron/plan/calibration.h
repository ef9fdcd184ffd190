// defines: GemmSample, CollectiveSample, RankCalibration, Calibration, load_calibration,
//          save_calibration, fit_gemm, perf_from_calibration, default_calibration_path
//
// A calibration of this machine for the time model: GEMM times by shape and precision,
// memory bandwidth, and collective times under MPI, measured by `mtron plan --calibrate`
// (plan/calibrate.h) with a given number of ranks per node, and the constants fitted to them.
// It replaces the hardware catalog's estimates for `--hardware local-cpu`, so the plan
// predicts mtron's own CPU runs. Stored as JSON; one entry per ranks-per-node count.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "mtron/plan/time_model.h"

namespace mtron::plan {

struct GemmSample {
  int64_t M = 0, N = 0, K = 0;
  double seconds = 0;  // per call, median
};

struct CollectiveSample {
  Collective op = Collective::kAllReduce;
  int64_t ranks = 0;  // group size
  double bytes = 0;   // the buffer of one rank
  double seconds = 0;
};

// Fitted: seconds = flops / gemm_flops + bytes / gemm_bandwidth + gemm_overhead.
struct GemmFit {
  double flops = 0, bandwidth = 0, overhead = 0;
  double median_rel_error = 0;  // of the fit over its samples
};

struct RankCalibration {
  int64_t ranks_per_node = 1;
  int64_t threads_per_rank = 1;
  std::map<std::string, std::vector<GemmSample>> gemm;  // by precision name
  std::map<std::string, GemmFit> gemm_fit;
  double memory_bandwidth = 0;  // bytes/s per rank, all ranks streaming at once
  std::vector<CollectiveSample> collectives;
  Link link;  // fitted collective bus bandwidth and latency per rank
};

struct Calibration {
  std::string host;
  std::string cpu;
  std::string date;
  std::map<int64_t, RankCalibration> by_ranks;  // ranks per node -> measurements
};

// The default file: $MTRON_CALIBRATION, else ~/.cache/mtron/calibration.json.
std::string default_calibration_path();
// Throws mtron::Error naming the file when it is missing or malformed.
Calibration load_calibration(const std::string& path);
void save_calibration(const Calibration& c, const std::string& path);

// Fit of the GEMM model (non-negative coefficients, relative errors, robust to outliers).
GemmFit fit_gemm(const std::vector<GemmSample>& samples, Precision p);
// Fit of bus bandwidth and latency to ring-model collective times (the same way).
Link fit_link(const std::vector<CollectiveSample>& samples);

// The time model's parameters for a CPU cluster from a calibration: the entry for the
// cluster's ranks per node, or the nearest one scaled by the ratio of ranks. Throws
// mtron::Error when the precision was not measured.
PerfParams perf_from_calibration(const Calibration& cal, const Cluster& c, Precision p);

}  // namespace mtron::plan
