// CPU GEMM: fp32 through OpenBLAS, bf16 through oneDNN matmul (AMX where the CPU has it,
// AVX512_BF16 otherwise). docs/kernels.md has the measurements behind the split.
//
// oneDNN: creating a primitive costs tens to hundreds of microseconds, so primitives are cached
// per (shape, strides, transposes, dtype, alpha, beta) for the life of the process. A training
// step uses a few dozen distinct shapes; the cache never needs evicting.
//
// OpenBLAS 0.3.21 picks its kernels once, when the library loads, from OPENBLAS_CORETYPE or its
// CPUID tables; those tables do not know Sapphire/Emerald Rapids and fall back to Prescott (SSE3,
// 5-10x slower). Setting the variable later has no effect, so this file's constructor, which runs
// after OpenBLAS's own and before main, re-executes the process with OPENBLAS_CORETYPE=SkylakeX
// when the CPU has AVX-512 but OpenBLAS chose a core without it (and sets OpenMP's wait policy,
// below). If that did not happen (no /proc/self/exe, exec failed), fp32 GEMMs fall back to
// oneDNN with one warning.
#include <cblas.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "mtron/core/error.h"
#include "mtron/core/log.h"
#include "mtron/kernels/cpu/cpu_ops.h"

namespace mtron::kernels::cpu {
namespace {

using dnnl::memory;

struct Key {
  int64_t M, N, K, lda, ldb, ldc;
  bool ta, tb, bf16;
  float alpha, beta;
  bool operator==(const Key&) const = default;
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    size_t h = 0;
    auto mix = [&h](size_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
    for (int64_t v : {k.M, k.N, k.K, k.lda, k.ldb, k.ldc}) mix(std::hash<int64_t>()(v));
    mix(size_t(k.ta) | size_t(k.tb) << 1 | size_t(k.bf16) << 2);
    mix(std::hash<float>()(k.alpha));
    mix(std::hash<float>()(k.beta));
    return h;
  }
};

struct Entry {
  memory::desc a, b, c;
  dnnl::matmul prim;
};

// The process-wide oneDNN engine and primitive cache (thread-safe); one stream per calling
// thread, since a oneDNN stream must not be shared by concurrent callers.
class Gemm {
 public:
  static Gemm& get() {
    static Gemm g;
    return g;
  }

  void run(const Key& k, const void* A, const void* B, float* C) {
    const Entry& e = entry(k);
    memory am(e.a, engine_, const_cast<void*>(A));
    memory bm(e.b, engine_, const_cast<void*>(B));
    memory cm(e.c, engine_, C);
    thread_local dnnl::stream stream(engine_);
    e.prim.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    stream.wait();
  }

 private:
  Gemm() : engine_(dnnl::engine::kind::cpu, 0) {}

  const Entry& entry(const Key& k) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(k);
    if (it != cache_.end()) return *it->second;
    const auto dt = k.bf16 ? memory::data_type::bf16 : memory::data_type::f32;
    // op(A)[M,K]: stored row-major [M,K] (strides lda,1) or [K,M] read transposed (1,lda).
    memory::desc a({k.M, k.K}, dt, k.ta ? memory::dims{1, k.lda} : memory::dims{k.lda, 1});
    memory::desc b({k.K, k.N}, dt, k.tb ? memory::dims{1, k.ldb} : memory::dims{k.ldb, 1});
    memory::desc c({k.M, k.N}, memory::data_type::f32, memory::dims{k.ldc, 1});
    dnnl::primitive_attr attr;
    if (k.alpha != 1.0f) attr.set_output_scales(0, {k.alpha});
    if (k.beta != 0.0f) {
      dnnl::post_ops po;
      po.append_sum(k.beta);
      attr.set_post_ops(po);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine_);
    auto e = std::make_unique<Entry>(Entry{a, b, c, dnnl::matmul(pd)});
    return *cache_.emplace(k, std::move(e)).first->second;
  }

  dnnl::engine engine_;
  std::mutex mu_;
  std::unordered_map<Key, std::unique_ptr<Entry>, KeyHash> cache_;
};

// OpenBLAS cores whose sgemm uses AVX-512.
bool avx512_core(const char* name) {
  for (const char* c : {"SkylakeX", "Cooperlake", "SapphireRapids"})
    if (std::strcmp(name, c) == 0) return true;
  return false;
}

// Whether OpenBLAS runs kernels fit for this CPU: an AVX-512 core if the CPU has AVX-512 (on
// other CPUs its detection is trusted).
bool openblas_fit() {
  static const bool fit = [] {
    const bool ok = !__builtin_cpu_supports("avx512f") || avx512_core(openblas_get_corename());
    if (!ok)
      log_warn(
          "OpenBLAS chose '{}' kernels on an AVX-512 CPU; fp32 GEMMs use oneDNN instead (start "
          "the process with OPENBLAS_CORETYPE=SkylakeX to use OpenBLAS)",
          openblas_get_corename());
    return ok;
  }();
  return fit;
}

// Runs before main: glibc passes (argc, argv, envp) to ELF constructors. Two settings must be
// in the environment before the libraries read it, so when either is missing the process sets it
// and re-executes itself once:
// - OPENBLAS_CORETYPE=SkylakeX when OpenBLAS chose non-AVX-512 kernels on an AVX-512 CPU;
// - OMP_WAIT_POLICY=PASSIVE unless the user chose a policy: with libgomp's default, threads
//   that wait at a barrier spin, and when the cores are shared (several ranks per node, other
//   jobs, CI running tests side by side) a spinning thread steals the time of the one it waits
//   for; small steps then ran 50x slower here. Passive waiting costs microseconds per parallel
//   region, which a training step does not notice.
__attribute__((constructor)) void fix_environment_reexec(int, char** argv, char**) {
  __builtin_cpu_init();  // __builtin_cpu_supports may not be initialised yet in a constructor
  bool changed = false;
  if (!std::getenv("OPENBLAS_CORETYPE") && __builtin_cpu_supports("avx512f") &&
      !avx512_core(openblas_get_corename())) {
    setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
    changed = true;
  }
  if (!std::getenv("OMP_WAIT_POLICY")) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    changed = true;
  }
  if (changed) execv("/proc/self/exe", argv);  // returns only on failure: openblas_fit() says so
}

CBLAS_TRANSPOSE cblas_trans(bool t) {
  return t ? CblasTrans : CblasNoTrans;
}

// C = beta C for the degenerate K = 0 product (beta = 0: C is write-only).
void scale_c(int64_t M, int64_t N, float beta, float* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
}

void gemm_any(Trans ta,
              Trans tb,
              int64_t M,
              int64_t N,
              int64_t K,
              float alpha,
              const void* A,
              int64_t lda,
              const void* B,
              int64_t ldb,
              float beta,
              float* C,
              int64_t ldc,
              bool bf16) {
  if (M == 0 || N == 0) return;
  if (K == 0) return scale_c(M, N, beta, C, ldc);
  const Key k{M, N, K, lda, ldb, ldc, ta == Trans::kT, tb == Trans::kT, bf16, alpha, beta};
  if (!bf16 && openblas_fit()) {
    // OpenBLAS reads C when beta != 0 only, so beta = 0 ignores NaN in C as gemm.h promises
    cblas_sgemm(CblasRowMajor, cblas_trans(k.ta), cblas_trans(k.tb), blasint(M), blasint(N),
                blasint(K), alpha, static_cast<const float*>(A), blasint(lda),
                static_cast<const float*>(B), blasint(ldb), beta, C, blasint(ldc));
    return;
  }
  Gemm::get().run(k, A, B, C);
}

}  // namespace

std::string gemm_library_info() {
  const dnnl_version_t* v = dnnl_version();
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  const char* units = isa == dnnl::cpu_isa::avx512_core_amx    ? "AMX"
                      : isa == dnnl::cpu_isa::avx512_core_bf16 ? "AVX512_BF16"
                                                               : "no bf16 units";
  const std::string f32 = openblas_fit() ? str("OpenBLAS (", openblas_get_corename(), " kernels)")
                                         : std::string("oneDNN (OpenBLAS kernels unfit)");
  return str("fp32 ", f32, ", bf16 oneDNN ", v->major, ".", v->minor, ".", v->patch, " (", units,
             ")");
}

void gemm(Trans ta,
          Trans tb,
          int64_t M,
          int64_t N,
          int64_t K,
          float alpha,
          const float* A,
          int64_t lda,
          const float* B,
          int64_t ldb,
          float beta,
          float* C,
          int64_t ldc) {
  gemm_any(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, false);
}

void gemm(Trans ta,
          Trans tb,
          int64_t M,
          int64_t N,
          int64_t K,
          float alpha,
          const bf16* A,
          int64_t lda,
          const bf16* B,
          int64_t ldb,
          float beta,
          float* C,
          int64_t ldc) {
  gemm_any(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, true);
}

}  // namespace mtron::kernels::cpu
