#include "mtron/core/memory.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "mtron/core/error.h"

namespace mtron {
namespace {

constexpr int kNumDevices = 2;

struct Counters {
  std::atomic<int64_t> allocated{0};
  std::atomic<int64_t> max_allocated{0};
};

Counters g_counters[kNumDevices];
DeviceAllocator g_allocators[kNumDevices];

void* cpu_alloc(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!p) throw std::bad_alloc();
  return p;
}
void cpu_free(void* p, size_t) {
  std::free(p);
}

void account(Device d, int64_t delta) {
  Counters& c = g_counters[int(d)];
  int64_t now = c.allocated.fetch_add(delta) + delta;
  int64_t peak = c.max_allocated.load();
  while (now > peak && !c.max_allocated.compare_exchange_weak(peak, now)) {
  }
}

}  // namespace

void set_device_allocator(Device d, DeviceAllocator a) {
  g_allocators[int(d)] = a;
}

void* device_alloc(Device d, size_t bytes) {
  void* p = nullptr;
  if (d == Device::kCPU) {
    p = cpu_alloc(bytes);
  } else {
    MT_CHECK(g_allocators[int(d)].alloc, "device ", device_name(d),
             " is not available: this mtron was built without its backend");
    p = g_allocators[int(d)].alloc(bytes);
  }
  account(d, int64_t(bytes));
  return p;
}

void device_free(Device d, void* ptr, size_t bytes) {
  if (!ptr) return;
  if (d == Device::kCPU) {
    cpu_free(ptr, bytes);
  } else {
    g_allocators[int(d)].free(ptr, bytes);
  }
  account(d, -int64_t(bytes));
}

MemoryStats memory_stats(Device d) {
  const Counters& c = g_counters[int(d)];
  return {c.allocated.load(), c.max_allocated.load()};
}

void memory_reset_peak(Device d) {
  Counters& c = g_counters[int(d)];
  c.max_allocated.store(c.allocated.load());
}

int64_t process_peak_rss() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  int64_t kb = 0;
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, "VmHWM:", 6) == 0) {
      kb = std::atoll(line + 6);
      break;
    }
  }
  std::fclose(f);
  return kb * 1024;
}

}  // namespace mtron
