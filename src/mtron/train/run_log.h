// defines: RunLog, RunHeader, log_run_header, optimizer_summary, ProfileStart, profile_start,
//          ProfileTimes, log_profile
//
// Where the last rank's training log goes, as Megatron's training_log and
// evaluate_and_print_results send it: the per-iteration line and the evaluation blocks on
// stdout (metrics.h), the JSONL metrics file when one is set (metrics_path), the TensorBoard
// event files with --tensorboard-dir and --wandb-project (tensorboard.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mtron/kernels/device.h"
#include "mtron/parallel/parallel_state.h"
#include "mtron/train/args.h"
#include "mtron/train/metrics.h"
#include "mtron/train/tensorboard.h"

namespace mtron::train {

class RunLog {
 public:
  // resumed: training continues from a checkpoint (the metrics file is appended to).
  RunLog(const TrainArgs& a, int64_t world_size, bool resumed);
  // After every iteration (TensorBoard's --tensorboard-log-interval points).
  void step(const TensorBoardStep& s);
  // At --log-interval: the log line, its JSONL record, TensorBoard's timers.
  void interval(const IterationLog& l);
  // After an evaluation of the validation split; `where` as Megatron prints it.
  void validation(const std::string& where, int64_t iteration, int64_t consumed, double loss);

 private:
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<TensorBoard> tensorboard_;
};

// What the lines a run starts with need beyond the flags.
struct RunHeader {
  std::string mfu_against;                 // the MFU denominator's description
  std::string where;                       // "one GPU per rank, NAME" or "N threads per rank"
  int64_t optimizer_state_bytes = 0;       // this rank's, on its device
  int64_t optimizer_host_state_bytes = 0;  // this rank's, offloaded to host memory
  int64_t expert_elems = 0;                // this rank's routed expert weights
  int64_t fp8_layers = 0;                  // this rank's linear layers in FP8 (--fp8-format)
  int64_t fp8_state_bytes = 0;             // their amax histories and scales
  int64_t params_on_rank = 0;              // this rank's parameters, its experts' included
  int tp_rank = 0, pp_rank = 0;
  bool first_of_dp_cp = false;  // data- and context-parallel rank 0
};

// The lines a run starts with: on rank 0 the version and CPU kernels, the model, the layout,
// the batch schedule when it varies, the parameter count, the precision and MFU denominator,
// Megatron's theoretical memory footprints and the flags' notes; Megatron's "number of
// parameters on (tensor, pipeline) model parallel rank" line on each rank of data- and
// context-parallel rank 0; on rank 0 and the logging rank (`logger`) the optimizer state and,
// for MoE, the expert weights this rank holds.
void log_run_header(const TrainArgs& a, int rank, bool logger, const RunHeader& h);
// The optimizer line of a Muon run's header and --print-layout: Muon's settings and, with its
// distributed optimizer, the layer-wise ownership (an AdamW run prints none).
std::string optimizer_summary(const TrainArgs& a);

// --profile's counters at the first profiled iteration: the bytes each of the ParallelState's
// groups' Comm has sent (TP, CP, DP x CP, PP, TP x PP, embedding, EP, ETP, EDP), then the
// world's; the work queued on device d so far.
struct ProfileStart {
  std::vector<int64_t> bytes;
  kernels::DeviceWork work;
};
ProfileStart profile_start(const ParallelState& ps, const Comm& world, Device d);

// The profiled iterations (all but the first): wall time, count, and the pipeline schedule's
// compute and waiting time over them.
struct ProfileTimes {
  double seconds = 0;
  int64_t iters = 0;
  double compute_s = 0, wait_s = 0;
  Device device = Device::kCPU;
};

// --profile's report at the end of a run (`iteration`: the last): on rank 0 and the logging rank
// the profile table; on every rank the bytes it sent per step by group (since `start`) and its
// pipeline compute/wait split; on a GPU, the device work per step (kernel launches, GEMMs,
// copies, host synchronisations).
void log_profile(const ParallelState& ps,
                 const Comm& world,
                 int64_t iteration,
                 const ProfileTimes& t,
                 const ProfileStart& start);

}  // namespace mtron::train
