// defines: Philox (4x32-10), rng_key, normal_at, uniform_at, fill_normal_shard, dropout_scales
//
// Counter-based randomness: a value is a pure function of (key, counter), with no state to
// carry. Parameters are keyed by (seed, parameter name) and indexed by the element's position
// in the *global* (unsharded) tensor, so every shard of every layout draws exactly the values
// the 1-process run draws for those elements: every layout starts from the same model
// (docs/architecture.md, "Layout invariance").
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "mtron/core/tensor.h"

namespace mtron {

struct PhiloxKey {
  uint32_t k0, k1;
};

// Philox4x32 with 10 rounds (Salmon et al., SC'11).
std::array<uint32_t, 4> philox4x32(PhiloxKey key, std::array<uint32_t, 4> ctr);

// Key for a named stream: splitmix64(seed) mixed with FNV-1a of the name.
PhiloxKey rng_key(uint64_t seed, std::string_view name);

// Standard normal number #index of the stream (Box-Muller on one counter: even indices take
// the cosine branch, odd the sine branch of counter index/2).
float normal_at(PhiloxKey key, uint64_t index);
// Uniform in [0, 1) with 24 random bits.
float uniform_at(PhiloxKey key, uint64_t index);
// Uniform 64-bit integer #index of the stream.
uint64_t u64_at(PhiloxKey key, uint64_t index);

// Dropout multipliers: z[i] for element index0 + i * stride of the stream is 0 (dropped) or
// 1 / (1 - p) (kept, inverted scaling). Element e is kept iff u >= p, u = (w >> 8) / 2^24 with w
// word e % 4 of Philox block e / 4 (counter (e / 4) as two 32-bit words, then 0, 0), so a mask
// depends only on (key, element index): every layout that indexes elements by their global
// coordinates drops the same ones.
void dropout_scales(float* z, PhiloxKey key, uint64_t index0, uint64_t stride, int64_t n, float p);

// Fills `out` (the local shard, contiguous) with std * N(0,1) drawn at global element indices.
// The global tensor has shape `global`; the shard takes [offset, offset + extent) along
// `shard_dim` (shard_dim < 0: the whole tensor).
void fill_normal_shard(float* out,
                       PhiloxKey key,
                       float std,
                       const Shape& global,
                       int shard_dim,
                       int64_t offset,
                       int64_t extent);

}  // namespace mtron
