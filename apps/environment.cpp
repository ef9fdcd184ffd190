// The environment `mtron` needs before its libraries load (environment.h):
// - OPENBLAS_CORETYPE, when the kernels OpenBLAS picked do not fit the CPU's level
//   (kernels/cpu_isa.h: OpenBLAS 0.3.21 gives Sapphire/Emerald Rapids its Prescott kernels, and
//   MTRON_CPU_ISA may ask for less than OpenBLAS chose). OpenBLAS reads the variable when it is
//   loaded, so setting it later changes nothing.
// - OMP_WAIT_POLICY=PASSIVE unless the user chose a policy: with libgomp's default, threads that
//   wait at a barrier spin, and when the cores are shared (several ranks per node, other jobs,
//   tests side by side) a spinning thread steals the time of the one it waits for; small steps
//   then ran 50x slower. Passive waiting costs microseconds per parallel region, which a training
//   step does not notice. libgomp reads it when it is loaded.
// A user's own value of either variable is kept.
#include "environment.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "mtron/core/error.h"
#include "mtron/kernels/cpu_isa.h"

namespace mtron::app {

int prepare_environment(char** argv) {
  bool changed = false;
  try {
    kernels::cpu_isa();  // reads and checks MTRON_CPU_ISA
    if (!std::getenv("OPENBLAS_CORETYPE") && !kernels::openblas_core_fits()) {
      setenv("OPENBLAS_CORETYPE", kernels::openblas_core_for_cpu().c_str(), 1);
      changed = true;
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "mtron: %s\n", e.what());
    return 2;
  }
  if (!std::getenv("OMP_WAIT_POLICY")) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    changed = true;
  }
  // returns only if the exec failed: the program then goes on as it is (GEMMs say so)
  if (changed) execv("/proc/self/exe", argv);
  return -1;
}

}  // namespace mtron::app
