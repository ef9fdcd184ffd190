#include "mtron/core/memory.h"

#include <sys/mman.h>
#include <unistd.h>

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

// CPU blocks of kHugeMin bytes or more (activation arenas, large tensors) are mapped on their
// own, 2 MiB aligned, whole 2 MiB pages, and marked MADV_HUGEPAGE: with Linux's usual
// transparent-huge-page setting ("madvise") the kernel then backs them with 2 MiB pages. In 4 KiB
// pages, the first touch of a step's gigabytes of activations costs a page fault per 4 KiB
// (millions per step until the arenas settle) and the memory-bound kernels that sweep them miss
// the TLB. Smaller blocks come from the C library, 64-byte aligned.
constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kHugeMin = size_t(8) << 20;

size_t huge_bytes(size_t bytes) {
  return (bytes + kHugePage - 1) / kHugePage * kHugePage;
}

void* huge_alloc(size_t bytes) {
  const size_t size = huge_bytes(bytes), span = size + kHugePage;
  void* m = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw std::bad_alloc();
  char* raw = static_cast<char*>(m);
  char* p = raw + (kHugePage - reinterpret_cast<uintptr_t>(raw) % kHugePage) % kHugePage;
  if (p > raw) munmap(raw, size_t(p - raw));
  if (raw + span > p + size) munmap(p + size, size_t(raw + span - (p + size)));
#ifdef MADV_HUGEPAGE
  madvise(p, size, MADV_HUGEPAGE);  // a kernel without transparent huge pages: 4 KiB pages
#endif
  return p;
}

void* cpu_alloc(size_t bytes) {
  if (bytes >= kHugeMin) return huge_alloc(bytes);
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!p) throw std::bad_alloc();
  return p;
}
void cpu_free(void* p, size_t bytes) {
  if (bytes >= kHugeMin)
    munmap(p, huge_bytes(bytes));
  else
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

void* device_alloc(Device d, size_t bytes, bool discardable) {
  void* p = nullptr;
  if (d == Device::kCPU) {
    p = cpu_alloc(bytes);
  } else {
    const DeviceAllocator& a = g_allocators[int(d)];
    MT_CHECK(a.alloc, "device ", device_name(d),
             " is not available: this mtron was built without its backend");
    p = discardable && a.alloc_discardable ? a.alloc_discardable(bytes) : a.alloc(bytes);
  }
  account(d, int64_t(bytes));
  return p;
}

void device_free(Device d, void* ptr, size_t bytes) {
  if (!ptr) return;
  int64_t held = int64_t(bytes);
  if (d == Device::kCPU) {
    cpu_free(ptr, bytes);
  } else {
    held = g_allocators[int(d)].free(ptr, bytes);
  }
  account(d, -held);
}

std::pair<size_t, size_t> device_discard(Device d, void* ptr, size_t bytes) {
  if (!ptr) return {0, 0};
  if (d != Device::kCPU) {
    const DeviceAllocator& a = g_allocators[int(d)];
    if (!a.discard) return {0, 0};
    const Discarded r = a.discard(ptr, bytes);
    account(d, -r.released);
    return {r.first, r.last};
  }
  const auto page = uintptr_t(sysconf(_SC_PAGESIZE));
  const auto at = reinterpret_cast<uintptr_t>(ptr);
  const uintptr_t lo = (at + page - 1) / page * page, hi = (at + bytes) / page * page;
  if (hi <= lo) return {0, 0};
  MT_CHECK(madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED) == 0,
           "madvise(MADV_DONTNEED) failed on ", hi - lo, " bytes");
  return {lo - at, hi - at};
}

void device_commit(Device d, void* ptr, size_t bytes) {
  if (d == Device::kCPU || !ptr || bytes == 0) return;
  const DeviceAllocator& a = g_allocators[int(d)];
  if (a.commit) account(d, a.commit(ptr, bytes));
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
