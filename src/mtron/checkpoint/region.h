// defines: Region, region_runs, validate_region, regions_tile
//
// How a checkpoint piece, or the part of a tensor a rank needs, sits in its global tensor (the
// idea of Megatron-Core's ShardedTensor with a flattened range): a rectangular block of the
// global tensor (offset and shape per dimension: a tensor-parallel shard), of which a contiguous
// range of elements in the block's row-major order is held (a distributed-optimizer shard cuts
// the flat buffer across parameter boundaries, so its pieces are such ranges). Resharding is
// then one operation: the element runs two regions share, contiguous in both.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mtron/core/tensor.h"

namespace mtron::checkpoint {

struct Region {
  Shape global;                          // shape of the whole tensor
  Shape offset;                          // the block's start in each dimension
  Shape block;                           // the block's shape
  int64_t flat_begin = 0, flat_end = 0;  // held elements of the row-major block

  int64_t size() const { return flat_end - flat_begin; }
  bool whole_block() const { return flat_begin == 0 && flat_end == numel(block); }
  // The whole tensor as one region.
  static Region whole(const Shape& global);
};

// Calls f(src_index, dst_index, n) for each run of elements that both regions hold, indices
// relative to each region's first held element, in increasing order; runs that are contiguous in
// both regions are merged. The regions must have the same rank; their global shapes may differ
// (only elements inside both blocks are visited).
void region_runs(const Region& src,
                 const Region& dst,
                 const std::function<void(int64_t, int64_t, int64_t)>& f);

// Throws mtron::Error (prefixed with `where`) unless the region is consistent: block inside the
// global shape, flat range inside the block.
void validate_region(const Region& r, const std::string& where);

// True when the regions (all of one global shape) cover the global tensor exactly once.
bool regions_tile(const std::vector<const Region*>& pieces);

}  // namespace mtron::checkpoint
