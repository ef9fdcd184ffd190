// defines: Link, PerfParams, perf_from_hardware, all_to_all_seconds, StepTime,
//          estimate_step_time, gemm_seconds, collective_seconds, Collective,
//          fused_attention_seconds
//
// Time of one training iteration on the slowest pipeline stage:
// - compute: every GEMM of Megatron's FLOPs formula at the device's achievable rate, plus a
//   memory term for its operands (so small GEMMs run below peak), fused attention at its own
//   rate, elementwise kernels (norms, residuals, activations, RoPE, softmax, loss) at the
//   achievable memory bandwidth, recompute when enabled (full: the layers' forward; selective:
//   the forward of each of its --recompute-modules);
// - tensor parallel: all-reduce (or all-gather + reduce-scatter with SP) per layer, exposed
//   in the forward pass, overlapped with the weight-gradient GEMM in the backward pass,
//   hidden behind GEMMs with --tp-comm-overlap (at a fitted interference cost);
// - context parallel: the ring exchange of K/V, overlapped with the attention of each step;
// - expert parallel: dispatch and combine all-to-all per MoE layer, exposed;
// - pipeline: 1F1B with bubble (p-1)/(v*m), point-to-point sends per micro-batch;
// - data parallel: gradient reduce-scatter (all-reduce) and parameter all-gather, overlapped
//   with the last micro-batch's backward and the first one's forward;
// - optimizer: Adam over the local shard at memory bandwidth.
// Links: NVLink inside an NVLink domain, PCIe inside a node, the network across nodes.
// The constants are the hardware catalog's "achievable" fractions (docs/planning.md), or a
// calibration of this machine (plan/calibration.h).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "mtron/core/model_config.h"
#include "mtron/plan/layout.h"

namespace mtron::plan {

// A collective's bus bandwidth (bytes/s per rank) and per-step latency.
struct Link {
  double bandwidth = 0;
  double latency = 0;
  std::string name;  // "NVLink", "PCIe", "ib-ndr400", "shared memory"
};

enum class Collective { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kSendRecv };
// Ring-algorithm time for `bytes` (the full buffer of one rank) over n ranks.
double collective_seconds(Collective c, double bytes, int64_t n, const Link& link);

// Everything the time model needs to know about one rank's device.
struct PerfParams {
  double gemm_flops = 0;       // achievable FLOP/s on large GEMMs in the layout's precision
  double gemm_bandwidth = 0;   // bytes/s for GEMM operands (memory term of small GEMMs)
  double gemm_overhead = 0;    // seconds per GEMM call
  double gemm_k_overhead = 0;  // Achievable::gemm_k_overhead
  double step_overhead = 0;    // Achievable::step_overhead
  // GPUs stream GEMM operands behind the math (time = max of the two, a roofline); CPU GEMM
  // libraries pack them first (time = sum), as the calibration fits.
  bool gemm_overlaps_memory = true;
  double attention_flops = 0;  // fused attention FLOP/s (when fused_attention)
  bool fused_attention = true;
  bool fused_bias = true;  // GPUs fuse bias adds into GEMM epilogues; mtron's CPU kernels do not
  double memory_bandwidth = 0;  // bytes/s for elementwise kernels
  double peak_flops = 0;        // MFU denominator (mfu_peak_flops)
  // Links by placement of a group: inside an NVLink domain, inside a node, across nodes.
  Link nvlink, pcie, network;
  int64_t nvlink_domain = 1, devices_per_node = 1;
  // Overlapped communication still slows the compute it hides behind (SMs/cores and memory
  // bandwidth it takes): this fraction of the communication time is charged.
  double overlap_interference = 0.2;
  // The link a group of `size` ranks at rank stride `stride` uses (layout order tp-cp-ep-dp-pp).
  Link link_for_group(int64_t size, int64_t stride) const;
};

PerfParams perf_from_hardware(const Cluster& c, Precision p);

// An all-to-all of `bytes` per rank over n ranks `stride` apart (expert parallelism's dispatch
// and combine): within a node the ring formula on its link; across nodes the larger of the part
// leaving the node through each rank's own network adapter and the part staying on NVLink.
double all_to_all_seconds(const PerfParams& pp, double bytes, int64_t n, int64_t stride);

// Bytes a GEMM moves: its inputs in the layout's precision (fp8: 1 byte) and an fp32 output
// (mtron's GEMMs accumulate and write fp32; kernels/gemm.h).
double gemm_operand_bytes(double M, double N, double K, Precision p);
double gemm_seconds(const PerfParams& pp, double M, double N, double K, Precision p);

// Causal fused attention of `tokens` queries of width q_width over `keys` keys, forward and
// backward (2.5 forwards: flash backward recomputes QK^T), at `flops` FLOP/s on long blocks,
// scaled by chunk / (chunk + 256) for blocks of `chunk` tokens. Returns {forward, backward}.
std::pair<double, double> fused_attention_seconds(
    double flops, double tokens, double keys, double q_width, double chunk);

struct StepTime {
  // Seconds per iteration, by cause (critical path of the slowest stage).
  double gemm = 0, attention = 0, elementwise = 0, recompute = 0;
  double tp_comm = 0, cp_comm = 0, ep_comm = 0;
  double pp_bubble = 0, pp_p2p = 0;
  double dp_comm = 0;    // exposed part
  double optimizer = 0;  // the Adam step, plus the fixed per-step host work
  double total = 0;
  // Derived figures.
  double tokens_per_second = 0;  // whole job
  double tokens_per_second_per_device = 0;
  double tflops_per_device = 0;  // Megatron's formula / time / world (its log's figure)
  double mfu = 0;                // against PerfParams::peak_flops
  double dp_comm_total = 0;      // before overlap, for the reasons
};

StepTime estimate_step_time(const ModelConfig& m, const Layout& l, const PerfParams& pp);

// One line per cause, with share of the step.
std::string format_step_time(const StepTime& t);

}  // namespace mtron::plan
