// defines: Arena
//
// A bump allocator for activations. Forward passes carve the tensors backward needs out of a
// per-micro-batch arena (the "stash"); reset() releases them all at once after backward. After
// a reset that found several blocks, the arena coalesces them into one block of the high-water
// size, so steady-state steps make no allocations at all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mtron/core/dtype.h"

namespace mtron {

class Arena {
 public:
  explicit Arena(Device device = Device::kCPU, size_t min_block_bytes = size_t(1) << 24);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  Arena(Arena&& o) noexcept;
  Arena& operator=(Arena&& o) noexcept;

  // 64-byte aligned, uninitialised, valid until reset().
  void* alloc_bytes(size_t bytes);
  template <typename T>
  T* alloc(int64_t n) {
    return static_cast<T*>(alloc_bytes(size_t(n) * sizeof(T)));
  }

  void reset();
  size_t used() const { return used_; }
  size_t high_water() const { return high_water_; }
  size_t capacity() const;
  Device device() const { return device_; }

 private:
  struct Block {
    char* ptr;
    size_t bytes;
  };
  void release();

  Device device_;
  size_t min_block_bytes_;
  std::vector<Block> blocks_;
  size_t block_ = 0;   // current block index
  size_t offset_ = 0;  // bytes used in the current block
  size_t used_ = 0;
  size_t high_water_ = 0;
};

}  // namespace mtron
