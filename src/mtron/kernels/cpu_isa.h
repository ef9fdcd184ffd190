// defines: cpu_isa, cpu_isa_best, cpu_isa_levels, cpu_simd_target, cpu_simd_targets,
//          use_cpu_simd_target, cpu_gemm_paths, cpu_gemm_primitives, cpu_summary,
//          openblas_core_fits, openblas_core_for_cpu
//
// What the CPU kernels run on. The instruction-set levels, lowest first:
//   x86-64:  scalar, sse4, avx2, avx512, avx512_bf16, amx
//   aarch64: scalar, neon
// The level in use is the CPU's best, or the value of the environment variable MTRON_CPU_ISA,
// which caps both the SIMD kernels and the GEMM libraries (so any machine can run, say, the AVX2
// path: MTRON_CPU_ISA=avx2). A value that is not a level, or above the CPU's best, is an error
// (mtron::Error, naming the levels the CPU has).
//
// SIMD kernels (kernels/cpu/*.cpp) are compiled once per Highway target and the best target the
// level allows runs: scalar -> EMU128 (portable C++), sse4 -> SSE4, avx2 -> AVX2, avx512 and up
// -> AVX3, neon -> NEON. The SVE targets are not compiled: the micro-kernels keep arrays of
// vectors, which SVE's sizeless vector types cannot form, and Grace's SVE2 is 128 bits wide, as
// wide as NEON.
//
// GEMMs: fp32 through OpenBLAS when the kernels it chose when it was loaded fit the level (see
// openblas_core_fits), else through oneDNN; bf16 through oneDNN where it has a bf16 matmul at
// this level (AVX-512 and up: AVX512_BF16 and AMX units where present), else both operands are
// widened to fp32 (exactly: every bf16 is an fp32) and multiplied by the fp32 path, which keeps
// bf16 storage with fp32 accumulation.
#pragma once

#include <string>
#include <vector>

namespace mtron::kernels {

// The level in use (the first call reads MTRON_CPU_ISA; a bad value throws mtron::Error).
const std::string& cpu_isa();
// The CPU's best level.
const std::string& cpu_isa_best();
// The levels of this architecture, lowest first.
const std::vector<std::string>& cpu_isa_levels();

// The SIMD kernels' Highway target that runs now ("AVX2", "SSE4", "EMU128", ...).
std::string cpu_simd_target();
// Every Highway target compiled in that this CPU runs at the level in use, best first.
std::vector<std::string> cpu_simd_targets();
// Runs the SIMD kernels on `target` (one of cpu_simd_targets()) from now on; "" returns to the
// best target of the level. For tests that check every target in one process.
void use_cpu_simd_target(const std::string& target);

// "fp32 OpenBLAS (Haswell kernels), bf16 oneDNN 2.6.3 (AMX)" or similar.
std::string cpu_gemm_paths();
// The oneDNN matmul primitives the CPU GEMMs keep (at most a fixed number, the most recently
// used) and have made so far.
struct OneDnnPrimitives {
  int64_t cached = 0, made = 0, capacity = 0;
};
OneDnnPrimitives cpu_gemm_primitives();
// One line for logs and --version: level, SIMD target, GEMM paths, OpenMP threads.
std::string cpu_summary();

// Whether the kernels OpenBLAS chose when the library was loaded (from OPENBLAS_CORETYPE or its
// own CPU detection) fit the level in use: of the level's kind (AVX2 kernels at avx2, AVX-512
// kernels at avx512 and up) and never above a level MTRON_CPU_ISA set. OpenBLAS 0.3.21 does not
// know Sapphire/Emerald Rapids and falls back to its Prescott kernels (SSE3, 5-10x slower).
bool openblas_core_fits();
// The OPENBLAS_CORETYPE value whose kernels fit the level ("Haswell", "SkylakeX", ...); the
// variable is read when OpenBLAS is loaded, so a program sets it before it starts (apps/ does).
std::string openblas_core_for_cpu();

}  // namespace mtron::kernels
