// op_check: every kernel of kernels/*.h on the CUDA device against the reference kernels, over
// several shapes including awkward ones, printing one table row per output compared (the op
// table of tests/kernels/op_table.h, which the CPU kernels' tests run on every SIMD target).
//
//   op_check [--small] [--filter SUBSTRING]
//
// --small runs only small shapes: that is how CI runs it against the CPU emulation of the CUDA
// kernels (tests: kernels.cuda_sim_op_check). bench/gpu/run.sh runs the full set on a GPU with
// MTRON_CUDA_SYNC=1, so a kernel fault is reported against the kernel that caused it. Exit
// status 1 if any comparison fails.
#include <cstdio>
#include <string>

#include "mtron/kernels/device.h"
#include "op_table.h"

int main(int argc, char** argv) {
  using namespace mtron::kernels;
  test::OpTableOptions options;
  options.small = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--small") {
      options.small = true;
    } else if (a == "--filter" && i + 1 < argc) {
      options.filter = argv[++i];
    } else {
      std::fprintf(stderr, "usage: op_check [--small] [--filter SUBSTRING]\n");
      return 2;
    }
  }
  try {
    init_device(mtron::Device::kCUDA, 0);
    const DeviceProperties p = device_properties(mtron::Device::kCUDA);
    std::printf(
        "op_check: CUDA device \"%s\" (sm_%d%d, %d SMs) against the reference kernels%s\n\n",
        p.name.c_str(), p.compute_major, p.compute_minor, p.multiprocessors,
        options.small ? " (small shapes)" : "");
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "op_check: %s\n", ex.what());
    return 2;
  }
  const int failed = test::run_op_table(Ctx{mtron::Device::kCUDA, nullptr}, options);
  const DeviceMemory mem = device_memory(mtron::Device::kCUDA);
  std::printf("\ndevice memory: %.1f MiB allocated now, %.1f MiB at most, %.1f MiB reserved\n",
              double(mem.allocated) / (1 << 20), double(mem.max_allocated) / (1 << 20),
              double(mem.reserved) / (1 << 20));
  return failed == 0 ? 0 : 1;
}
