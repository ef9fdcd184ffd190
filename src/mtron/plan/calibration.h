// defines: GemmSample, CollectiveSample, AttentionSample, GemmFit, AttentionFit,
//          RankCalibration, Calibration, load_calibration, save_calibration, fit_gemm,
//          fit_attention, fit_link, gpu_entry, perf_from_calibration, default_calibration_path,
//          load_or_new_calibration
//
// A calibration of this machine for the time model: GEMM times by shape and precision,
// memory bandwidth, and collective times, measured by `mtron plan --calibrate` (plan/calibrate.h)
// with a given number of ranks per node, and the constants fitted to them. A CPU entry (MPI
// collectives) replaces the hardware catalog's estimates for `--hardware local-cpu`, so the plan
// predicts mtron's own CPU runs; a GPU entry (`--calibrate --device cuda`: the kernel layer's
// cuBLASLt GEMMs and fused attention, NCCL collectives inside the node) replaces them for the
// catalog GPU whose CUDA device name it was measured on. Stored as JSON; one entry per
// ranks-per-node count (CPU) or per GPU model.
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

// One fused attention forward + backward: q [S, B, H, D], k and v [S, B, G, D].
struct AttentionSample {
  int64_t B = 0, S = 0, H = 0, G = 0, D = 0;
  bool causal = true;
  double seconds = 0;  // forward + backward, median
};

// Fitted: seconds = flops / gemm_flops + bytes / gemm_bandwidth + gemm_overhead.
struct GemmFit {
  double flops = 0, bandwidth = 0, overhead = 0;
  double median_rel_error = 0;  // of the fit over its samples
};

// Fitted: the time model's fused-attention rate (PerfParams::attention_flops), the forward
// counted as 2 B S^2 H D (causal) and the backward as 2.5 forwards, on blocks of S tokens.
struct AttentionFit {
  double flops = 0;
  double median_rel_error = 0;
};

struct RankCalibration {
  std::string device = "cpu";  // "cpu", or the CUDA device name ("NVIDIA H200")
  int64_t ranks_per_node = 1;  // ranks (GPUs) measured at once on the node
  int64_t threads_per_rank = 1;
  std::map<std::string, std::vector<GemmSample>> gemm;  // by precision name
  std::map<std::string, GemmFit> gemm_fit;
  double memory_bandwidth = 0;             // bytes/s per rank, all ranks streaming at once
  std::vector<AttentionSample> attention;  // GPUs
  AttentionFit attention_fit;
  std::vector<CollectiveSample> collectives;
  Link link;  // fitted collective bus bandwidth and latency per rank
};

struct Calibration {
  std::string host;
  std::string cpu;
  std::string date;
  std::map<int64_t, RankCalibration> by_ranks;  // CPU: ranks per node -> measurements
  std::map<std::string, RankCalibration> gpus;  // GPU: CUDA device name -> measurements
};

// The default file: $MTRON_CALIBRATION, else ~/.cache/mtron/calibration.json.
std::string default_calibration_path();
// Throws mtron::Error naming the file when it is missing or malformed.
Calibration load_calibration(const std::string& path);
void save_calibration(const Calibration& c, const std::string& path);
// The file's calibration to merge a new entry into, or an empty one when there is no file.
Calibration load_or_new_calibration(const std::string& path);

// Fit of the GEMM model (non-negative coefficients, relative errors, robust to outliers).
GemmFit fit_gemm(const std::vector<GemmSample>& samples, Precision p);
// Fit of bus bandwidth and latency to ring-model collective times (the same way).
Link fit_link(const std::vector<CollectiveSample>& samples);
// Fit of the fused-attention rate: the median over the samples, and its error.
AttentionFit fit_attention(const std::vector<AttentionSample>& samples);

// The entry of `cal` measured on the cluster's GPU (its catalog device names), or nullptr.
const RankCalibration* gpu_entry(const Calibration& cal, const Cluster& c);

// The time model's parameters from a calibration. CPU: the entry for the cluster's ranks per
// node, or the nearest one scaled by the ratio of ranks. GPU: the catalog's parameters with the
// measured GEMM fit (the same model as on the CPU: compute + operand bytes + per-call overhead),
// attention rate, memory bandwidth and, when measured with several GPUs, the in-node link.
// Throws mtron::Error when the precision was not measured, or the GPU has no entry.
PerfParams perf_from_calibration(const Calibration& cal, const Cluster& c, Precision p);

}  // namespace mtron::plan
