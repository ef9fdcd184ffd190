#include "mtron/core/arena.h"

#include <algorithm>
#include <utility>

#include "mtron/core/memory.h"

namespace mtron {

Arena::Arena(Device device, size_t min_block_bytes)
    : device_(device), min_block_bytes_(min_block_bytes) {}

Arena::~Arena() {
  release();
}

Arena::Arena(Arena&& o) noexcept {
  *this = std::move(o);
}

Arena& Arena::operator=(Arena&& o) noexcept {
  if (this != &o) {
    release();
    device_ = o.device_;
    min_block_bytes_ = o.min_block_bytes_;
    blocks_ = std::move(o.blocks_);
    block_ = o.block_;
    offset_ = o.offset_;
    used_ = o.used_;
    high_water_ = o.high_water_;
    o.blocks_.clear();
    o.block_ = o.offset_ = o.used_ = o.high_water_ = 0;
  }
  return *this;
}

void Arena::release() {
  for (Block& b : blocks_) device_free(device_, b.ptr, b.bytes);
  blocks_.clear();
  block_ = offset_ = 0;
}

void* Arena::alloc_bytes(size_t bytes) {
  bytes = (bytes + 63) / 64 * 64;
  while (block_ < blocks_.size() && offset_ + bytes > blocks_[block_].bytes) {
    ++block_;
    offset_ = 0;
  }
  if (block_ == blocks_.size()) {
    size_t size = std::max(bytes, min_block_bytes_);
    blocks_.push_back({static_cast<char*>(device_alloc(device_, size)), size});
    offset_ = 0;
  }
  char* p = blocks_[block_].ptr + offset_;
  offset_ += bytes;
  used_ += bytes;
  high_water_ = std::max(high_water_, used_);
  return p;
}

void Arena::reset() {
  if (blocks_.size() > 1) {
    // Coalesce: one block large enough for everything seen so far.
    size_t size = std::max(high_water_, min_block_bytes_);
    release();
    blocks_.push_back({static_cast<char*>(device_alloc(device_, size)), size});
  }
  block_ = offset_ = used_ = 0;
}

size_t Arena::capacity() const {
  size_t c = 0;
  for (const Block& b : blocks_) c += b.bytes;
  return c;
}

}  // namespace mtron
