// defines: CalibrateOptions, run_calibration, run_gpu_calibration, time_ranks
//
// `mtron plan --calibrate`: measures this machine as mtron's CPU trainer would use it, with
// the ranks of the current MPI job (run it as `mpirun -np N mtron plan --calibrate` for N ranks
// per node; without mpirun it measures one rank): GEMM times by shape through the kernel
// layer's gemm (forward, dgrad and wgrad shapes of transformer layers, fp32 and bf16), memory
// bandwidth with every rank streaming, and MPI collective times (all-reduce, all-gather,
// reduce-scatter, all-to-all, send/recv). Rank 0 merges the entry for this rank count into the
// calibration file and prints the fit. The ranks are those of parallel/launch.h (its launcher
// detection, MPI session and world Comm; an error on one rank ends the job) and every
// collective goes through the comm layer. With --device cuda it measures this node's GPUs instead
// (calibrate_gpu.cpp: one rank per GPU, `mpirun -np <GPUs>`) and merges an entry for the GPU
// model.
#pragma once

#include <functional>
#include <string>

namespace mtron {
class Comm;
class Launch;
}  // namespace mtron

namespace mtron::plan {

struct CalibrateOptions {
  std::string path;    // calibration file to update
  bool quick = false;  // fewer and smaller shapes (tests; GPUs: the CUDA emulation's size)
  bool cuda = false;   // measure the GPUs (--device cuda) instead of the CPU
};

// Starts the ranks (run_main of parallel/launch.h) and measures. Returns the exit code (0 after
// rank 0 wrote the file; 2 for an mtron::Error).
int run_calibration(const CalibrateOptions& o);
// The GPU calibration on the ranks of `launch` (one per GPU of one node).
int run_gpu_calibration(const CalibrateOptions& o, Launch& launch);

// Times fn on every rank of `world` at once: one warm-up call, then repetitions (each after a
// barrier) until there are min_reps of them and they took min_seconds, 50 at most. Returns the
// median over the repetitions of the slowest rank's time.
double time_ranks(Comm& world,
                  const std::function<void()>& fn,
                  double min_seconds = 0.05,
                  int min_reps = 3);

}  // namespace mtron::plan
