// The public kernel entry points (kernels/*.h), generated from the op lists (kernels/op.h): the
// op's contract (contracts.h: argument checks common to every backend, the cost for the
// profile), then a switch on ctx.device to the CPU (cpu/) or CUDA (cuda/) implementation. Also
// the device functions of kernels/device.h.
#include <cstdlib>
#include <limits>

#include "mtron/core/error.h"
#include "mtron/core/memory.h"
#include "mtron/core/profile.h"
#include "mtron/kernels/contracts.h"
#include "mtron/kernels/cpu/cpu_ops.h"
#include "mtron/kernels/cuda/cuda_ops.h"
#include "mtron/kernels/device.h"
#include "mtron/kernels/ops.h"

namespace mtron::kernels {

// ---- the ops --------------------------------------------------------------------------------

#define MT_DEFINE_DISPATCH(ret, name, id, contract, params, args) \
  ret name(const Ctx& ctx, MT_UNPACK params) {                    \
    MT_PROFILE(#id, contract args);                               \
    switch (ctx.device) {                                         \
      case Device::kCPU:                                          \
        return cpu::name(ctx, MT_UNPACK args);                    \
      case Device::kCUDA:                                         \
        return cuda::name(ctx, MT_UNPACK args);                   \
    }                                                             \
    MT_ASSERT(false, "unknown device ", int(ctx.device));         \
  }
MTRON_KERNEL_OPS(MT_DEFINE_DISPATCH)
#undef MT_DEFINE_DISPATCH

// device.h

namespace {

// cpu() on the CPU, cuda() on CUDA.
template <typename Cpu, typename Cuda>
auto by_device(Device d, Cpu cpu, Cuda cuda) {
  switch (d) {
    case Device::kCPU:
      return cpu();
    case Device::kCUDA:
      return cuda();
  }
  MT_ASSERT(false, "unknown device ", int(d));
}

}  // namespace

int device_count(Device d) {
  return by_device(
      d, [] { return 1; }, [] { return cuda::device_count(); });
}

std::string device_unavailable(Device d) {
  return by_device(
      d, [] { return std::string(); }, [] { return cuda::device_unavailable(); });
}

int64_t attention_max_head_dim(Device d) {
  return by_device(
      d, [] { return std::numeric_limits<int64_t>::max(); },
      [] { return cuda::attention_max_head_dim(); });
}

int64_t chunk_elems(Device d) {
  static const int64_t chosen = [] {
    const char* env = std::getenv("MTRON_CHUNK_ELEMS");
    if (!env || !*env) return int64_t(0);
    char* end = nullptr;
    const long long v = std::strtoll(env, &end, 10);
    MT_CHECK(*end == 0 && v >= 4096, "MTRON_CHUNK_ELEMS=", env,
             ": expected a number of floats, at least 4096 (2^26: a GPU's chunk)");
    return int64_t(v);
  }();
  if (chosen > 0) return chosen;
  return by_device(
      d, [] { return int64_t(1) << 22; },  // 16 MB of fp32: cache-sized GEMM outputs
      [] { return int64_t(1) << 26; });    // 256 MB: large GEMMs, few host synchronisations
}

void init_device(Device d, int ordinal) {
  by_device(
      d, [&] { MT_CHECK(ordinal == 0, "there is one CPU device (0), not ", ordinal); },
      [&] { cuda::init_device(ordinal); });
}

DeviceProperties device_properties(Device d) {
  return by_device(
      d, [] { return DeviceProperties{.name = "cpu"}; }, [] { return cuda::device_properties(); });
}

DeviceMemory device_memory(Device d) {
  return by_device(
      d,
      [&] {
        // No caching on the CPU: what is allocated is what is reserved.
        const MemoryStats m = memory_stats(d);
        return DeviceMemory{m.allocated, m.max_allocated, m.allocated, m.max_allocated};
      },
      [] { return cuda::device_memory(); });
}

void reset_peak_memory(Device d) {
  by_device(
      d, [&] { memory_reset_peak(d); }, [] { cuda::reset_peak_memory(); });
}

void* default_stream(Device d) {
  return by_device(
      d, []() -> void* { return nullptr; }, [] { return cuda::default_stream(); });
}

void* create_stream(Device d) {
  return by_device(
      d, []() -> void* { return nullptr; }, [] { return cuda::create_stream(); });
}

void destroy_stream(Device d, void* stream) {
  by_device(
      d, [] {}, [&] { cuda::destroy_stream(stream); });
}

void synchronize(const Ctx& ctx) {
  by_device(
      ctx.device, [] {}, [&] { cuda::synchronize(ctx); });
}

DeviceWork device_work(Device d) {
  return by_device(
      d, [] { return DeviceWork{}; }, [] { return cuda::device_work(); });
}

namespace {

// A copy between host and device memory (`what`: its name in the profile and the error).
template <typename CudaCopy>
void host_device_copy(const char* what,
                      const Ctx& ctx,
                      void* dst,
                      const void* src,
                      int64_t bytes,
                      CudaCopy cuda_copy) {
  MT_PROFILE(what);
  MT_ASSERT(bytes >= 0, what, " of ", bytes, " bytes");
  by_device(
      ctx.device, [&] { cpu::copy(ctx, dst, src, bytes); },
      [&] { cuda_copy(ctx, dst, src, bytes); });
}

}  // namespace

void copy_to_host(const Ctx& ctx, void* host_dst, const void* src, int64_t bytes) {
  host_device_copy("copy_to_host", ctx, host_dst, src, bytes, cuda::copy_to_host);
}

void copy_from_host(const Ctx& ctx, void* dst, const void* host_src, int64_t bytes) {
  host_device_copy("copy_from_host", ctx, dst, host_src, bytes, cuda::copy_from_host);
}

void copy_from_host_async(const Ctx& ctx, void* dst, const void* host_src, int64_t bytes) {
  host_device_copy("copy_from_host_async", ctx, dst, host_src, bytes, cuda::copy_from_host_async);
}

void zero_release(const Ctx& ctx, void* x, int64_t bytes) {
  char* p = static_cast<char*>(x);
  const auto [lo, hi] = device_discard(ctx.device, p, size_t(bytes));
  fill_zero(ctx, p, int64_t(lo));
  fill_zero(ctx, p + hi, bytes - int64_t(hi));
}

}  // namespace mtron::kernels
