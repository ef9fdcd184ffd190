// defines: device_alloc, device_free, device_discard, device_commit, set_device_allocator,
// DeviceAllocator, Discarded, MemoryStats, memory_stats
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

// What device_discard returned of [ptr, ptr + bytes): the byte range [first, last) (whole pages or
// granules), of which `released` bytes were still backed.
struct Discarded {
  size_t first = 0, last = 0;
  int64_t released = 0;
};

struct DeviceAllocator {
  void* (*alloc)(size_t bytes) = nullptr;
  // Returns the bytes the block still held (a discardable block's backed part; else `bytes`).
  int64_t (*free)(void* ptr, size_t bytes) = nullptr;
  // Discardable blocks, whose parts discard returns to the device and commit backs again (zero);
  // null where the device has none: alloc serves them and their memory stays held.
  void* (*alloc_discardable)(size_t bytes) = nullptr;
  Discarded (*discard)(void* ptr, size_t bytes) = nullptr;
  int64_t (*commit)(void* ptr, size_t bytes) = nullptr;  // returns the bytes backed again
};

void set_device_allocator(Device d, DeviceAllocator a);
// discardable: a block whose parts device_discard may return (FSDP's sharded buffers). Every CPU
// block is; on CUDA such a block is mapped granule by granule (virtual memory management).
void* device_alloc(Device d, size_t bytes, bool discardable = false);
void device_free(Device d, void* ptr, size_t bytes);
// Returns the whole pages (CPU) or granules (a discardable CUDA block) inside [ptr, ptr + bytes)
// to the system; the block stays allocated. A CPU page reads as zeros when touched again; a
// discarded CUDA granule must be backed again by device_commit before any use (the GPU faults
// on it). Returns the byte range [first, last) of [ptr, ptr + bytes) so returned ({0, 0}: none,
// as for blocks that are not discardable). On the CPU the counters keep the block's size (the
// resident set shows the pages); on CUDA they drop by the granules' bytes.
std::pair<size_t, size_t> device_discard(Device d, void* ptr, size_t bytes);
// Backs the discarded parts of [ptr, ptr + bytes) again, zeroed (on CUDA in the compute stream's
// order: work queued before it that used the granules is done with them first). Nothing to do on
// the CPU, whose pages are backed when touched, nor for blocks that are not discardable.
void device_commit(Device d, void* ptr, size_t bytes);

struct MemoryStats {
  int64_t allocated = 0;      // bytes held now
  int64_t max_allocated = 0;  // high-water mark since start (or the last reset_peak)
};
MemoryStats memory_stats(Device d);
void memory_reset_peak(Device d);

// Resident set size of this process (VmHWM, the peak), in bytes; 0 where unknown.
int64_t process_peak_rss();

}  // namespace mtron
