// runtime.cpp and allocator.cpp for the CPU emulation (sim.h): "device" memory is host memory
// from aligned_alloc, streams do not exist, copies are memcpy. The emulated device registers
// itself as Device::kCUDA, so code written against kernels/device.h runs unchanged.
#include <cstdlib>
#include <cstring>
#include <new>

#include "mtron/core/error.h"
#include "mtron/core/memory.h"
#include "mtron/kernels/cuda/cuda_ops.h"
#include "mtron/kernels/cuda/runtime.h"

namespace mtron::kernels::cuda {
namespace {

void* sim_alloc(size_t bytes) {
  const size_t rounded = (bytes + 255) / 256 * 256;  // cudaMalloc's alignment
  void* p = std::aligned_alloc(256, rounded == 0 ? 256 : rounded);
  if (!p) throw std::bad_alloc();
  return p;
}
void sim_free(void* p, size_t) {
  std::free(p);
}

}  // namespace

void cuda_fail(const char* file, int line, const char* what, int code) {
  detail::throw_internal(file, line, what, str("failed with code ", code, " (emulation)"));
}

void check_launch(const char*, cudaStream_t) {}

Scratch::Scratch(size_t bytes, cudaStream_t stream) : stream_(stream) {
  if (bytes > 0) ptr_ = sim_alloc(bytes);
}
Scratch::~Scratch() {
  sim_free(ptr_, 0);
}

void copy_to_host_sync(void* host, const void* dev, size_t bytes, cudaStream_t) {
  if (bytes > 0) std::memcpy(host, dev, bytes);
}

void fill_zero(const Ctx&, void* x, int64_t bytes) {
  if (bytes > 0) std::memset(x, 0, size_t(bytes));
}
void copy(const Ctx&, void* dst, const void* src, int64_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, size_t(bytes));
}
void copy_to_host(const Ctx&, void* host_dst, const void* src, int64_t bytes) {
  if (bytes > 0) std::memcpy(host_dst, src, size_t(bytes));
}
void copy_from_host(const Ctx&, void* dst, const void* host_src, int64_t bytes) {
  if (bytes > 0) std::memcpy(dst, host_src, size_t(bytes));
}
void synchronize(const Ctx&) {}

int device_count() {
  return 1;
}
void init_device(int ordinal) {
  MT_CHECK(ordinal == 0, "the CUDA emulation has one device, not ", ordinal);
  set_device_allocator(Device::kCUDA, DeviceAllocator{sim_alloc, sim_free});
}
DeviceProperties device_properties() {
  return DeviceProperties{.name = "CUDA emulation on the CPU"};
}
DeviceMemory device_memory() {
  const MemoryStats m = memory_stats(Device::kCUDA);
  return DeviceMemory{m.allocated, m.max_allocated, m.allocated, m.max_allocated};
}
void reset_peak_memory() {
  memory_reset_peak(Device::kCUDA);
}
void* create_stream() {
  return nullptr;
}
void destroy_stream(void*) {}

}  // namespace mtron::kernels::cuda
