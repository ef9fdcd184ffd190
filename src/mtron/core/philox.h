// defines: rng_key, normal_at, uniform_at, u64_at, fill_normal_shard (and, from
//          core/philox_inline.h, PhiloxKey, philox4x32, dropout_scales)
//
// Counter-based randomness: a value is a pure function of (key, counter), with no state to
// carry. Parameters are keyed by (seed, parameter name) and indexed by the element's position
// in the *global* (unsharded) tensor, so every shard of every layout draws exactly the values
// the 1-process run draws for those elements: every layout starts from the same model
// (docs/architecture.md, "Layout invariance").
#pragma once

#include <cstdint>
#include <string_view>

#include "mtron/core/philox_inline.h"
#include "mtron/core/tensor.h"

namespace mtron {

// Key for a named stream: splitmix64(seed) mixed with FNV-1a of the name.
PhiloxKey rng_key(uint64_t seed, std::string_view name);

// Standard normal number #index of the stream (Box-Muller on one counter: even indices take
// the cosine branch, odd the sine branch of counter index/2).
float normal_at(PhiloxKey key, uint64_t index);
// Uniform in [0, 1) with 24 random bits.
float uniform_at(PhiloxKey key, uint64_t index);
// Uniform 64-bit integer #index of the stream.
uint64_t u64_at(PhiloxKey key, uint64_t index);

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
