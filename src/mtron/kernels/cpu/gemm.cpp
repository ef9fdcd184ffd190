// CPU GEMM: fp32 through OpenBLAS, bf16 through oneDNN matmul (AMX where the CPU has it,
// AVX512_BF16 otherwise) or, where oneDNN has no bf16 matmul at the CPU's level (below
// AVX-512), widened to fp32; fp16 widened to fp32 (exact, as bf16: every fp16 value is an fp32,
// and the products accumulate in fp32 as on a GPU's fp16 tensor cores with fp32 accumulation).
// kernels/cpu_isa.h has the rules, docs/kernels.md the measurements.
//
// oneDNN: creating a primitive costs about half a millisecond, so primitives are cached per
// (shape, strides, transposes, dtype, alpha, beta): the most recently used kPrimitives of them
// (core/lru_cache.h). A dense model's step uses a few dozen shapes; the experts of a mixture of
// experts a new row count each. oneDNN's own primitive cache is off, so an evicted primitive's
// memory (about half a megabyte) goes with it. oneDNN reports failure by throwing dnnl::error;
// every call here turns that into mtron::Error naming the GEMM.
//
// OpenBLAS 0.3.21 picks its kernels once, when the library loads, from OPENBLAS_CORETYPE or its
// CPUID tables (which send Sapphire/Emerald Rapids to Prescott kernels). A process whose
// OpenBLAS kernels do not fit the level (openblas_core_fits) runs fp32 GEMMs through oneDNN,
// and says so once; `mtron` sets OPENBLAS_CORETYPE before it starts (apps/environment.cpp).
#include <cblas.h>
#include <strings.h>

#include <algorithm>
#include <dnnl.hpp>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "mtron/core/error.h"
#include "mtron/core/log.h"
#include "mtron/core/lru_cache.h"
#include "mtron/kernels/cpu/cpu_ops.h"
#include "mtron/kernels/cpu_isa.h"

namespace mtron::kernels {
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

constexpr size_t kPrimitives = 256;  // cached oneDNN primitives

std::string describe(const Key& k) {
  return str(k.bf16 ? "bf16" : "fp32", " gemm M=", k.M, " N=", k.N, " K=", k.K, k.ta ? " A^T" : "",
             k.tb ? " B^T" : "");
}

#if defined(__x86_64__)
// oneDNN's ISA for each level of kernels/cpu_isa.h (x86-64).
dnnl::cpu_isa dnnl_isa(const std::string& level) {
  if (level == "avx2") return dnnl::cpu_isa::avx2;
  if (level == "avx512") return dnnl::cpu_isa::avx512_core;
  if (level == "avx512_bf16") return dnnl::cpu_isa::avx512_core_bf16;
  if (level == "amx") return dnnl::cpu_isa::avx512_core_amx;
  return dnnl::cpu_isa::sse41;
}
#endif

// The process-wide oneDNN engine and primitive cache (thread-safe); one stream per calling
// thread, since a oneDNN stream must not be shared by concurrent callers.
class OneDnn {
 public:
  static OneDnn& get() {
    static OneDnn g;
    return g;
  }

  void run(const Key& k, const void* A, const void* B, float* C) {
    try {
      const std::shared_ptr<const Entry> e = entry(k);
      memory am(e->a, engine_, const_cast<void*>(A));
      memory bm(e->b, engine_, const_cast<void*>(B));
      memory cm(e->c, engine_, C);
      thread_local dnnl::stream stream(engine_);
      e->prim.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
      stream.wait();
    } catch (const dnnl::error& ex) {
      throw Error(str("oneDNN failed on a ", describe(k), ": ", ex.what()));
    }
  }

  // Whether oneDNN has a bf16 matmul at the level in use (it has none below AVX-512).
  bool has_bf16() const { return has_bf16_; }
  OneDnnPrimitives primitives() {
    std::lock_guard<std::mutex> lock(mu_);
    return {int64_t(cache_.size()), cache_.made(), int64_t(cache_.capacity())};
  }
  std::string isa() const {
    switch (dnnl::get_effective_cpu_isa()) {
      case dnnl::cpu_isa::avx512_core_amx:
        return "AMX";
      case dnnl::cpu_isa::avx512_core_bf16:
        return "AVX512_BF16";
      case dnnl::cpu_isa::avx512_core:
        return "AVX-512";
      case dnnl::cpu_isa::avx2:
        return "AVX2";
      default:
        return "baseline ISA";
    }
  }

 private:
  OneDnn() : engine_(init_engine()) {
    try {
      memory::desc a({2, 2}, memory::data_type::bf16, memory::dims{2, 1});
      memory::desc c({2, 2}, memory::data_type::f32, memory::dims{2, 1});
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, c), engine_);
      has_bf16_ = true;
    } catch (const dnnl::error&) {
      has_bf16_ = false;
    }
  }

  // Caps oneDNN at the level before its first primitive (the cap takes effect only then).
  static dnnl::engine init_engine() {
#if defined(__x86_64__)
    if (cpu_isa() != cpu_isa_best()) dnnl::set_max_cpu_isa(dnnl_isa(cpu_isa()));
#endif
    dnnl::set_primitive_cache_capacity(0);  // cache_ holds the primitives
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }

  std::shared_ptr<const Entry> entry(const Key& k) {
    std::lock_guard<std::mutex> lock(mu_);
    return cache_.get(k, [&] { return make_entry(k); });
  }

  std::unique_ptr<Entry> make_entry(const Key& k) const {
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
    return std::make_unique<Entry>(Entry{a, b, c, dnnl::matmul(pd)});
  }

  dnnl::engine engine_;
  bool has_bf16_ = false;
  std::mutex mu_;
  LruCache<Key, const Entry, KeyHash> cache_{kPrimitives};
};

// OpenBLAS x86 cores by the widest vectors their sgemm uses: 1 SSE, 2 AVX, 3 AVX2, 4 AVX-512
// (0: not an x86 core this table knows; its choice is trusted).
int core_class(const char* name) {
  static const std::pair<const char*, int> kCores[] = {
      {"Prescott", 1},      {"Core2", 1},      {"Penryn", 1},      {"Dunnington", 1},
      {"Nehalem", 1},       {"Atom", 1},       {"Opteron", 1},     {"Opteron_SSE3", 1},
      {"Barcelona", 1},     {"Bobcat", 1},     {"Nano", 1},        {"Sandybridge", 2},
      {"Bulldozer", 2},     {"Piledriver", 2}, {"Steamroller", 2}, {"Excavator", 2},
      {"Haswell", 3},       {"Zen", 3},        {"SkylakeX", 4},    {"Cooperlake", 4},
      {"SapphireRapids", 4}};
  for (const auto& [core, cls] : kCores)
    if (strcasecmp(core, name) == 0) return cls;
  return 0;
}

// The core class a level asks for: 3 at avx2, 4 at avx512 and up, 1 below (0 off x86).
int level_class(const std::string& level) {
  if (level == "avx2") return 3;
  if (level.rfind("avx512", 0) == 0 || level == "amx") return 4;
  return level == "scalar" || level == "sse4" ? 1 : 0;
}

// Whether fp32 GEMMs go through OpenBLAS; says once when they do not.
bool use_openblas() {
  static const bool use = [] {
    const bool fits = openblas_core_fits();
    if (!fits)
      log_warn(
          "OpenBLAS runs '{}' kernels, which do not fit this CPU's level {}; fp32 GEMMs use oneDNN "
          "instead (start the process with OPENBLAS_CORETYPE={} to use OpenBLAS)",
          openblas_get_corename(), cpu_isa(), openblas_core_for_cpu());
    return fits;
  }();
  return use;
}

CBLAS_TRANSPOSE cblas_trans(bool t) {
  return t ? CblasTrans : CblasNoTrans;
}

// C = beta C for the degenerate K = 0 product (beta = 0: C is write-only).
void scale_c(int64_t M, int64_t N, float beta, float* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
}

void gemm_fp32(const Key& k, const float* A, const float* B, float* C) {
  if (!use_openblas()) return OneDnn::get().run(k, A, B, C);
  // OpenBLAS reads C when beta != 0 only, so beta = 0 ignores NaN in C as gemm.h promises
  cblas_sgemm(CblasRowMajor, cblas_trans(k.ta), cblas_trans(k.tb), blasint(k.M), blasint(k.N),
              blasint(k.K), k.alpha, A, blasint(k.lda), B, blasint(k.ldb), k.beta, C,
              blasint(k.ldc));
}

// `rows` rows of `cols` bf16 or fp16 values at stride ld, widened into a grow-only per-thread
// buffer (slot 0 or 1) with stride cols.
template <typename H>
const float* widen(int slot, const H* X, int64_t rows, int64_t cols, int64_t ld) {
  thread_local std::vector<float> bufs[2];
  std::vector<float>& buf = bufs[slot];
  if (buf.size() < size_t(rows * cols)) buf.resize(size_t(rows * cols));
  const Ctx host;
  if (ld == cols) {
    cpu::convert(host, buf.data(), X, rows * cols);
  } else {
    for (int64_t r = 0; r < rows; ++r) cpu::convert(host, buf.data() + r * cols, X + r * ld, cols);
  }
  return buf.data();
}

// The stored shape [rows, cols] of op(X) = X (not transposed: [outer, inner]) or X^T.
void stored(bool t, int64_t outer, int64_t inner, int64_t* rows, int64_t* cols) {
  *rows = t ? inner : outer;
  *cols = t ? outer : inner;
}

bool degenerate(const Key& k, float* C) {
  if (k.M == 0 || k.N == 0) return true;
  if (k.K == 0) return scale_c(k.M, k.N, k.beta, C, k.ldc), true;
  return false;
}

// The 16-bit operands widened to fp32 and multiplied by the fp32 path.
template <typename H>
void gemm_widened(Key k, const H* A, const H* B, float* C) {
  int64_t ar, ac, br, bc;
  stored(k.ta, k.M, k.K, &ar, &ac);
  stored(k.tb, k.K, k.N, &br, &bc);
  const float* a = widen(0, A, ar, ac, k.lda);
  const float* b = widen(1, B, br, bc, k.ldb);
  k.bf16 = false;
  k.lda = ac;
  k.ldb = bc;
  gemm_fp32(k, a, b, C);
}

}  // namespace

bool openblas_core_fits() {
  const int core = core_class(openblas_get_corename()), want = level_class(cpu_isa());
  if (core == 0 || want == 0) return true;
  if (want >= 3) return core == want;
  // below AVX2: SSE kernels under a cap; SSE or AVX kernels (its own choice) on such a CPU
  return cpu_isa() != cpu_isa_best() ? core == 1 : core <= 2;
}

std::string openblas_core_for_cpu() {
  switch (level_class(cpu_isa())) {
    case 4:
      return "SkylakeX";
    case 3:
      return "Haswell";
    case 1:
      return "Nehalem";
    default:
      return openblas_get_corename();
  }
}

std::string cpu_gemm_paths() {
  const dnnl_version_t* v = dnnl_version();
  const std::string onednn =
      str("oneDNN ", v->major, ".", v->minor, ".", v->patch, " (", OneDnn::get().isa(), ")");
  const std::string f32 =
      use_openblas() ? str("OpenBLAS (", openblas_get_corename(), " kernels)") : onednn;
  const std::string b16 = OneDnn::get().has_bf16()
                              ? onednn
                              : str("widened to fp32 and run as fp32 (oneDNN ", v->major, ".",
                                    v->minor, " has no bf16 matmul at ", cpu_isa(), ")");
  return str("fp32 ", f32, ", bf16 ", b16);
}

OneDnnPrimitives cpu_gemm_primitives() {
  return OneDnn::get().primitives();
}

namespace cpu {

void gemm(const Ctx&, MT_PARAMS(gemm_fp32)) {
  const Key k{M, N, K, lda, ldb, ldc, ta == Trans::kT, tb == Trans::kT, false, alpha, beta};
  if (!degenerate(k, C)) gemm_fp32(k, A, B, C);
}

void gemm(const Ctx&, MT_PARAMS(gemm_bf16)) {
  const Key k{M, N, K, lda, ldb, ldc, ta == Trans::kT, tb == Trans::kT, true, alpha, beta};
  if (degenerate(k, C)) return;
  if (OneDnn::get().has_bf16()) return OneDnn::get().run(k, A, B, C);
  gemm_widened(k, A, B, C);
}

void gemm(const Ctx&, MT_PARAMS(gemm_fp16)) {
  const Key k{M, N, K, lda, ldb, ldc, ta == Trans::kT, tb == Trans::kT, false, alpha, beta};
  if (!degenerate(k, C)) gemm_widened(k, A, B, C);
}

// The GEMM, then the bias as bias_add adds it and the residual as add adds it.
template <typename T>
void gemm_then_bias(const Ctx& ctx,
                    Trans ta,
                    Trans tb,
                    int64_t M,
                    int64_t N,
                    int64_t K,
                    const T* A,
                    int64_t lda,
                    const T* B,
                    int64_t ldb,
                    float* C,
                    const float* bias,
                    const float* residual) {
  cpu::gemm(ctx, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
  if (bias) cpu::bias_add(ctx, C, bias, M, N);
  if (residual) cpu::add(ctx, C, C, residual, M * N);
}
void gemm_bias(const Ctx& ctx, MT_PARAMS(gemm_bias_fp32)) {
  gemm_then_bias(ctx, ta, tb, M, N, K, A, lda, B, ldb, C, bias, residual);
}
void gemm_bias(const Ctx& ctx, MT_PARAMS(gemm_bias_bf16)) {
  gemm_then_bias(ctx, ta, tb, M, N, K, A, lda, B, ldb, C, bias, residual);
}
void gemm_bias(const Ctx& ctx, MT_PARAMS(gemm_bias_fp16)) {
  gemm_then_bias(ctx, ta, tb, M, N, K, A, lda, B, ldb, C, bias, residual);
}

// The fp32 GEMM of blocks of up to 2^22 output elements (whole rows) into one buffer, the widened
// bias (bf16 or null) added as bias_add adds it; then f(first row, rows, block).
template <typename F>
void gemm_row_blocks(const Ctx& ctx,
                     Trans ta,
                     Trans tb,
                     int64_t M,
                     int64_t N,
                     int64_t K,
                     const bf16* A,
                     int64_t lda,
                     const bf16* B,
                     int64_t ldb,
                     const bf16* bias,
                     F f) {
  constexpr int64_t kBlockElems = int64_t(1) << 22;
  if (M == 0 || N == 0) return;
  std::vector<float> wide_bias;
  if (bias) {
    wide_bias.resize(size_t(N));
    for (int64_t j = 0; j < N; ++j) wide_bias[size_t(j)] = bf16_to_float(bias[j]);
  }
  const int64_t rows = std::clamp<int64_t>(kBlockElems / N, 1, M);
  std::vector<float> block(size_t(rows * N));
  for (int64_t r0 = 0; r0 < M; r0 += rows) {
    const int64_t m = std::min(rows, M - r0);
    const bf16* a = A + (ta == Trans::kN ? r0 * lda : r0);  // op(A)'s rows r0..
    cpu::gemm(ctx, ta, tb, m, N, K, 1.0f, a, lda, B, ldb, 0.0f, block.data(), N);
    if (bias) cpu::bias_add(ctx, block.data(), wide_bias.data(), m, N);
    f(r0, m, block.data());
  }
}

// Each block rounded into C.
void gemm_bias(const Ctx& ctx, MT_PARAMS(gemm_bias_to_bf16)) {
  gemm_row_blocks(
      ctx, ta, tb, M, N, K, A, lda, B, ldb, bias,
      [&](int64_t r0, int64_t m, const float* v) { cpu::convert(ctx, C + r0 * N, v, m * N); });
}

// Each block rounded into pre, and its GELU rounded into C.
void gemm_gelu(const Ctx& ctx, MT_PARAMS(gemm_gelu)) {
  gemm_row_blocks(ctx, ta, tb, M, N, K, A, lda, B, ldb, bias,
                  [&](int64_t r0, int64_t m, const float* v) {
                    cpu::convert(ctx, pre + r0 * N, v, m * N);
                    cpu::gelu_forward(ctx, C + r0 * N, v, m * N);
                  });
}

// Each block times GELU's derivative at pre (widened, exactly), rounded into C.
void gemm_dgelu(const Ctx& ctx, MT_PARAMS(gemm_dgelu)) {
  std::vector<float> x;
  gemm_row_blocks(ctx, ta, tb, M, N, K, A, lda, B, ldb, nullptr,
                  [&](int64_t r0, int64_t m, const float* dv) {
                    x.resize(size_t(m * N));
                    cpu::convert(ctx, x.data(), pre + r0 * N, m * N);
                    cpu::gelu_backward(ctx, C + r0 * N, x.data(), dv, m * N);
                  });
}

// Exact FP8 values in bf16: the bf16 GEMM computes the FP8 product.
void gemm_fp8(const Ctx& ctx, MT_PARAMS(gemm_fp8)) {
  (void)fa;
  (void)fb;
  cpu::gemm(ctx, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace cpu
}  // namespace mtron::kernels
