// defines: device_count, device_unavailable, chunk_elems, init_device, DeviceProperties,
//          device_properties, DeviceMemory, device_memory, reset_peak_memory, default_stream,
//          create_stream, destroy_stream, synchronize, copy_to_host, copy_from_host,
//          copy_from_host_async, zero_release, DeviceWork, device_work
//
// Device management behind the same per-device dispatch as the ops, so that code above kernels
// never names CUDA. On the CPU these are trivial (one device, no streams, memcpy).
//
// CUDA: init_device(kCUDA, i) selects GPU i for the calling thread, creates the process's
// compute stream (non-blocking: it never waits for the legacy default stream, nor that stream
// for it) and registers the caching allocator (kernels/cuda/allocator.cpp) with core's
// device_alloc; call it once per process before the first CUDA tensor (a rank uses its
// node-local rank as i). A Ctx with stream == nullptr runs on the compute stream, and the
// allocator allocates and frees there, so a buffer freed by the host is reused only by work
// queued after everything queued before the free. Work on any other stream (NCCL's, or one made
// by create_stream, also non-blocking) must be joined into the compute stream (an event, a
// request's wait, a synchronize) before the host frees a buffer that work uses.
#pragma once

#include <cstdint>
#include <string>

#include "mtron/kernels/ctx.h"

namespace mtron::kernels {

// Devices of this kind visible to the process: 1 for the CPU; for CUDA, the GPUs (0 in a build
// without CUDA or on a machine without a driver).
int device_count(Device d);
// Why device_count(d) is 0, as a phrase ("this mtron was built without CUDA (...)", "no GPU is
// visible (...)"); empty when a device of this kind is there.
std::string device_unavailable(Device d);
// How many fp32 elements a loop that cuts a large output into chunks (the LM head's logits)
// should produce per chunk on this device: cache-sized on a CPU (2^22), large on a GPU (2^26:
// fewer launches and host synchronisations). The environment's MTRON_CHUNK_ELEMS, where set,
// holds for every device (a CPU run with a GPU's chunks counts the GPU's --profile costs).
int64_t chunk_elems(Device d);
void init_device(Device d, int ordinal);

struct DeviceProperties {
  std::string name;          // "NVIDIA H200" (what the hardware catalog matches), "cpu"
  int64_t memory_bytes = 0;  // device memory (0 for the CPU)
  int multiprocessors = 0;
  int compute_major = 0, compute_minor = 0;
};
// The current device of this kind (CUDA: the one init_device selected).
DeviceProperties device_properties(Device d);

struct DeviceMemory {
  int64_t allocated = 0;      // bytes held by tensors and arenas now (core's counters)
  int64_t max_allocated = 0;  // their high-water mark
  int64_t reserved = 0;       // bytes the caching allocator holds from the driver (>= allocated)
  int64_t max_reserved = 0;
};
DeviceMemory device_memory(Device d);
void reset_peak_memory(Device d);

// The stream of a Ctx with stream == nullptr (CUDA: the compute stream init_device made; nullptr
// before init_device and on the CPU).
void* default_stream(Device d);
// A new non-blocking stream (nullptr on the CPU) and its release.
void* create_stream(Device d);
void destroy_stream(Device d, void* stream);

// Waits until everything queued on ctx's stream has finished.
void synchronize(const Ctx& ctx);
// Copies between host memory and ctx's device. copy_to_host returns once the data is on the host
// (it waits for the work queued before it on ctx's stream); copy_from_host returns once the host
// buffer may be reused.
void copy_to_host(const Ctx& ctx, void* host_dst, const void* src, int64_t bytes);
void copy_from_host(const Ctx& ctx, void* dst, const void* host_src, int64_t bytes);
// Queues a copy of host memory to ctx's device and returns without waiting for it: the bytes are
// first copied into page-locked staging memory, so host_src may be reused at once, and a staging
// slot is reused only once the copy queued from it has completed (CUDA: an event per slot).
// Counted as a copy, not a host synchronisation. On the CPU: memcpy.
void copy_from_host_async(const Ctx& ctx, void* dst, const void* host_src, int64_t bytes);
// x[0, bytes) = 0. On the CPU the whole pages inside are returned to the system instead of
// written (they read as zeros, and take memory again once written), the partial ones at the ends
// written; other devices keep their memory (fill_zero). For buffers mostly unused at a time:
// FSDP's shards of parameters and gradients.
void zero_release(const Ctx& ctx, void* x, int64_t bytes);

// What this process has queued on devices of kind d since it started, and how often the host
// waited for one: kernel launches, GEMMs (cuBLASLt calls), device-side copies and memsets, and
// host synchronisations (copy_to_host, copy_from_host and synchronize; copy_from_host_async is a
// copy, and no op returns a value to the host). Collectives are not counted. All zero on the CPU,
// where nothing is queued.
struct DeviceWork {
  int64_t launches = 0, gemms = 0, copies = 0, host_syncs = 0;
  DeviceWork operator-(const DeviceWork& o) const {
    return {launches - o.launches, gemms - o.gemms, copies - o.copies, host_syncs - o.host_syncs};
  }
};
DeviceWork device_work(Device d);

}  // namespace mtron::kernels
