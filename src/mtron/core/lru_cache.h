// defines: LruCache
//
// Values made once per key and reused, at most `capacity` of them: a new key beyond that drops
// the least recently used value. The GEMM libraries' plans and primitives are cached so: a dense
// model's step uses a few dozen GEMM shapes, but a mixture of experts' expert GEMMs take a new
// row count per expert and micro-batch, and an unbounded cache grew without end (on the CPU
// about half a megabyte per oneDNN primitive, hundreds of them per step).
//
// Values are held by shared_ptr, so one a caller still uses outlives its eviction. Not
// thread-safe: the owner locks around get().
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <unordered_map>
#include <utility>

#include "mtron/core/error.h"

namespace mtron {

template <typename Key, typename Value, typename Hash = std::hash<Key>>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(capacity) {
    MT_ASSERT(capacity > 0, "an LruCache of capacity 0");
  }

  // The value of `key`, made by make() (a std::shared_ptr<Value> or std::unique_ptr<Value>) where
  // the cache has none. A make() that throws leaves the cache as it was.
  template <typename Make>
  std::shared_ptr<Value> get(const Key& key, Make&& make) {
    if (auto it = index_.find(key); it != index_.end()) {
      order_.splice(order_.begin(), order_, it->second);
      return it->second->second;
    }
    std::shared_ptr<Value> value = make();
    order_.emplace_front(key, value);
    index_.emplace(key, order_.begin());
    ++made_;
    if (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    return value;
  }

  size_t size() const { return order_.size(); }
  size_t capacity() const { return capacity_; }
  int64_t made() const { return made_; }  // values made so far (the misses)

 private:
  using Entry = std::pair<Key, std::shared_ptr<Value>>;
  size_t capacity_;
  int64_t made_ = 0;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<Key, typename std::list<Entry>::iterator, Hash> index_;
};

}  // namespace mtron
