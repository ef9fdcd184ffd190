// CPU GEMM through oneDNN matmul primitives (bf16 runs on the AMX units).
//
// Creating a oneDNN primitive costs tens to hundreds of microseconds, so primitives are cached
// per (shape, strides, transposes, dtype, alpha, beta) for the life of the process. A training
// step uses a few dozen distinct shapes; the cache never needs evicting.
#include <dnnl.hpp>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "mtron/core/error.h"
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

// The process-wide oneDNN engine, stream and primitive cache.
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
    e.prim.execute(stream_, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    stream_.wait();
  }

 private:
  Gemm() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

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
  dnnl::stream stream_;
  std::mutex mu_;
  std::unordered_map<Key, std::unique_ptr<Entry>, KeyHash> cache_;
};

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
  Gemm::get().run(k, A, B, C);
}

}  // namespace

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
