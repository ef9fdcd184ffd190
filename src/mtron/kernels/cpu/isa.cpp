// The CPU's instruction-set level, the MTRON_CPU_ISA cap and the choice of SIMD target
// (kernels/cpu_isa.h). Highway's own detection says which SIMD targets run here; CPUID says
// which x86 matrix units there are (AVX512_BF16, AMX), which Highway 1.0 does not report.
#include <hwy/highway.h>
#include <hwy/targets.h>
#include <omp.h>

#include <cstdlib>
#include <cstring>

#include "mtron/core/error.h"
#include "mtron/kernels/cpu_isa.h"

#if HWY_ARCH_X86
#include <cpuid.h>
#endif

namespace mtron::kernels {
namespace {

struct Level {
  const char* name;
  int64_t simd;  // the Highway target the SIMD kernels run on at this level
};

#if HWY_ARCH_X86
const Level kLevels[] = {
    {"scalar", HWY_BASELINE_SCALAR}, {"sse4", HWY_SSE4}, {"avx2", HWY_AVX2}, {"avx512", HWY_AVX3},
    {"avx512_bf16", HWY_AVX3},       {"amx", HWY_AVX3}};

// CPUID leaf 7: AVX512_BF16 (subleaf 1, EAX bit 5); AMX-BF16 and AMX-TILE (subleaf 0, EDX
// bits 22 and 24), usable only if the OS saves the tile state (XCR0 bits 17 and 18).
bool cpuid7(unsigned subleaf, unsigned reg, unsigned bit) {
  unsigned r[4] = {0, 0, 0, 0};
  if (!__get_cpuid_count(7, subleaf, &r[0], &r[1], &r[2], &r[3])) return false;
  return (r[reg] >> bit) & 1u;
}
bool os_saves_tiles() {
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & (3u << 17)) == (3u << 17);
}

size_t best_level() {
  const int64_t t = hwy::SupportedTargets();
  if (!(t & HWY_AVX3)) return (t & HWY_AVX2) ? 2 : (t & HWY_SSE4) ? 1 : 0;
  if (cpuid7(0, 3, 22) && cpuid7(0, 3, 24) && os_saves_tiles()) return 5;
  return cpuid7(1, 0, 5) ? 4 : 3;
}
#else
const Level kLevels[] = {{"scalar", HWY_BASELINE_SCALAR}, {"neon", HWY_NEON}};

size_t best_level() {
  return (hwy::SupportedTargets() & HWY_NEON) ? 1 : 0;
}
#endif

std::string level_list(size_t upto) {
  std::string s;
  for (size_t i = 0; i <= upto; ++i) s += (i ? ", " : "") + std::string(kLevels[i].name);
  return s;
}

struct State {
  size_t best = 0, level = 0;
  bool capped = false;             // MTRON_CPU_ISA chose the level
  std::vector<std::string> names;  // of the levels
  std::vector<int64_t> targets;    // Highway targets compiled in and allowed, best first
  int64_t forced = 0;              // the target use_cpu_simd_target chose (0: none)
};

// Reads the CPU and MTRON_CPU_ISA once; caps Highway's dispatch at the level's target.
State& state() {
  static State s = [] {
    State st;
    for (const Level& l : kLevels) st.names.emplace_back(l.name);
    st.best = st.level = best_level();
    if (const char* env = std::getenv("MTRON_CPU_ISA"); env && *env) {
      size_t i = 0;
      while (i < std::size(kLevels) && std::strcmp(kLevels[i].name, env) != 0) ++i;
      MT_CHECK(i < std::size(kLevels), "MTRON_CPU_ISA=", env, ": not a level; one of ",
               level_list(std::size(kLevels) - 1));
      MT_CHECK(i <= st.best, "MTRON_CPU_ISA=", env, ": this CPU has at most ",
               kLevels[st.best].name, " (", level_list(st.best), ")");
      st.level = i;
      st.capped = true;
    }
    // every target better (a lower bit) than the level's is off
    hwy::DisableTargets(kLevels[st.level].simd - 1);
    for (int64_t t = hwy::SupportedTargets() & HWY_TARGETS; t != 0; t &= t - 1)
      st.targets.push_back(t & -t);
    MT_ASSERT(!st.targets.empty(), "no SIMD target of this build runs on this CPU");
    return st;
  }();
  return s;
}

}  // namespace

const std::string& cpu_isa() {
  const State& s = state();
  return s.names[s.level];
}

const std::string& cpu_isa_best() {
  const State& s = state();
  return s.names[s.best];
}

const std::vector<std::string>& cpu_isa_levels() {
  return state().names;
}

std::string cpu_simd_target() {
  const State& s = state();
  return hwy::TargetName(s.forced ? s.forced : s.targets.front());
}

std::vector<std::string> cpu_simd_targets() {
  std::vector<std::string> names;
  for (int64_t t : state().targets) names.emplace_back(hwy::TargetName(t));
  return names;
}

void use_cpu_simd_target(const std::string& target) {
  State& s = state();
  int64_t chosen = 0;
  for (int64_t t : s.targets)
    if (target == hwy::TargetName(t)) chosen = t;
  MT_CHECK(target.empty() || chosen != 0, "SIMD target ", target, " is not available here (level ",
           cpu_isa(), ")");
  s.forced = chosen;
  hwy::SetSupportedTargetsForTest(chosen);  // 0: back to the CPU's targets under the cap
}

std::string cpu_summary() {
  const State& s = state();
  const std::string level =
      s.capped ? str(cpu_isa(), " (MTRON_CPU_ISA; CPU best ", cpu_isa_best(), ")") : cpu_isa();
  return str("CPU ", level, ", SIMD kernels ", cpu_simd_target(), ", GEMM ", cpu_gemm_paths(),
             ", OpenMP ", omp_get_max_threads(), " threads");
}

}  // namespace mtron::kernels
