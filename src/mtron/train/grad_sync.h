// defines: GradSync
//
// Data-parallel gradient reduction of one model chunk's gradient buffer, bucket by bucket
// (model/params.h), over the DP x CP group: an all-reduce per bucket, or with the distributed
// optimizer a reduce-scatter that leaves each rank the sum for its part of every bucket.
// With --overlap-grad-reduce the buckets are launched as non-blocking collectives while backward
// still runs (ready() is called from the last micro-batch's backward as each layer finishes);
// deferred buckets (tied embeddings split over pipeline stages) always wait for finish(), after
// the caller has summed them over the embedding group.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "mtron/comm/comm.h"
#include "mtron/model/params.h"

namespace mtron::train {

class GradSync {
 public:
  GradSync(const model::ParamBuffer& params, Comm& dp, bool distributed_optimizer);

  // This rank's shard of each bucket (the whole bucket without the distributed optimizer).
  std::vector<std::pair<int64_t, int64_t>> shards() const;

  // Launches every bucket not yet launched whose parameters all sit at or above `offset`.
  void ready(int64_t offset);
  // Launches the rest, waits for everything; the gradients are then reduced (in this rank's
  // shards). Resets for the next step.
  void finish();
  // After an optimizer step on the shards: gathers every bucket's updated master weights.
  void gather_params();

 private:
  void launch(size_t b);

  const model::ParamBuffer& p_;
  Comm& dp_;
  bool distributed_;
  std::vector<bool> launched_;
  std::vector<std::unique_ptr<Request>> requests_;  // per bucket (null when not in flight)
  std::vector<Tensor> scattered_;                   // reduce-scatter outputs per bucket
};

}  // namespace mtron::train
