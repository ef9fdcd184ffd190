// defines: PipelineOp, pipeline_ops, StageModel, run_pipeline
//
// Megatron's pipeline schedules over PP ranks with v model chunks per rank (v = 1: 1F1B;
// v > 1: interleaved). A rank's work is the list of ops pipeline_ops() returns: warmup
// forwards, then one-forward-one-backward, then cooldown backwards, with Megatron's warmup
// counts (PP - rank - 1 for 1F1B; (PP - rank - 1) * 2 + (v - 1) * N interleaved) and its
// chunk/micro-batch order (groups of N micro-batches per chunk, N being
// --microbatch-group-size-per-virtual-pipeline-stage, PP by default; the last group takes what
// is left: 0 or at least PP micro-batches, ParallelConfig's rule).
//
// run_pipeline executes the ops with point-to-point messages between neighbouring stages:
// sends are non-blocking and their buffers kept until the end of the step; receives block
// right before the op that needs them. Since every rank's op order is a linearisation of the
// same dependency graph and sends never wait, this cannot deadlock. Messages are tagged by the
// receiving virtual stage and direction; MPI keeps the order of messages with one tag, which is
// the micro-batch order each consumer uses.
#pragma once

#include <cstdint>
#include <vector>

#include "mtron/comm/comm.h"
#include "mtron/kernels/ctx.h"

namespace mtron::parallel {

struct PipelineOp {
  bool forward;
  int chunk;
  int64_t microbatch;
};

// The op order of pipeline rank `rank` of `pp`, with `vpp` chunks per rank, M micro-batches in
// groups of `group` (interleaved only). forward_only (evaluation): every forward in schedule
// order, no backward.
std::vector<PipelineOp> pipeline_ops(
    int rank, int pp, int vpp, int64_t M, int64_t group, bool forward_only = false);

// What the schedule drives: this rank's model chunks (chunk c is virtual stage c * PP + rank).
class StageModel {
 public:
  virtual ~StageModel() = default;
  // Runs the forward of (chunk, microbatch). input is the previous virtual stage's output (null
  // for the first virtual stage) and stays valid until this micro-batch's backward of the chunk.
  // Returns the output to send on (null for the last virtual stage), valid until that backward.
  virtual const float* forward(int chunk, int64_t microbatch, const float* input) = 0;
  // Runs the backward; dout is null for the last virtual stage. Returns d(input) to send back
  // (null for the first virtual stage), valid until the next call.
  virtual const float* backward(int chunk, int64_t microbatch, const float* dout) = 0;
  // Elements of one activation message between stages.
  virtual int64_t message_elems() const = 0;
  // Where the activations live (the schedule's message buffers go there too).
  virtual kernels::Ctx ctx() const { return {}; }
};

// Where a rank's time in one step went: running its chunks, or blocked waiting for a
// neighbour's activation or gradient (the pipeline bubble, plus transfer time).
struct PipelineTimes {
  double compute_s = 0, wait_s = 0;
};

// Runs one step's forwards and backwards (or forwards only) of M micro-batches over the
// pipeline group `pp`.
PipelineTimes run_pipeline(
    StageModel& model, Comm& pp, int vpp, int64_t M, int64_t group, bool forward_only = false);

}  // namespace mtron::parallel
