// defines: BpeMerges, BpeWordCache
//
// The merge step shared by the byte-level (GPT-2, Llama-3, Qwen) and byte-fallback (Mistral)
// BPE tokenizers. A word arrives as a sequence of initial symbol ids; the pair of adjacent
// symbols with the lowest merge rank is merged (leftmost first on ties), repeatedly, until no
// adjacent pair has a merge. This is the Hugging Face `tokenizers` algorithm (a priority queue
// over a linked list, O(n log n)); for merge tables learned by BPE it gives the same result as
// OpenAI's "merge every occurrence of the best pair" loop.
//
// BpeWordCache memoises word -> ids per thread (words repeat: most of the text hits the cache).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mtron::data {

class BpeMerges {
 public:
  // Registers the merge (left, right) -> merged with priority `rank` (lower merges first).
  // Returns false if the pair already has a merge (the first one wins, as in Hugging Face).
  bool add(int32_t left, int32_t right, int32_t merged, int32_t rank);
  std::size_t size() const { return map_.size(); }

  // Merges `symbols` in place.
  void apply(std::vector<int32_t>& symbols) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  const Merge* find(int32_t a, int32_t b) const {
    auto it = map_.find(key(a, b));
    return it == map_.end() ? nullptr : &it->second;
  }
  std::unordered_map<uint64_t, Merge> map_;
};

// Per-thread memo of word -> ids, bounded (cleared when full). Keyed by an owner id so that one
// thread can serve several tokenizers.
class BpeWordCache {
 public:
  static constexpr std::size_t kMaxEntries = 1 << 18;  // ~25 MB per thread for GPT-2 words

  // Returns the cache of the calling thread for the tokenizer `owner`.
  static BpeWordCache& for_thread(uint64_t owner);

  const std::vector<int32_t>* find(std::string_view word) const {
    auto it = map_.find(word);
    return it == map_.end() ? nullptr : &it->second;
  }
  void insert(std::string_view word, const std::vector<int32_t>& ids);

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::vector<int32_t>, Hash, std::equal_to<>> map_;
};

// A process-unique id for cache ownership.
uint64_t next_tokenizer_id();

}  // namespace mtron::data
