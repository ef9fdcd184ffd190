// The pipeline schedules' op order against Megatron's: the interleaved schedule's table of
// (micro-batch, chunk) per virtual micro-batch (schedules.py's get_schedule_table and its
// docstring example) and its warmup counts.
#include <gtest/gtest.h>

#include <set>
#include <utility>
#include <vector>

#include "mtron/parallel/schedule.h"

namespace mtron::parallel {
namespace {

std::vector<std::pair<int64_t, int>> of(const std::vector<PipelineOp>& ops, bool forward) {
  std::vector<std::pair<int64_t, int>> v;
  for (const PipelineOp& op : ops)
    if (op.forward == forward) v.emplace_back(op.microbatch, op.chunk);
  return v;
}

TEST(Schedule, InterleavedGroupsAsMegatronsTable) {
  // convert_schedule_table_to_order's docstring: PP2 N3 M5 VP2
  //   microbatch_id  | 0 1 2 0 1 2 3 4 3 4
  //   model_chunk_id | 0 0 0 1 1 1 0 0 1 1
  const std::vector<std::pair<int64_t, int>> table = {{0, 0}, {1, 0}, {2, 0}, {0, 1}, {1, 1},
                                                      {2, 1}, {3, 0}, {4, 0}, {3, 1}, {4, 1}};
  for (int rank : {0, 1}) {
    const std::vector<PipelineOp> ops = pipeline_ops(rank, 2, 2, 5, 3);
    EXPECT_EQ(of(ops, true), table);
    std::vector<std::pair<int64_t, int>> backward = table;  // the chunks in reverse
    for (auto& [mb, chunk] : backward) chunk = 1 - chunk;
    EXPECT_EQ(of(ops, false), backward);
    // Megatron's warmup: (PP - rank - 1) * 2 + (VP - 1) * N forwards, then the steady state's
    // forward before the first backward
    size_t leading = 0;
    while (ops[leading].forward) ++leading;
    EXPECT_EQ(leading, size_t((2 - rank - 1) * 2 + 3 + 1)) << "rank " << rank;
  }
}

TEST(Schedule, DefaultGroupsArePPAndOneF1BIsInOrder) {
  // N = PP = 2 over M 4: groups {0, 1}, {2, 3} through both chunks
  const std::vector<std::pair<int64_t, int>> table = {{0, 0}, {1, 0}, {0, 1}, {1, 1},
                                                      {2, 0}, {3, 0}, {2, 1}, {3, 1}};
  EXPECT_EQ(of(pipeline_ops(1, 2, 2, 4, 2), true), table);
  // 1F1B: the group argument is unused; micro-batches in order, PP - rank - 1 warmup forwards
  // and the steady state's first forward
  const std::vector<PipelineOp> ops = pipeline_ops(0, 4, 1, 6, 4);
  size_t leading = 0;
  while (ops[leading].forward) ++leading;
  EXPECT_EQ(leading, 4u);
  std::set<int64_t> seen;
  for (const auto& [mb, chunk] : of(ops, false)) {
    EXPECT_EQ(chunk, 0);
    EXPECT_EQ(mb, int64_t(seen.size()));
    seen.insert(mb);
  }
}

}  // namespace
}  // namespace mtron::parallel
