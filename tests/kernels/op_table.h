// defines: run_op_table: every kernel op of kernels/*.h run on one device against the reference
//
// One table of op cases (shapes that include the awkward ones: 1, odd sizes, vector tails, empty
// rows) serves every backend: the CPU kernels on each SIMD target (test_kernels, OpTable.*), the
// CUDA kernels on the CPU emulation (kernels.cuda_sim_op_check) and on a GPU (bench/gpu/op_check).
// Each case runs the op on `dev` and the naive reference (kernels/ref) on the host from the same
// inputs and compares every output: the normwise relative error |got - ref| / |ref| (2-norms;
// equal infinities count as equal, any NaN fails) must stay within 1e-5 for fp32 ops and 1e-2
// where the op reads bf16; conversions and copies must match bit for bit. Outputs an op writes (=)
// start as NaN, so an element the backend forgets to write fails; outputs it accumulates into (+=)
// start from the same random values on both sides.
#pragma once

#include <string>

#include "mtron/kernels/ctx.h"

namespace mtron::kernels::test {

struct OpTableOptions {
  bool small = true;      // only shapes small enough for the emulation and CI; else GPU sizes too
  std::string filter;     // run only the ops whose name contains this
  bool print_all = true;  // one row per comparison; false: the failing ones only
};

// Runs the table on `dev`; returns the number of failed comparisons (0: all passed).
int run_op_table(const Ctx& dev, const OpTableOptions& options);

}  // namespace mtron::kernels::test
