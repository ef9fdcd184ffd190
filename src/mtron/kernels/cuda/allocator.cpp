// The CUDA caching allocator behind core's device_alloc (memory.h) for Device::kCUDA.
//
// It is the driver's stream-ordered allocator (cudaMallocAsync / cudaFreeAsync) on each
// device's default memory pool, with the pool's release threshold raised to "never": freed
// blocks stay reserved by the process and are handed out again without a call into the driver,
// as PyTorch's caching allocator does (and as its cudaMallocAsync backend does exactly). Why
// the driver's pool rather than a hand-written free list: the pool knows the stream order of
// every free, so a block is reused only once the work that used it is done, and scratch memory
// of the kernels (runtime.h, Scratch) comes from the same pool.
//
// Tensors and arenas allocate and free on the process's compute stream (device.h), on which a
// Ctx without a stream runs, so a block freed by the host is handed out again only to work
// queued after the work queued before its free. Work on other streams joins the compute stream
// before a buffer it uses is freed (comm/nccl.cpp: a request's wait, the end of a blocking call).
// The compute stream is non-blocking: the legacy default stream, which synchronises with every
// blocking stream, is never used, so NCCL's own stream overlaps it.
//
// Discardable blocks (FSDP's sharded buffers) are mapped granule by granule instead (vmm.cpp).
//
// Memory reporting: allocated / max allocated are core's exact counters (a discardable block's
// backed granules); reserved / max reserved are the pool's (cudaMemPoolAttrReservedMemCurrent /
// High), which include scratch, plus the discardable blocks' physical memory (its current
// amount in both: the driver keeps no high-water mark of it).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "mtron/core/error.h"
#include "mtron/core/memory.h"
#include "mtron/kernels/cuda/cuda_ops.h"
#include "mtron/kernels/cuda/runtime.h"
#include "mtron/kernels/cuda/vmm.h"

namespace mtron::kernels::cuda {
namespace {

cudaMemPool_t current_pool() {
  int dev = 0;
  MT_CUDA_CHECK(cudaGetDevice(&dev));
  cudaMemPool_t pool;
  MT_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
  return pool;
}

int64_t pool_attr(cudaMemPool_t pool, cudaMemPoolAttr attr) {
  uint64_t v = 0;
  MT_CUDA_CHECK(cudaMemPoolGetAttribute(pool, attr, &v));
  return int64_t(v);
}

cudaStream_t compute_stream = nullptr;  // made by init_device

double gib(double bytes) {
  return bytes / double(int64_t(1) << 30);
}

void* cuda_alloc(size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaMallocAsync(&p, bytes == 0 ? 1 : bytes, compute_stream);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky
    int dev = 0;
    cudaGetDevice(&dev);
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    const MemoryStats m = memory_stats(Device::kCUDA);
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "CUDA out of memory: tried to allocate %.2f GiB on GPU %d (%.2f GiB total, "
                  "%.2f GiB free); mtron has %.2f GiB allocated, %.2f GiB reserved",
                  gib(double(bytes)), dev, gib(double(total_b)), gib(double(free_b)),
                  gib(double(m.allocated)),
                  gib(double(pool_attr(current_pool(), cudaMemPoolAttrReservedMemCurrent))));
    throw Error(buf);
  }
  MT_CUDA_CHECK(e);
  return p;
}

int64_t cuda_free(void* p, size_t bytes) {
  const int64_t held = vmm_free(p);
  if (held >= 0) return held;
  const cudaError_t e = cudaFreeAsync(p, compute_stream);
  if (e != cudaSuccess)  // called from destructors: report, do not throw
    std::fprintf(stderr, "mtron: cudaFreeAsync failed: %s\n", cudaGetErrorString(e));
  return int64_t(bytes);
}

}  // namespace

void init_device(int ordinal) {
  const int n = device_count();
  MT_CHECK(n > 0,
           "no CUDA GPU is visible to this process (check the driver with nvidia-smi, and "
           "CUDA_VISIBLE_DEVICES)");
  MT_CHECK(ordinal >= 0 && ordinal < n, "GPU ", ordinal, " requested, but ", n,
           " are visible (ranks per node must not exceed the GPUs per node)");
  MT_CUDA_CHECK(cudaSetDevice(ordinal));
  if (!compute_stream)
    MT_CUDA_CHECK(cudaStreamCreateWithFlags(&compute_stream, cudaStreamNonBlocking));
  cudaMemPool_t pool;
  MT_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, ordinal));
  uint64_t keep_all = UINT64_MAX;
  MT_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all));
  set_device_allocator(Device::kCUDA,
                       DeviceAllocator{cuda_alloc, cuda_free, vmm_alloc, vmm_discard, vmm_commit});
}

void* default_stream() {
  return compute_stream;
}

DeviceMemory device_memory() {
  const MemoryStats m = memory_stats(Device::kCUDA);
  const cudaMemPool_t pool = current_pool();
  return DeviceMemory{m.allocated, m.max_allocated,
                      pool_attr(pool, cudaMemPoolAttrReservedMemCurrent) + vmm_reserved(),
                      pool_attr(pool, cudaMemPoolAttrReservedMemHigh) + vmm_reserved()};
}

void reset_peak_memory() {
  memory_reset_peak(Device::kCUDA);
  uint64_t zero = 0;  // the high watermarks can only be reset to 0 (then track from now)
  MT_CUDA_CHECK(cudaMemPoolSetAttribute(current_pool(), cudaMemPoolAttrReservedMemHigh, &zero));
}

}  // namespace mtron::kernels::cuda
