// defines: Network, Achievable, Hardware, hardware_catalog, find_hardware,
//          find_hardware_by_device_name, find_network, network_catalog, detect_local_cpu,
//          detect_cpu, rank_device
//
// The hardware catalog: peak FLOP/s by precision, memory, GPUs per node, NVLink and inter-node
// bandwidth, and the fitted achievable fractions of the time model. The data lives in
// catalog/hardware/*.json, embedded into the binary at build time (cmake/EmbedFiles.cmake).
// The trainer's MFU and the planner's predictions use this one table, so a plan's MFU and a
// run's MFU share their denominator.
//
// GPUs are devices. A CPU node is described per node (cores, memory, bandwidth); mtron runs one
// MPI rank per share of its cores, and rank_device() gives the share one rank sees.
#pragma once

#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "mtron/core/precision.h"

namespace mtron {

struct Network {
  std::string name;
  std::string description;
  double bandwidth = 0;  // bytes/s per direction per adapter
  double latency = 0;    // seconds per ring step
};

// Fractions of the peaks a well-tuned framework reaches (the time model's fitted constants,
// docs/planning.md).
struct Achievable {
  double gemm = 0.75;       // large bf16/fp16 GEMMs / peak
  double gemm_fp8 = 0.6;    // large fp8 GEMMs / fp8 peak
  double gemm_fp32 = 0.75;  // large fp32 GEMMs / fp32 peak
  // Per output tile, a GEMM's prologue/epilogue costs about this many steps of its K loop, so
  // its math takes (1 + gemm_k_overhead / K) times the large-K time.
  double gemm_k_overhead = 0;
  // Fixed host-side work per iteration (optimizer launches over many tensors, gradient norm,
  // loss reduction, logging), seconds.
  double step_overhead = 0;
  double attention = 0.5;  // fused (flash) attention / peak
  double memory = 0.8;     // elementwise kernels / memory bandwidth
  double nvlink = 0.8;     // collective bus bandwidth / NVLink (CPU: shared memory) bandwidth
  double network = 0.85;   // collective bus bandwidth / inter-node bandwidth
};

struct Hardware {
  std::string name;
  std::string description;
  bool is_cpu = false;
  int ranks_per_node = 0;  // CPU only: 0 describes the node; > 0 is one rank's share of it
  std::vector<std::string> aliases;
  std::vector<std::string> device_names;  // CUDA device names that select this entry

  // Dense peak FLOP/s per device: a GPU, a CPU core (node description) or a CPU rank (rank
  // view); 0 where the precision is unsupported.
  double peak_fp32 = 0, peak_bf16 = 0, peak_fp16 = 0, peak_fp8 = 0;
  double memory_bytes = 0;      // per device (CPU node description: per node)
  double memory_bandwidth = 0;  // bytes/s per device (CPU node description: per node)
  int gpus_per_node = 1;        // CPU: cores (node description) or ranks (rank view)
  int nvlink_domain = 1;        // GPUs joined by NVLink/NVSwitch; CPU: all of the node
  double nvlink_bandwidth = 0;  // bytes/s per direction per device; CPU: MPI shared memory
  double nvlink_latency = 0;    // seconds per ring step
  double pcie_bandwidth = 0;    // bytes/s per direction, between GPUs outside an NVLink domain
  Network network;
  int nics_per_node = 0;
  Achievable achievable;

  double peak_flops(Precision p) const;
  // What MFU divides by: the peak of the precision the GEMMs run in, except fp8, whose MFU is
  // quoted against the bf16 peak (NVIDIA's convention: 989 TFLOP/s on an H100 either way).
  double mfu_peak_flops(Precision p) const;
  // Achievable fraction of peak_flops(p) for large GEMMs.
  double gemm_efficiency(Precision p) const;
  // Inter-node bandwidth per GPU and direction (the node's adapters shared by its GPUs).
  double inter_node_bandwidth() const;
  // "H100 SXM5 ... bf16 dense peak 989.4 TFLOP/s per GPU (fp8 dense peak 1979; ...)": what
  // an MFU figure divides by, and the fp8 peak it does not divide by.
  std::string peak_description(Precision p) const;
};

// Every catalog entry (GPUs from catalog/hardware, plus "local-cpu", detected).
const std::vector<Hardware>& hardware_catalog();
// By name or alias, case-insensitive; "local-cpu" (or "cpu") detects this machine. Throws
// mtron::Error listing the known names.
Hardware find_hardware(std::string_view name);
// The catalog entry whose device_names contain the CUDA device name; nullptr when none does.
const Hardware* find_hardware_by_device_name(std::string_view device_name);
const std::vector<Network>& network_catalog();
const Network& find_network(std::string_view name);

// This machine as a CPU node: cores (the container's cpuset, else the online CPUs), memory
// (MemTotal), and the first profile of catalog/hardware/cpu.json that matches /proc/cpuinfo; a
// profile in FLOP per cycle takes the clock measured once a process where it is above
// /proc/cpuinfo's (a VM reports its base clock while the cores boost).
Hardware detect_local_cpu();
// The same from a /proc/cpuinfo text (x86 or aarch64) and, where > 0, a measured clock in MHz.
Hardware detect_cpu(std::istream& cpuinfo, double measured_mhz = 0);

// What one rank sees when `ranks_per_node` ranks share a node. A GPU is unchanged (one rank per
// GPU). A CPU node's cores, memory and bandwidths are divided among its ranks; with more ranks
// than cores they time-share, so the per-rank peak keeps falling.
Hardware rank_device(const Hardware& node, int ranks_per_node);

}  // namespace mtron
