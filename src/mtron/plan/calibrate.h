// defines: CalibrateOptions, run_calibration, run_gpu_calibration, launched_by_mpi
//
// `mtron plan --calibrate`: measures this machine as mtron's CPU trainer would use it, with
// the ranks of the current MPI job (run it as `mpirun -np N mtron plan --calibrate` for N ranks
// per node; without mpirun it measures one rank): GEMM times by shape through the kernel
// layer's gemm (forward, dgrad and wgrad shapes of transformer layers, fp32 and bf16), memory
// bandwidth with every rank streaming, and MPI collective times (all-reduce, all-gather,
// reduce-scatter, all-to-all, send/recv). Rank 0 merges the entry for this rank count into the
// calibration file and prints the fit. With --device cuda it measures this node's GPUs instead
// (calibrate_gpu.cpp: one rank per GPU, `mpirun -np <GPUs>`) and merges an entry for the GPU
// model.
#pragma once

#include <string>

namespace mtron::plan {

struct CalibrateOptions {
  std::string path;    // calibration file to update
  bool quick = false;  // fewer and smaller shapes (tests; GPUs: the CUDA emulation's size)
  bool cuda = false;   // measure the GPUs (--device cuda) instead of the CPU
};

// Returns the exit code (0 on rank 0 after writing the file).
int run_calibration(const CalibrateOptions& o);
int run_gpu_calibration(const CalibrateOptions& o);

// Launched by mpirun/srun (then MPI is to be initialised), or a plain process.
bool launched_by_mpi();

}  // namespace mtron::plan
