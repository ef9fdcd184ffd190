// The CUDA runtime side of runtime.h and kernels/device.h: error reporting, launch checks,
// stream-ordered scratch memory, copies, streams and device properties. The caching allocator
// (init_device, device_memory) is allocator.cpp.
#include "mtron/kernels/cuda/runtime.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "mtron/core/error.h"
#include "mtron/kernels/cuda/cuda_ops.h"

namespace mtron::kernels::cuda {
namespace {

bool sync_after_launch() {
  static const bool on = [] {
    const char* v = std::getenv("MTRON_CUDA_SYNC");
    return v != nullptr && v[0] == '1';
  }();
  return on;
}

// Page-locked host memory for copy_from_host_async, one slot per copy in flight: a slot is taken
// again once its event (recorded after the copy from it) has been reached. Capacities are powers
// of two so that slots are reused across copies of nearby sizes. Never freed: cudaFreeHost
// synchronises the device, and the driver releases the memory at exit.
struct StagingSlot {
  void* host = nullptr;
  size_t capacity = 0;
  cudaEvent_t done = nullptr;
};

class Staging {
 public:
  // A free slot of at least `bytes`, allocating one when every slot is busy or too small.
  StagingSlot& take(size_t bytes) {
    for (StagingSlot& s : slots_) {
      if (s.capacity < bytes) continue;
      const cudaError_t e = cudaEventQuery(s.done);
      if (e == cudaSuccess) return s;
      if (e != cudaErrorNotReady) MT_CUDA_CHECK(e);
    }
    StagingSlot s;
    s.capacity = 4096;
    while (s.capacity < bytes) s.capacity *= 2;
    MT_CUDA_CHECK(cudaHostAlloc(&s.host, s.capacity, cudaHostAllocDefault));
    MT_CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
    slots_.push_back(s);
    return slots_.back();
  }
  std::mutex& mutex() { return mu_; }

 private:
  std::mutex mu_;
  std::vector<StagingSlot> slots_;
};

Staging& staging() {
  static Staging* s = new Staging;  // outlives the static destructors, like the CUDA runtime
  return *s;
}

}  // namespace

void cuda_fail(const char* file, int line, const char* what, int code) {
  const auto e = static_cast<cudaError_t>(code);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: clear it so the caller can recover
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw Error(str("CUDA out of memory in ", what, ": ", free_b >> 20, " MiB free of ",
                    total_b >> 20, " MiB"));
  }
  detail::throw_internal(file, line, what,
                         str("failed: ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}

void check_launch(const char* kernel, cudaStream_t stream) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess && sync_after_launch()) e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess)
    detail::throw_internal(__FILE__, __LINE__, kernel,
                           str("CUDA kernel ", kernel, " failed: ", cudaGetErrorName(e), " (",
                               cudaGetErrorString(e), ")"));
}

Scratch::Scratch(size_t bytes, cudaStream_t stream) : stream_(stream) {
  if (bytes > 0) MT_CUDA_CHECK(cudaMallocAsync(&ptr_, bytes, stream));
}

Scratch::~Scratch() {
  if (!ptr_) return;
  const cudaError_t e = cudaFreeAsync(ptr_, stream_);
  if (e != cudaSuccess)  // a destructor must not throw; a failed free is a leak, not a crash
    std::fprintf(stderr, "mtron: cudaFreeAsync of scratch memory failed: %s\n",
                 cudaGetErrorString(e));
}

void copy_to_host_sync(void* host, const void* dev, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  ++work().host_syncs;
  MT_CUDA_CHECK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, stream));
  MT_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void fill_zero(const Ctx& ctx, void* x, int64_t bytes) {
  if (bytes <= 0) return;
  ++work().copies;
  MT_CUDA_CHECK(cudaMemsetAsync(x, 0, size_t(bytes), stream_of(ctx)));
}

void copy(const Ctx& ctx, void* dst, const void* src, int64_t bytes) {
  if (bytes <= 0) return;
  ++work().copies;
  MT_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDeviceToDevice, stream_of(ctx)));
}

void copy_rows(const Ctx& ctx,
               void* dst,
               int64_t dst_pitch,
               const void* src,
               int64_t src_pitch,
               int64_t row_bytes,
               int64_t rows) {
  if (row_bytes <= 0 || rows <= 0) return;
  ++work().copies;
  MT_CUDA_CHECK(cudaMemcpy2DAsync(dst, size_t(dst_pitch), src, size_t(src_pitch), size_t(row_bytes),
                                  size_t(rows), cudaMemcpyDeviceToDevice, stream_of(ctx)));
}

void copy_to_host(const Ctx& ctx, void* host_dst, const void* src, int64_t bytes) {
  copy_to_host_sync(host_dst, src, size_t(bytes), stream_of(ctx));
}

void copy_from_host(const Ctx& ctx, void* dst, const void* host_src, int64_t bytes) {
  if (bytes <= 0) return;
  ++work().host_syncs;
  // Synchronised so the host buffer may be reused at once, pinned or not.
  MT_CUDA_CHECK(
      cudaMemcpyAsync(dst, host_src, size_t(bytes), cudaMemcpyHostToDevice, stream_of(ctx)));
  MT_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
}

void copy_from_host_async(const Ctx& ctx, void* dst, const void* host_src, int64_t bytes) {
  if (bytes <= 0) return;
  ++work().copies;
  Staging& st = staging();
  const std::lock_guard<std::mutex> lock(st.mutex());
  StagingSlot& slot = st.take(size_t(bytes));
  std::memcpy(slot.host, host_src, size_t(bytes));
  MT_CUDA_CHECK(
      cudaMemcpyAsync(dst, slot.host, size_t(bytes), cudaMemcpyHostToDevice, stream_of(ctx)));
  MT_CUDA_CHECK(cudaEventRecord(slot.done, stream_of(ctx)));
}

void synchronize(const Ctx& ctx) {
  ++work().host_syncs;
  MT_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
}

DeviceWork device_work() {
  const Work& w = work();
  return DeviceWork{w.launches, w.gemms, w.copies, w.host_syncs};
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver or no GPU: report none
    return 0;
  }
  return n;
}

std::string device_unavailable() {
  return device_count() > 0 ? "" : "no GPU is visible (check nvidia-smi, CUDA_VISIBLE_DEVICES)";
}

DeviceProperties device_properties() {
  int dev = 0;
  MT_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp p{};
  MT_CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
  return DeviceProperties{.name = p.name,
                          .memory_bytes = int64_t(p.totalGlobalMem),
                          .multiprocessors = p.multiProcessorCount,
                          .compute_major = p.major,
                          .compute_minor = p.minor};
}

void* create_stream() {
  cudaStream_t s = nullptr;
  // Non-blocking, as the compute stream (device.h): ordered with other streams only by events.
  MT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

void destroy_stream(void* stream) {
  if (stream) MT_CUDA_CHECK(cudaStreamDestroy(static_cast<cudaStream_t>(stream)));
}

}  // namespace mtron::kernels::cuda
