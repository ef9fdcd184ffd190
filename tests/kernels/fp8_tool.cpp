// fp8_tool FORMAT SCALE SRC IN OUT: runs the CPU fp8_quantize (kernels/fp8.h) on IN, a raw
// array of fp32 (SRC f32) or bf16 bit patterns (SRC bf16), with FORMAT e4m3|e5m2 and SCALE,
// and writes OUT: the quantised values' bf16 bit patterns, then the amax (one fp32, from 0).
// fp8_reference.py compares OUT with its own FP8 casts.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "mtron/kernels/fp8.h"

using namespace mtron;

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: fp8_tool e4m3|e5m2 SCALE f32|bf16 IN OUT\n");
    return 2;
  }
  const std::string format = argv[1], src = argv[3];
  const kernels::Fp8Format f =
      format == "e4m3" ? kernels::Fp8Format::kE4M3 : kernels::Fp8Format::kE5M2;
  const float scale = std::strtof(argv[2], nullptr);
  std::ifstream in(argv[4], std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
  const int64_t n = int64_t(bytes.size()) / (src == "f32" ? 4 : 2);
  std::vector<bf16> out{size_t(n)};
  float amax = 0;
  const kernels::Ctx cpu;
  if (src == "f32") {
    kernels::fp8_quantize(cpu, out.data(), &amax, reinterpret_cast<const float*>(bytes.data()),
                          scale, f, n);
  } else {
    kernels::fp8_quantize(cpu, out.data(), &amax, reinterpret_cast<const bf16*>(bytes.data()),
                          scale, f, n);
  }
  std::ofstream o(argv[5], std::ios::binary);
  o.write(reinterpret_cast<const char*>(out.data()), std::streamsize(out.size() * 2));
  o.write(reinterpret_cast<const char*>(&amax), 4);
  return o ? 0 : 1;
}
