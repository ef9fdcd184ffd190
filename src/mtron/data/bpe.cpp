#include "mtron/data/bpe.h"

#include <algorithm>
#include <atomic>
#include <functional>

namespace mtron::data {

bool BpeMerges::add(int32_t left, int32_t right, int32_t merged, int32_t rank) {
  return map_.emplace(key(left, right), Merge{rank, merged}).second;
}

void BpeMerges::apply(std::vector<int32_t>& symbols) const {
  const int n = static_cast<int>(symbols.size());
  if (n < 2) return;
  // Doubly linked list over positions; a merged-away position gets id -1.
  struct Sym {
    int32_t id;
    int prev, next;
  };
  thread_local std::vector<Sym> sym;
  sym.resize(n);
  for (int i = 0; i < n; ++i) sym[i] = {symbols[i], i - 1, i + 1 < n ? i + 1 : -1};

  struct Cand {
    int32_t rank;
    int pos;
    int32_t merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  // A binary min-heap (std::push_heap with greater<>) in a reused per-thread buffer.
  thread_local std::vector<Cand> heap;
  heap.clear();
  const auto push = [](const Cand& c) {
    heap.push_back(c);
    std::push_heap(heap.begin(), heap.end(), std::greater<Cand>());
  };
  for (int i = 0; i + 1 < n; ++i)
    if (const Merge* m = find(sym[i].id, sym[i + 1].id)) push({m->rank, i, m->merged});

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<Cand>());
    const Cand c = heap.back();
    heap.pop_back();
    Sym& a = sym[c.pos];
    if (a.id < 0 || a.next < 0) continue;
    Sym& b = sym[a.next];
    const Merge* m = find(a.id, b.id);
    if (!m || m->merged != c.merged || m->rank != c.rank) continue;  // stale candidate
    // Merge b into a.
    a.id = c.merged;
    const int after = b.next;
    b.id = -1;
    a.next = after;
    if (after >= 0) sym[after].prev = c.pos;
    if (a.prev >= 0)
      if (const Merge* l = find(sym[a.prev].id, a.id)) push({l->rank, a.prev, l->merged});
    if (after >= 0)
      if (const Merge* r = find(a.id, sym[after].id)) push({r->rank, c.pos, r->merged});
  }
  symbols.clear();
  for (int i = 0; i >= 0; i = sym[i].next) symbols.push_back(sym[i].id);
}

BpeWordCache& BpeWordCache::for_thread(uint64_t owner) {
  thread_local std::unordered_map<uint64_t, BpeWordCache> caches;
  return caches[owner];
}

void BpeWordCache::insert(std::string_view word, const std::vector<int32_t>& ids) {
  if (map_.size() >= kMaxEntries) map_.clear();
  map_.emplace(std::string(word), ids);
}

uint64_t next_tokenizer_id() {
  static std::atomic<uint64_t> next{1};
  return next++;
}

}  // namespace mtron::data
