// CUDA GEMM through cuBLASLt (kernels/gemm.h): fp32 x fp32, bf16 x bf16, fp16 x fp16 and FP8 x
// FP8 (E4M3 or E5M2 bytes, packed "TN" by gemm_fp8: gemm_layout.h gemm_fp8_packed), all
// accumulating in fp32 (CUBLAS_COMPUTE_32F: no TF32, so fp32 results agree with the CPU to fp32
// rounding; FP8 without fast accumulation) and writing fp32. beta == 1 accumulates into C (weight
// gradients); beta == 0 does not read C. Epilogues: the bias, and GELU with its input written as
// the aux matrix (GELU_AUX, GELU_AUX_BIAS) or GELU's derivative at an aux input (DGELU).
//
// The row-major call becomes a column-major one (gemm_layout.h). Each distinct problem (device,
// dtype, transposes, sizes, leading dimensions, pointer alignments) gets a plan: the matmul
// descriptor, the three layouts and the algorithm cuBLASLt's heuristic picked, made once and
// cached (the most recently used kPlans: core/lru_cache.h), so a dense model's training step
// makes no descriptor or heuristic calls after its first; a mixture of experts' expert GEMMs take
// a new row count per expert and micro-batch, and an unbounded cache grew without end. Alignment
// is part of the key because the heuristic assumes 256-byte aligned operands unless told
// otherwise, and views into flat buffers often are less aligned. One 32 MiB workspace per
// (device, stream), as NVIDIA recommends for Hopper, so GEMMs on different streams never share
// one.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "mtron/core/error.h"
#include "mtron/core/log.h"
#include "mtron/core/lru_cache.h"
#include "mtron/kernels/cuda/cuda_ops.h"
#include "mtron/kernels/cuda/gemm_layout.h"
#include "mtron/kernels/cuda/runtime.h"

namespace mtron::kernels::cuda {
namespace {

[[noreturn]] void cublas_fail(const char* file, int line, const char* what, cublasStatus_t st) {
  detail::throw_internal(
      file, line, what,
      str("failed: ", cublasLtGetStatusName(st), " (", cublasLtGetStatusString(st), ")"));
}

#define MT_CUBLAS_CHECK(call)                                                            \
  do {                                                                                   \
    const cublasStatus_t mt_st_ = (call);                                                \
    if (mt_st_ != CUBLAS_STATUS_SUCCESS) cublas_fail(__FILE__, __LINE__, #call, mt_st_); \
  } while (0)

constexpr size_t kWorkspaceBytes = size_t(32) << 20;
constexpr size_t kPlans = 1024;  // cached GEMM plans

// Largest power of two dividing the address, at most 256 (cuBLASLt's default assumption).
uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

struct PlanKey {
  int device;
  cudaDataType_t type_a, type_b;  // of the column-major operands a and b
  cudaDataType_t type_c;          // of C and D (fp32, or bf16 with a bias of that type)
  bool trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldc;
  uint32_t align_a, align_b, align_c;  // align_c: of C, D and the aux matrix
  cublasLtEpilogue_t epilogue;
  bool operator==(const PlanKey& o) const {
    return std::tie(device, type_a, type_b, type_c, trans_a, trans_b, m, n, k, lda, ldb, ldc,
                    align_a, align_b, align_c, epilogue) ==
           std::tie(o.device, o.type_a, o.type_b, o.type_c, o.trans_a, o.trans_b, o.m, o.n, o.k,
                    o.lda, o.ldb, o.ldc, o.align_a, o.align_b, o.align_c, o.epilogue);
  }
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    size_t h = 1469598103934665603ull;
    auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(uint64_t(k.device));
    mix(uint64_t(k.type_a) << 32 | uint64_t(k.type_b) << 16 | uint64_t(k.type_c));
    mix(uint64_t(k.trans_a) * 2 + uint64_t(k.trans_b));
    mix(uint64_t(k.epilogue));
    for (int64_t v : {k.m, k.n, k.k, k.lda, k.ldb, k.ldc}) mix(uint64_t(v));
    mix(uint64_t(k.align_a) << 32 | uint64_t(k.align_b) << 16 | k.align_c);
    return h;
  }
};

PlanKey make_key(int device,
                 cudaDataType_t type_a,
                 cudaDataType_t type_b,
                 cudaDataType_t type_c,
                 const ColMajorGemm& g,
                 const void* C,
                 const void* Cin,
                 cublasLtEpilogue_t epilogue) {
  PlanKey key;
  key.device = device;
  key.type_a = type_a;
  key.type_b = type_b;
  key.type_c = type_c;
  key.trans_a = g.trans_a;
  key.trans_b = g.trans_b;
  key.m = g.m;
  key.n = g.n;
  key.k = g.k;
  key.lda = g.lda;
  key.ldb = g.ldb;
  key.ldc = g.ldc;
  key.align_a = alignment(g.a);
  key.align_b = alignment(g.b);
  key.align_c = std::min({alignment(C), alignment(Cin ? Cin : C), alignment(g.aux ? g.aux : C)});
  key.epilogue = epilogue;
  return key;
}

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool usable = true;  // false: cuBLASLt has no algorithm for this epilogue
  ~Plan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

std::unique_ptr<Plan> make_plan(cublasLtHandle_t handle,
                                const PlanKey& key,
                                const ColMajorGemm& g) {
  auto p = std::make_unique<Plan>();
  MT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  MT_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  MT_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  if (key.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {  // a bias of the output type; the pointers
    MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                   &key.epilogue, sizeof key.epilogue));
  }
  if (g.aux) {  // the aux matrix has D's layout; the heuristic reads its pointer's alignment
    MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                   &g.ldc, sizeof g.ldc));
    MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux, sizeof g.aux));
  }
  MT_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&p->a, key.type_a, uint64_t(g.a_rows), uint64_t(g.a_cols), g.lda));
  MT_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&p->b, key.type_b, uint64_t(g.b_rows), uint64_t(g.b_cols), g.ldb));
  MT_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&p->c, key.type_c, uint64_t(g.c_rows), uint64_t(g.c_cols), g.ldc));

  cublasLtMatmulPreference_t pref = nullptr;
  MT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kWorkspaceBytes;
  const uint32_t al[4] = {key.align_a, key.align_b, key.align_c, key.align_c};
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  const cublasLtMatmulPreferenceAttributes_t al_attr[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; ++i)
    st = cublasLtMatmulPreferenceSetAttribute(pref, al_attr[i], &al[i], sizeof al[i]);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(handle, p->desc, p->a, p->b, p->c, p->c, pref, 1, &result,
                                        &found);
  cublasLtMatmulPreferenceDestroy(pref);
  const bool fp8 = key.type_a == CUDA_R_8F_E4M3 || key.type_a == CUDA_R_8F_E5M2;
  const bool fused = key.epilogue != CUBLASLT_EPILOGUE_DEFAULT;
  if ((fused || fp8) && (st != CUBLAS_STATUS_SUCCESS || found == 0)) {  // the caller falls back
    if (fp8) {
      static std::once_flag once;
      std::call_once(once, [&] {
        log_warn(
            "cuBLASLt has no FP8 GEMM for m={} n={} k={} ({}; its FP8 kernels need 16-byte "
            "aligned dimensions): such FP8 GEMMs run as bf16 GEMMs of the same FP8 values (the "
            "same products, at bf16 speed)",
            g.m, g.n, g.k,
            st == CUBLAS_STATUS_SUCCESS ? "no algorithm" : cublasLtGetStatusName(st));
      });
    }
    p->usable = false;
    return p;
  }
  MT_CUBLAS_CHECK(st);
  MT_ASSERT(found > 0, "cuBLASLt has no algorithm for the GEMM m=", g.m, " n=", g.n, " k=", g.k,
            " lda=", g.lda, " ldb=", g.ldb, " ldc=", g.ldc, " alignments ", key.align_a, "/",
            key.align_b, "/", key.align_c, " bytes");
  p->algo = result.algo;
  return p;
}

// cuBLASLt handles, workspaces and plans of the process. Deliberately never destroyed: at exit
// the CUDA runtime may already be unloaded, and freeing into it fails.
class Library {
 public:
  static Library& get() {
    static Library* lib = new Library;
    return *lib;
  }

  // The plan for `key` and the handle and workspace to run it with on `stream`.
  struct Ready {
    cublasLtHandle_t handle;
    std::shared_ptr<const Plan> plan;
    void* workspace;
  };
  Ready prepare(const PlanKey& key, const ColMajorGemm& g, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mu_);
    Device& dev = devices_[key.device];
    if (!dev.handle) MT_CUBLAS_CHECK(cublasLtCreate(&dev.handle));
    void*& ws = dev.workspaces[stream];
    if (!ws) MT_CUDA_CHECK(cudaMalloc(&ws, kWorkspaceBytes));
    return {dev.handle, plans_.get(key, [&] { return make_plan(dev.handle, key, g); }), ws};
  }

 private:
  struct Device {
    cublasLtHandle_t handle = nullptr;
    std::unordered_map<cudaStream_t, void*> workspaces;
  };
  std::mutex mu_;
  std::unordered_map<int, Device> devices_;
  LruCache<PlanKey, const Plan, PlanKeyHash> plans_{kPlans};
};

// A of type_A and B of type_B, as the row-major call has them, C of type_C (fp32 or bf16, and
// the bias of that type); beta scales Cin (C itself where null, else a matrix of C's layout).
// With an epilogue, false (nothing run) where cuBLASLt has no algorithm for it. `aux`: the GELU
// epilogues' matrix of C's layout and type (written by GELU_AUX*, read by DGELU).
bool run(const Ctx& ctx,
         cudaDataType_t type_A,
         cudaDataType_t type_B,
         cudaDataType_t type_C,
         Trans ta,
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
         void* C,
         int64_t ldc,
         const void* bias = nullptr,
         const float* Cin = nullptr,
         cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT,
         const void* aux = nullptr) {
  if (M == 0 || N == 0) return true;
  if (bias && epilogue == CUBLASLT_EPILOGUE_DEFAULT) epilogue = CUBLASLT_EPILOGUE_BIAS;
  const cudaStream_t stream = stream_of(ctx);
  if (K == 0) {  // op(A) op(B) is empty: C = beta Cin
    MT_ASSERT(epilogue == CUBLASLT_EPILOGUE_DEFAULT && type_C == CUDA_R_32F,
              "gemm: K = 0 with an epilogue or a bf16 output");
    if (Cin)
      MT_CUDA_CHECK(cudaMemcpy2DAsync(C, sizeof(float) * size_t(ldc), Cin,
                                      sizeof(float) * size_t(ldc), sizeof(float) * size_t(N),
                                      size_t(M), cudaMemcpyDeviceToDevice, stream));
    scale_matrix(stream, static_cast<float*>(C), M, N, ldc, beta);
    return true;
  }
  ColMajorGemm g = to_col_major(ta, tb, M, N, K, A, lda, B, ldb, ldc);
  g.bias = bias;
  g.aux = aux;
  int device = 0;
  MT_CUDA_CHECK(cudaGetDevice(&device));
  const PlanKey key =
      make_key(device, type_B, type_A, type_C, g, C, Cin, epilogue);  // column-major a is B
  const Library::Ready r = Library::get().prepare(key, g, stream);
  if (!r.plan->usable) return false;
  ++work().gemms;
  // The plan's descriptor is shared by the calls of its key, which come from the one thread
  // that runs the process's ops: the bias and aux pointers are set before each.
  if (bias)
    MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(r.plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                   &bias, sizeof bias));
  if (aux)
    MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        r.plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
  MT_CUBLAS_CHECK(cublasLtMatmul(r.handle, r.plan->desc, &alpha, g.a, r.plan->a, g.b, r.plan->b,
                                 &beta, Cin ? Cin : C, r.plan->c, C, r.plan->c, &r.plan->algo,
                                 r.workspace, kWorkspaceBytes, stream));
  check_launch("cublasLtMatmul", stream);  // with MTRON_CUDA_SYNC=1 it waits, as kernels do
  return true;
}

cudaDataType_t fp8_type(Fp8Format f) {
  return f == Fp8Format::kE4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
}

}  // namespace

void gemm(const Ctx& ctx, MT_PARAMS(gemm_fp32)) {
  run(ctx, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C,
      ldc);
}

void gemm(const Ctx& ctx, MT_PARAMS(gemm_bf16)) {
  run(ctx, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C,
      ldc);
}

void gemm(const Ctx& ctx, MT_PARAMS(gemm_fp16)) {
  run(ctx, CUDA_R_16F, CUDA_R_16F, CUDA_R_32F, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C,
      ldc);
}

// One GEMM, the residual its C operand, with the bias epilogue where the bias is 16-byte aligned
// (cuBLASLt's vector loads) and cuBLASLt has an algorithm for it, else the GEMM and bias_add.
template <typename T>
void gemm_with_bias(const Ctx& ctx,
                    cudaDataType_t type,
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
  const float beta = residual ? 1.0f : 0.0f;
  if (K > 0 && reinterpret_cast<uintptr_t>(bias) % 16 == 0 &&
      run(ctx, type, type, CUDA_R_32F, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, N, bias,
          residual))
    return;
  run(ctx, type, type, CUDA_R_32F, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, N, nullptr,
      residual);
  if (bias) cuda::bias_add(ctx, C, bias, M, N);
}

void gemm_bias(const Ctx& ctx, MT_PARAMS(gemm_bias_fp32)) {
  gemm_with_bias(ctx, CUDA_R_32F, ta, tb, M, N, K, A, lda, B, ldb, C, bias, residual);
}
void gemm_bias(const Ctx& ctx, MT_PARAMS(gemm_bias_bf16)) {
  gemm_with_bias(ctx, CUDA_R_16BF, ta, tb, M, N, K, A, lda, B, ldb, C, bias, residual);
}
void gemm_bias(const Ctx& ctx, MT_PARAMS(gemm_bias_fp16)) {
  gemm_with_bias(ctx, CUDA_R_16F, ta, tb, M, N, K, A, lda, B, ldb, C, bias, residual);
}

// The fallback of the bf16-output GEMMs: v[M, N] = op(A) op(B) in fp32, the widened bf16 bias (or
// none) added as bias_add adds it.
void fp32_product(const Ctx& ctx,
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
                  float* v) {
  run(ctx, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, v, N);
  if (bias) {
    Scratch b(sizeof(float) * size_t(N), stream_of(ctx));
    cuda::convert(ctx, b.as<float>(), bias, N);
    cuda::bias_add(ctx, v, b.as<float>(), M, N);
  }
}

// One GEMM writing bf16 with the bias epilogue (a bf16 bias, 16-byte aligned); else (K = 0, an
// unaligned bias, no algorithm) fp32_product, then convert: the same values, rounded once.
void gemm_bias(const Ctx& ctx, MT_PARAMS(gemm_bias_to_bf16)) {
  if (M == 0 || N == 0) return;
  if (K > 0 && reinterpret_cast<uintptr_t>(bias) % 16 == 0 &&
      run(ctx, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f,
          C, N, bias))
    return;
  const Scratch v(sizeof(float) * size_t(M * N), stream_of(ctx));
  fp32_product(ctx, ta, tb, M, N, K, A, lda, B, ldb, bias, v.as<float>());
  cuda::convert(ctx, C, v.as<float>(), M * N);
}

// The GELU epilogues need a 16-byte aligned bias and an aux leading dimension that is a multiple
// of 8; where they cannot run, fp32_product, then the activation kernels, as on the CPU.
bool gelu_epilogue_fits(int64_t N, int64_t K, const void* bias) {
  return K > 0 && N % 8 == 0 && reinterpret_cast<uintptr_t>(bias) % 16 == 0;
}

void gemm_gelu(const Ctx& ctx, MT_PARAMS(gemm_gelu)) {
  if (M == 0 || N == 0) return;
  const cublasLtEpilogue_t epi =
      bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  if (gelu_epilogue_fits(N, K, bias) &&
      run(ctx, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f,
          C, N, bias, nullptr, epi, pre))
    return;
  const Scratch v(sizeof(float) * size_t(M * N), stream_of(ctx));
  fp32_product(ctx, ta, tb, M, N, K, A, lda, B, ldb, bias, v.as<float>());
  cuda::convert(ctx, pre, v.as<float>(), M * N);
  cuda::gelu_forward(ctx, C, v.as<float>(), M * N);
}

void gemm_dgelu(const Ctx& ctx, MT_PARAMS(gemm_dgelu)) {
  if (M == 0 || N == 0) return;
  if (gelu_epilogue_fits(N, K, nullptr) &&
      run(ctx, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f,
          C, N, nullptr, nullptr, CUBLASLT_EPILOGUE_DGELU, pre))
    return;
  const Scratch dv(sizeof(float) * size_t(M * N), stream_of(ctx));
  const Scratch x(sizeof(float) * size_t(M * N), stream_of(ctx));
  fp32_product(ctx, ta, tb, M, N, K, A, lda, B, ldb, nullptr, dv.as<float>());
  cuda::convert(ctx, x.as<float>(), pre, M * N);
  cuda::gelu_backward(ctx, C, x.as<float>(), dv.as<float>(), M * N);
}

bool gemm_fp8_packed(const Ctx& ctx,
                     int64_t M,
                     int64_t N,
                     int64_t K,
                     float alpha,
                     const uint8_t* a,
                     Fp8Format fa,
                     const uint8_t* b,
                     Fp8Format fb,
                     float beta,
                     float* C,
                     int64_t ldc) {
  return run(ctx, fp8_type(fa), fp8_type(fb), CUDA_R_32F, Trans::kN, Trans::kT, M, N, K, alpha, a,
             K, b, K, beta, C, ldc);
}

}  // namespace mtron::kernels::cuda
