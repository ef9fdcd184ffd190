// runtime.cpp and allocator.cpp for the CPU emulation (sim.h): "device" memory is host memory
// in one reserved address range, inaccessible to the host except while a sim::DeviceAccess lives;
// streams do not exist, copies are memcpy. The emulated device registers itself as
// Device::kCUDA, so code written against kernels/device.h runs unchanged.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <vector>

#include "mtron/core/error.h"
#include "mtron/core/memory.h"
#include "mtron/kernels/cuda/cuda_ops.h"
#include "mtron/kernels/cuda/runtime.h"

namespace mtron::kernels::cuda {
namespace {

// The emulated device memory: a first-fit heap (256-byte granules, cudaMalloc's alignment) in
// a range reserved once. The part handed out so far ([base, base + top)) is PROT_NONE while no
// DeviceAccess lives and read-write while one does.
class DeviceHeap {
 public:
  static constexpr size_t kReserve = size_t(1) << 36;  // 64 GiB of address space, no memory

  DeviceHeap() {
    void* p =
        mmap(nullptr, kReserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    base_ = static_cast<char*>(p);
  }

  void* alloc(size_t bytes) {
    const size_t n = (bytes + 255) / 256 * 256 + (bytes == 0 ? 256 : 0);
    std::lock_guard lock(mu_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < n) continue;
      const size_t off = it->first, len = it->second;
      free_.erase(it);
      if (len > n) free_[off + n] = len - n;
      used_[off] = n;
      return base_ + off;
    }
    const size_t off = top_;
    if (off + n > kReserve) throw std::bad_alloc();
    top_ = off + n;
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    const size_t mapped = (top_ + page - 1) / page * page;
    if (mapped > mapped_) {
      // New pages start inaccessible, or accessible inside a DeviceAccess.
      protect(mapped_, mapped - mapped_, depth_ > 0);
      mapped_ = mapped;
    }
    used_[off] = n;
    return base_ + off;
  }

  void free(void* ptr) {
    if (!ptr) return;
    std::lock_guard lock(mu_);
    const size_t off = size_t(static_cast<char*>(ptr) - base_);
    auto u = used_.find(off);
    MT_ASSERT(u != used_.end(), "CUDA emulation: free of a pointer it did not allocate");
    size_t start = off, len = u->second;
    for (const auto& [token, range] : pins_) {
      if (range.first < off + len && off < range.first + range.second) {
        std::fprintf(stderr,
                     "CUDA emulation: device memory (offset %zu, %zu bytes) freed while a "
                     "non-blocking communication using it is pending; wait for its request "
                     "before the buffer is freed (comm/nccl.h)\n",
                     off, len);
        std::abort();
      }
    }
    used_.erase(u);
    auto next = free_.lower_bound(off);
    if (next != free_.end() && next->first == off + len) {
      len += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == start) {
        start = prev->first;
        len += prev->second;
        free_.erase(prev);
      }
    }
    free_[start] = len;
  }

  void enter() {
    std::lock_guard lock(mu_);
    if (depth_++ > 0) return;
    protect(0, mapped_, true);
    for (const auto& [start, b] : blocks_) {
      for (size_t g = 0; g < b.backed.size(); ++g)
        if (!b.backed[g]) protect(start + g * kGranule, kGranule, false);
    }
  }
  void leave() {
    std::lock_guard lock(mu_);
    if (--depth_ == 0) protect(0, mapped_, false);
  }

  uint64_t pin(const void* p, size_t bytes) {
    std::lock_guard lock(mu_);
    pins_[++last_pin_] = {offset(p), bytes};
    return last_pin_;
  }
  void unpin(uint64_t token) {
    std::lock_guard lock(mu_);
    pins_.erase(token);
  }

  // Discardable blocks (core/memory.h), in granules of 2 MiB (a GPU's mapping granularity), each
  // backed or not. A granule not backed has no memory (MADV_DONTNEED: it reads as zeros once
  // backed again) and stays inaccessible inside a DeviceAccess too, so device work that touches
  // it faults, as it would on a GPU.
  void* alloc_discardable(size_t bytes) {
    const size_t n = (bytes + kGranule - 1) / kGranule;
    char* raw = static_cast<char*>(alloc(std::max<size_t>(n, 1) * kGranule + kGranule));
    std::lock_guard lock(mu_);
    const size_t start = (offset(raw) + kGranule - 1) / kGranule * kGranule;
    blocks_[start] = Block{offset(raw), bytes, std::vector<bool>(n, true)};
    return base_ + start;
  }

  // The bytes a block holds, if p is a discardable block (then it is freed), else -1.
  int64_t free_discardable(void* p) {
    size_t raw = 0;
    int64_t held = 0;
    {
      std::lock_guard lock(mu_);
      auto it = blocks_.find(offset(p));
      if (it == blocks_.end()) return -1;
      for (size_t g = 0; g < it->second.backed.size(); ++g)
        if (it->second.backed[g]) held += granule_bytes(it->second, g);
      raw = it->second.raw;
      blocks_.erase(it);
    }
    free(base_ + raw);
    return held;
  }

  Discarded discard(void* p, size_t bytes) {
    std::lock_guard lock(mu_);
    auto [start, b] = block_of(p);
    if (!b) return {};
    const size_t off = offset(p) - start;
    const size_t g0 = (off + kGranule - 1) / kGranule;
    const size_t g1 = std::min((off + bytes) / kGranule, b->backed.size());
    if (g1 <= g0) return {};
    Discarded r{g0 * kGranule - off, g1 * kGranule - off, 0};
    for (size_t g = g0; g < g1; ++g) {
      if (!b->backed[g]) continue;
      char* at = base_ + start + g * kGranule;
      MT_ASSERT(madvise(at, kGranule, MADV_DONTNEED) == 0, "CUDA emulation: madvise failed");
      protect(start + g * kGranule, kGranule, false);
      b->backed[g] = false;
      r.released += granule_bytes(*b, g);
    }
    return r;
  }

  int64_t commit(void* p, size_t bytes) {
    std::lock_guard lock(mu_);
    auto [start, b] = block_of(p);
    if (!b) return 0;
    const size_t off = offset(p) - start;
    const size_t g1 = std::min((off + bytes + kGranule - 1) / kGranule, b->backed.size());
    int64_t backed = 0;
    for (size_t g = off / kGranule; g < g1; ++g) {
      if (b->backed[g]) continue;
      b->backed[g] = true;
      if (depth_ > 0) protect(start + g * kGranule, kGranule, true);
      backed += granule_bytes(*b, g);
    }
    if (backed > 0) ++work().copies;  // a GPU zeroes them with a memset
    return backed;
  }

  // Whether p lies in a discarded granule (read from the fault handler: no lock).
  bool discarded(const void* p) const {
    const size_t off = offset(p);
    auto it = blocks_.upper_bound(off);
    if (it == blocks_.begin()) return false;
    --it;
    const size_t g = (off - it->first) / kGranule;
    return g < it->second.backed.size() && !it->second.backed[g];
  }

  bool contains(const void* p) const { return p >= base_ && p < base_ + kReserve; }
  size_t offset(const void* p) const { return size_t(static_cast<const char*>(p) - base_); }

 private:
  void protect(size_t off, size_t len, bool accessible) {
    if (len == 0) return;
    const int rc = mprotect(base_ + off, len, accessible ? PROT_READ | PROT_WRITE : PROT_NONE);
    MT_ASSERT(rc == 0, "CUDA emulation: mprotect failed: ", std::strerror(errno));
  }

  static constexpr size_t kGranule = size_t(2) << 20;
  struct Block {
    size_t raw = 0;    // the heap block it lies in (offset)
    size_t bytes = 0;  // the size asked for
    std::vector<bool> backed;
  };
  static int64_t granule_bytes(const Block& b, size_t g) {
    return int64_t(std::min(kGranule, b.bytes - g * kGranule));
  }
  // The discardable block holding p: its offset and itself (null if p lies in none).
  std::pair<size_t, Block*> block_of(const void* p) {
    const size_t off = offset(p);
    auto it = blocks_.upper_bound(off);
    if (it == blocks_.begin()) return {0, nullptr};
    --it;
    if (off >= it->first + it->second.backed.size() * kGranule) return {0, nullptr};
    return {it->first, &it->second};
  }

  char* base_ = nullptr;
  size_t top_ = 0, mapped_ = 0;
  std::map<size_t, Block> blocks_;  // discardable blocks by offset
  int depth_ = 0;
  std::map<size_t, size_t> free_, used_;                // offset -> bytes
  std::map<uint64_t, std::pair<size_t, size_t>> pins_;  // token -> (offset, bytes)
  uint64_t last_pin_ = 0;
  std::mutex mu_;
};

DeviceHeap& heap() {
  static DeviceHeap* h = new DeviceHeap();  // never destroyed: tensors may outlive statics
  return *h;
}

struct sigaction previous_segv;

// A fault on emulated device memory is host code touching the device: say so, then abort (a
// debugger shows the host frame that did it).
void on_segv(int sig, siginfo_t* info, void* uctx) {
  if (heap().contains(info->si_addr)) {
    // Device work touching a granule not backed, or host code touching device memory.
    const bool discarded = heap().discarded(info->si_addr);
    char msg[320];
    const int n = std::snprintf(
        msg, sizeof msg,
        discarded ? "CUDA emulation: device memory (offset %zu) in a discarded granule of a "
                    "discardable block was accessed (device_discard, core/memory.h): it must be "
                    "committed again (device_commit) before use\n"
                  : "CUDA emulation: host code accessed device memory (offset %zu), which a GPU "
                    "does not allow; use kernels/device.h\n",
        heap().offset(info->si_addr));
    if (n > 0) (void)!write(2, msg, size_t(n));
    std::abort();
  }
  // Not ours: the previous handler's fault.
  if (previous_segv.sa_flags & SA_SIGINFO) {
    previous_segv.sa_sigaction(sig, info, uctx);
  } else if (previous_segv.sa_handler != SIG_DFL && previous_segv.sa_handler != SIG_IGN) {
    previous_segv.sa_handler(sig);
  } else {
    signal(SIGSEGV, SIG_DFL);  // return: the access faults again, with the default action
  }
}

void install_segv_handler() {
  static const bool installed = [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &previous_segv);
    return true;
  }();
  (void)installed;
}

void* sim_alloc(size_t bytes) {
  return heap().alloc(bytes);
}
int64_t sim_free(void* p, size_t bytes) {
  const int64_t held = heap().free_discardable(p);
  if (held >= 0) return held;
  heap().free(p);
  return int64_t(bytes);
}
void* sim_alloc_discardable(size_t bytes) {
  return heap().alloc_discardable(bytes);
}
Discarded sim_discard(void* p, size_t bytes) {
  return heap().discard(p, bytes);
}
int64_t sim_commit(void* p, size_t bytes) {
  return heap().commit(p, bytes);
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
  heap().free(ptr_);
}

// Counted as runtime.cpp counts them: the same calls wait or queue work on a GPU.
void copy_to_host_sync(void* host, const void* dev, size_t bytes, cudaStream_t) {
  sim::check_device_pointer("copy_to_host (source)", dev);
  if (bytes == 0) return;
  ++work().host_syncs;
  const sim::DeviceAccess access;
  std::memcpy(host, dev, bytes);
}

void fill_zero(const Ctx&, void* x, int64_t bytes) {
  sim::check_device_pointer("fill_zero", x);
  if (bytes <= 0) return;
  ++work().copies;
  const sim::DeviceAccess access;
  std::memset(x, 0, size_t(bytes));
}
void copy(const Ctx&, void* dst, const void* src, int64_t bytes) {
  sim::check_device_pointer("copy (destination)", dst);
  sim::check_device_pointer("copy (source)", src);
  if (bytes <= 0) return;
  ++work().copies;
  const sim::DeviceAccess access;
  std::memcpy(dst, src, size_t(bytes));
}
void copy_rows(const Ctx&,
               void* dst,
               int64_t dst_pitch,
               const void* src,
               int64_t src_pitch,
               int64_t row_bytes,
               int64_t rows) {
  sim::check_device_pointer("copy_rows (destination)", dst);
  sim::check_device_pointer("copy_rows (source)", src);
  if (row_bytes <= 0 || rows <= 0) return;
  ++work().copies;
  const sim::DeviceAccess access;
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(static_cast<char*>(dst) + r * dst_pitch,
                static_cast<const char*>(src) + r * src_pitch, size_t(row_bytes));
  }
}
void copy_to_host(const Ctx&, void* host_dst, const void* src, int64_t bytes) {
  copy_to_host_sync(host_dst, src, size_t(bytes), nullptr);
}
void copy_from_host(const Ctx&, void* dst, const void* host_src, int64_t bytes) {
  sim::check_device_pointer("copy_from_host (destination)", dst);
  if (bytes <= 0) return;
  ++work().host_syncs;
  const sim::DeviceAccess access;
  std::memcpy(dst, host_src, size_t(bytes));
}
// The emulation runs every copy at once, so its staging slot is free again on return.
void copy_from_host_async(const Ctx&, void* dst, const void* host_src, int64_t bytes) {
  sim::check_device_pointer("copy_from_host_async (destination)", dst);
  if (bytes <= 0) return;
  ++work().copies;
  const sim::DeviceAccess access;
  std::memcpy(dst, host_src, size_t(bytes));
}
void synchronize(const Ctx&) {
  ++work().host_syncs;
}
DeviceWork device_work() {
  const Work& w = work();
  return DeviceWork{w.launches, w.gemms, w.copies, w.host_syncs};
}

// Emulated GPUs per node: enough for the ranks of a test under mpirun, 16 at most (each process has
// its own emulated device memory; the ordinal changes nothing).
constexpr int kEmulatedDevices = 16;

int device_count() {
  return kEmulatedDevices;
}
std::string device_unavailable() {
  return "";
}
void init_device(int ordinal) {
  MT_CHECK(ordinal >= 0 && ordinal < kEmulatedDevices, "the CUDA emulation has ", kEmulatedDevices,
           " devices, not ", ordinal);
  install_segv_handler();
  set_device_allocator(Device::kCUDA, DeviceAllocator{sim_alloc, sim_free, sim_alloc_discardable,
                                                      sim_discard, sim_commit});
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
// Streams do not exist in the emulation (work runs when it is queued): every handle is nullptr.
void* default_stream() {
  return nullptr;
}
void* create_stream() {
  return nullptr;
}
void destroy_stream(void*) {}

}  // namespace mtron::kernels::cuda

namespace mtron::sim {

bool is_device_memory(const void* p) {
  return kernels::cuda::heap().contains(p);
}

void check_device_pointer(const char* what, const void* p) {
  MT_ASSERT(p == nullptr || is_device_memory(p), "CUDA emulation: ", what,
            " was given a host pointer; device work needs device memory (kernels/device.h)");
}

uint64_t pin_in_flight(const void* p, size_t bytes) {
  return kernels::cuda::heap().pin(p, bytes);
}
void unpin_in_flight(uint64_t token) {
  kernels::cuda::heap().unpin(token);
}

DeviceAccess::DeviceAccess() {
  kernels::cuda::heap().enter();
}
DeviceAccess::~DeviceAccess() {
  kernels::cuda::heap().leave();
}

}  // namespace mtron::sim
