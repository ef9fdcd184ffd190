// Discardable device blocks (core/memory.h) through CUDA's virtual memory management: a block is
// a reserved address range (cuMemAddressReserve) mapped granule by granule to physical memory
// (cuMemCreate, cuMemMap, cuMemSetAccess), so that FSDP can return the granules of the shards a
// rank does not hold (vmm_discard) and back them again before their next use (vmm_commit).
//
// The driver's calls are not stream-ordered: unmapping a granule that queued kernels still use
// would make them fault. So a discarded granule's physical memory goes to a free list at once
// (work queued later on the compute stream may reuse it: the stream runs it after the work queued
// before), but its address stays mapped until an event recorded on the compute stream at the
// discard has completed (polled, never waited for, at each discard and commit). A granule
// committed again before then takes its own memory back if no other granule took it; otherwise
// (rare) the host waits for that event before remapping the address. Committed granules are
// zeroed on the compute stream. Every other stream joins the compute stream before a buffer it
// used is released (comm/nccl.cpp), and each collective waits for the compute stream's work
// queued before it.
//
// The driver's entry points come through the runtime (cudaGetDriverEntryPointByVersion): no link
// against libcuda, whose stub is all a machine without a GPU has.
#include "mtron/kernels/cuda/vmm.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "mtron/core/error.h"
#include "mtron/kernels/cuda/runtime.h"

namespace mtron::kernels::cuda {
namespace {

struct Driver {
  CUresult (*reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long) = nullptr;
  CUresult (*address_free)(CUdeviceptr, size_t) = nullptr;
  CUresult (*create)(CUmemGenericAllocationHandle*,
                     size_t,
                     const CUmemAllocationProp*,
                     unsigned long long) = nullptr;
  CUresult (*release)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) =
      nullptr;
  CUresult (*unmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
  CUresult (*granularity)(size_t*,
                          const CUmemAllocationProp*,
                          CUmemAllocationGranularity_flags) = nullptr;
};

template <typename F>
void entry(const char* name, F*& fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  MT_CUDA_CHECK(cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found));
  MT_CHECK(found == cudaDriverEntryPointSuccess && p, "the CUDA driver lacks ", name,
           " (virtual memory management, needed by FSDP's sharded buffers)");
  fn = reinterpret_cast<F*>(p);
}

const Driver& driver() {
  static const Driver d = [] {
    Driver r;
    entry("cuMemAddressReserve", r.reserve);
    entry("cuMemAddressFree", r.address_free);
    entry("cuMemCreate", r.create);
    entry("cuMemRelease", r.release);
    entry("cuMemMap", r.map);
    entry("cuMemUnmap", r.unmap);
    entry("cuMemSetAccess", r.set_access);
    entry("cuMemGetAllocationGranularity", r.granularity);
    return r;
  }();
  return d;
}

void check(CUresult rc, const char* what) {
  if (rc == CUDA_ERROR_OUT_OF_MEMORY)
    throw Error(std::string("CUDA out of memory in ") + what +
                " (backing FSDP's sharded buffers; a smaller batch, recompute or more data "
                "parallelism needs less)");
  if (rc != CUDA_SUCCESS) cuda_fail(__FILE__, __LINE__, what, int(rc));
}

CUmemAllocationProp properties() {
  int dev = 0;
  MT_CUDA_CHECK(cudaGetDevice(&dev));
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = dev;
  return p;
}

enum class State : uint8_t { kMapped, kPending, kUnmapped };

struct Granule {
  State state = State::kUnmapped;
  int phys = -1;   // the physical chunk mapped here (mapped or pending)
  int event = -1;  // pending: the event after which the address may be unmapped
};

struct Block {
  CUdeviceptr va = 0;
  size_t bytes = 0, granule = 0;
  std::vector<Granule> g;
  int64_t granule_bytes(size_t i) const { return int64_t(std::min(granule, bytes - i * granule)); }
};

struct Phys {
  CUmemGenericAllocationHandle handle = 0;
  size_t size = 0;
  bool free = false;     // mapped at no granule that is in use
  bool pending = false;  // still mapped at a pending granule's address
};

struct Event {
  cudaEvent_t e = nullptr;
  int users = 0;  // pending granules waiting for it
};

class Vmm {
 public:
  void* alloc(size_t bytes) {
    std::lock_guard lock(mu_);
    const Driver& d = driver();
    const CUmemAllocationProp prop = properties();
    size_t min = 0;
    check(d.granularity(&min, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
          "cuMemGetAllocationGranularity");
    // At most 512 granules a block (each granule's mapping is a driver call), at least the
    // device's granularity (2 MiB on current GPUs).
    const size_t want = (bytes + 511) / 512;
    const size_t granule = std::max<size_t>(1, (want + min - 1) / min) * min;
    const size_t n = std::max<size_t>(1, (bytes + granule - 1) / granule);
    Block b;
    b.bytes = bytes;
    b.granule = granule;
    b.g.resize(n);
    // Aligned to the device's granularity (alignment 0), as every granule's offset is.
    check(d.reserve(&b.va, n * granule, 0, 0, 0), "cuMemAddressReserve");
    for (size_t i = 0; i < n; ++i) map(b, i, prop);
    set_access(b, 0, n, prop);
    void* p = reinterpret_cast<void*>(b.va);
    blocks_[b.va] = std::move(b);
    return p;
  }

  int64_t free(void* p) {
    std::lock_guard lock(mu_);
    auto it = blocks_.find(CUdeviceptr(p));
    if (it == blocks_.end()) return -1;
    const Driver& d = driver();
    // The block's last users are done, and so is every pending discard.
    MT_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(default_stream())));
    poll();
    Block& b = it->second;
    int64_t held = 0;
    for (size_t i = 0; i < b.g.size(); ++i) {
      if (b.g[i].state != State::kMapped) continue;
      held += b.granule_bytes(i);
      check(d.unmap(b.va + i * b.granule, b.granule), "cuMemUnmap");
      phys_[size_t(b.g[i].phys)].free = true;
    }
    check(d.address_free(b.va, b.g.size() * b.granule), "cuMemAddressFree");
    blocks_.erase(it);
    // Physical chunks mapped nowhere now go back to the driver.
    for (Phys& ph : phys_) {
      if (ph.free && ph.handle) {
        check(d.release(ph.handle), "cuMemRelease");
        ph = Phys{};
      }
    }
    return held;
  }

  Discarded discard(void* p, size_t bytes) {
    std::lock_guard lock(mu_);
    auto [b, off] = block_of(p);
    if (!b) return {};
    poll();
    const size_t g0 = (off + b->granule - 1) / b->granule;
    const size_t g1 = std::min((off + bytes) / b->granule, b->g.size());
    if (g1 <= g0) return {};
    Discarded r{g0 * b->granule - off, g1 * b->granule - off, 0};
    int ev = -1;
    for (size_t i = g0; i < g1; ++i) {
      Granule& gr = b->g[i];
      if (gr.state != State::kMapped) continue;
      if (ev < 0) ev = record();
      gr.state = State::kPending;
      gr.event = ev;
      ++events_[size_t(ev)].users;
      phys_[size_t(gr.phys)].free = phys_[size_t(gr.phys)].pending = true;
      r.released += b->granule_bytes(i);
    }
    return r;
  }

  int64_t commit(void* p, size_t bytes) {
    std::lock_guard lock(mu_);
    auto [b, off] = block_of(p);
    if (!b) return 0;
    poll();
    const CUmemAllocationProp prop = properties();
    const cudaStream_t stream = static_cast<cudaStream_t>(default_stream());
    const size_t g1 = std::min((off + bytes + b->granule - 1) / b->granule, b->g.size());
    int64_t backed = 0;
    size_t run = SIZE_MAX;  // the first granule of the run of newly mapped ones being built
    auto close_run = [&](size_t end) {
      if (run == SIZE_MAX) return;
      MT_CUDA_CHECK(cudaMemsetAsync(reinterpret_cast<void*>(b->va + run * b->granule), 0,
                                    (end - run) * b->granule, stream));
      ++work().copies;
      run = SIZE_MAX;
    };
    for (size_t i = off / b->granule; i < g1; ++i) {
      Granule& gr = b->g[i];
      if (gr.state == State::kMapped) {
        close_run(i);
        continue;
      }
      if (gr.state == State::kPending && phys_[size_t(gr.phys)].free) {
        phys_[size_t(gr.phys)].free = phys_[size_t(gr.phys)].pending = false;  // not taken since
        release_event(gr.event);
        gr = Granule{State::kMapped, gr.phys, -1};
      } else {
        if (gr.state == State::kPending) {  // its memory serves another granule now
          MT_CUDA_CHECK(cudaEventSynchronize(events_[size_t(gr.event)].e));
          ++work().host_syncs;
          unmap(*b, i);
        }
        map(*b, i, prop);
        set_access(*b, i, i + 1, prop);
      }
      backed += b->granule_bytes(i);
      if (run == SIZE_MAX) run = i;
    }
    close_run(g1);
    return backed;
  }

  int64_t reserved() {
    std::lock_guard lock(mu_);
    int64_t n = 0;
    for (const Phys& ph : phys_) n += ph.handle ? int64_t(ph.size) : 0;
    return n;
  }

 private:
  std::pair<Block*, size_t> block_of(const void* p) {
    const auto at = CUdeviceptr(p);
    auto it = blocks_.upper_bound(at);
    if (it == blocks_.begin()) return {nullptr, 0};
    --it;
    Block& b = it->second;
    if (at >= b.va + b.g.size() * b.granule) return {nullptr, 0};
    return {&b, size_t(at - b.va)};
  }

  // Maps granule i of b to a free physical chunk of its size (one mapped nowhere else first),
  // or to a new one.
  void map(Block& b, size_t i, const CUmemAllocationProp& prop) {
    const Driver& d = driver();
    int pick = -1;
    for (int pass = 0; pass < 2 && pick < 0; ++pass) {
      for (size_t k = 0; k < phys_.size(); ++k) {
        const Phys& ph = phys_[k];
        if (ph.free && ph.handle && ph.size == b.granule && (pass == 1 || !ph.pending)) {
          pick = int(k);
          break;
        }
      }
    }
    if (pick < 0) {
      Phys ph{0, b.granule, false, false};
      check(d.create(&ph.handle, b.granule, &prop, 0), "cuMemCreate");
      auto slot = std::find_if(phys_.begin(), phys_.end(), [](const Phys& x) { return !x.handle; });
      if (slot == phys_.end()) slot = phys_.insert(phys_.end(), Phys{});
      *slot = ph;
      pick = int(slot - phys_.begin());
    }
    phys_[size_t(pick)].free = false;
    check(d.map(b.va + i * b.granule, b.granule, 0, phys_[size_t(pick)].handle, 0), "cuMemMap");
    b.g[i] = Granule{State::kMapped, pick, -1};
  }

  void set_access(const Block& b, size_t g0, size_t g1, const CUmemAllocationProp& prop) {
    CUmemAccessDesc a{};
    a.location = prop.location;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    check(driver().set_access(b.va + g0 * b.granule, (g1 - g0) * b.granule, &a, 1),
          "cuMemSetAccess");
  }

  // Unmaps pending granule i (its event has completed).
  void unmap(Block& b, size_t i) {
    check(driver().unmap(b.va + i * b.granule, b.granule), "cuMemUnmap");
    release_event(b.g[i].event);
    phys_[size_t(b.g[i].phys)].pending = false;
    b.g[i] = Granule{};
  }

  // Unmaps the pending granules whose events have completed.
  void poll() {
    std::vector<bool> done(events_.size(), false);
    bool any = false;
    for (size_t k = 0; k < events_.size(); ++k) {
      if (events_[k].users == 0) continue;
      const cudaError_t e = cudaEventQuery(events_[k].e);
      if (e == cudaErrorNotReady) continue;
      MT_CUDA_CHECK(e);
      done[k] = any = true;
    }
    if (!any) return;
    for (auto& [va, b] : blocks_)
      for (size_t i = 0; i < b.g.size(); ++i)
        if (b.g[i].state == State::kPending && done[size_t(b.g[i].event)]) unmap(b, i);
  }

  // An event recorded on the compute stream now, from the pool.
  int record() {
    size_t k = 0;
    while (k < events_.size() && events_[k].users > 0) ++k;
    if (k == events_.size()) {
      events_.push_back({});
      MT_CUDA_CHECK(cudaEventCreateWithFlags(&events_[k].e, cudaEventDisableTiming));
    }
    MT_CUDA_CHECK(cudaEventRecord(events_[k].e, static_cast<cudaStream_t>(default_stream())));
    return int(k);
  }
  void release_event(int k) {
    if (k >= 0) --events_[size_t(k)].users;
  }

  std::map<CUdeviceptr, Block> blocks_;
  std::vector<Phys> phys_;
  std::vector<Event> events_;
  std::mutex mu_;
};

Vmm& vmm() {
  static Vmm* v = new Vmm();  // never destroyed: tensors may outlive statics
  return *v;
}

}  // namespace

void* vmm_alloc(size_t bytes) {
  return vmm().alloc(bytes);
}
int64_t vmm_free(void* p) {
  return vmm().free(p);
}
Discarded vmm_discard(void* p, size_t bytes) {
  return vmm().discard(p, bytes);
}
int64_t vmm_commit(void* p, size_t bytes) {
  return vmm().commit(p, bytes);
}
int64_t vmm_reserved() {
  return vmm().reserved();
}

}  // namespace mtron::kernels::cuda
