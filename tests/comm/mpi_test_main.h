// defines: mpi_test_launch
//
// main() for gtest binaries run under mpirun (mpi_test_main.cpp): every rank runs every test;
// rank 0 prints the usual report, other ranks print only their failures, and the exit code is
// non-zero when any rank failed. Tests must keep collectives symmetric across ranks (use EXPECT,
// not ASSERT, around them). `--max-count=N` lowers MpiOptions::max_count, so the same tests
// exercise the chunked paths on small buffers. A 120 s collective watchdog turns hangs into
// failures.
#pragma once

#include "mtron/parallel/launch.h"

namespace mtron {

Launch& mpi_test_launch();

}  // namespace mtron
