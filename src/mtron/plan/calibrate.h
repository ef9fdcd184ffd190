// defines: CalibrateOptions, run_calibration
//
// `mtron plan --calibrate`: measures this machine as mtron's CPU trainer would use it, with
// the ranks of the current MPI job (run it as `mpirun -np N mtron plan --calibrate` for N ranks
// per node; without mpirun it measures one rank): GEMM times by shape (forward, dgrad and wgrad
// shapes of transformer layers, fp32 and bf16), memory bandwidth with every rank streaming, and
// MPI collective times (all-reduce, all-gather, reduce-scatter, all-to-all, send/recv). Rank 0
// merges the entry for this rank count into the calibration file and prints the fit.
#pragma once

#include <string>

namespace mtron::plan {

struct CalibrateOptions {
  std::string path;    // calibration file to update
  bool quick = false;  // fewer shapes and sizes (tests)
};

// Returns the exit code (0 on rank 0 after writing the file).
int run_calibration(const CalibrateOptions& o);

}  // namespace mtron::plan
