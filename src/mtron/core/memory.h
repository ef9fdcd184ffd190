// defines: device_alloc, device_free, device_discard, set_device_allocator, MemoryStats,
// memory_stats
//
// Every byte a Tensor or Arena owns comes through device_alloc, so the per-device counters
// (allocated now, peak) are exact; device_free takes the size device_alloc was given. The CPU
// allocator aligns to 64 bytes (one cache line, one AVX-512 vector), and maps blocks of 8 MiB and
// more on their own in transparent huge pages (2 MiB, aligned to them). Other devices register
// their allocator at start-up (the CUDA backend does); asking for a device with none registered is
// a user error naming the device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "mtron/core/dtype.h"

namespace mtron {

struct DeviceAllocator {
  void* (*alloc)(size_t bytes) = nullptr;
  void (*free)(void* ptr, size_t bytes) = nullptr;
};

void set_device_allocator(Device d, DeviceAllocator a);
void* device_alloc(Device d, size_t bytes);
void device_free(Device d, void* ptr, size_t bytes);
// Returns the whole pages inside [ptr, ptr + bytes) of a CPU block to the system (the block stays
// allocated; those pages read as zeros until written again): the byte range [first, last) of
// [ptr, ptr + bytes) so returned. Other devices keep their memory: {0, 0}.
std::pair<size_t, size_t> device_discard(Device d, void* ptr, size_t bytes);

struct MemoryStats {
  int64_t allocated = 0;      // bytes held now
  int64_t max_allocated = 0;  // high-water mark since start (or the last reset_peak)
};
MemoryStats memory_stats(Device d);
void memory_reset_peak(Device d);

// Resident set size of this process (VmHWM, the peak), in bytes; 0 where unknown.
int64_t process_peak_rss();

}  // namespace mtron
