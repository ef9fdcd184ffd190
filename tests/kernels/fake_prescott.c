/* LD_PRELOAD shim for the OpenBLAS core-type trap test (tests/kernels/CMakeLists.txt). Like
   OpenBLAS 0.3.21 on Sapphire/Emerald Rapids, it decides when the library loads: if
   OPENBLAS_CORETYPE was not in the environment then, it reports the "Prescott" core for the
   life of the process (setting the variable later changes nothing); otherwise the real core.
   On any AVX-512 machine this makes mtron_kernels take its re-exec path. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>

static int coretype_at_load;

__attribute__((constructor)) static void record_environment(void) {
  coretype_at_load = getenv("OPENBLAS_CORETYPE") != NULL;
}

char* openblas_get_corename(void) {
  static char prescott[] = "Prescott";
  if (!coretype_at_load) return prescott;
  char* (*real)(void) = (char* (*)(void))dlsym(RTLD_NEXT, "openblas_get_corename");
  return real();
}
