// The public kernel entry points (kernels/*.h), generated from the op lists (kernels/op.h): the
// op's contract (argument checks common to every backend, FLOPs for the profile), then a switch
// on ctx.device to the CPU (cpu/) or CUDA (cuda/) implementation. Also the device functions of
// kernels/device.h.
#include <algorithm>
#include <limits>
#include <tuple>

#include "mtron/core/error.h"
#include "mtron/core/memory.h"
#include "mtron/core/profile.h"
#include "mtron/kernels/cpu/cpu_ops.h"
#include "mtron/kernels/cuda/cuda_ops.h"
#include "mtron/kernels/device.h"
#include "mtron/kernels/ops.h"

namespace mtron::kernels {
namespace {

// ---- contracts: check the arguments, return the FLOPs ---------------------------------------

template <typename... A>
double no_contract(const A&...) {
  return 0;
}

double bytes_contract(const void*, int64_t bytes) {
  MT_ASSERT(bytes >= 0, "a negative byte count: ", bytes);
  return 0;
}
double bytes_contract(const void*, const void*, int64_t bytes) {
  return bytes_contract(nullptr, bytes);
}

double copy_rows_contract(const void*,
                          int64_t dst_pitch,
                          const void*,
                          int64_t src_pitch,
                          int64_t row_bytes,
                          int64_t rows) {
  MT_ASSERT(rows >= 0 && row_bytes >= 0 && dst_pitch >= row_bytes && src_pitch >= row_bytes,
            "copy_rows: ", rows, " rows of ", row_bytes, " bytes, pitches ", dst_pitch, " and ",
            src_pitch);
  return 0;
}

double dropout_contract(const float*, const int32_t*, int64_t rows, const DropoutRows& d) {
  MT_ASSERT(rows >= 0 && d.width >= 0 && d.B >= 1 && d.p >= 0 && d.p < 1, "dropout: rows ", rows,
            " width ", d.width, " B ", d.B, " p ", d.p);
  return 0;
}

template <typename T>
double gemm_contract(Trans ta,
                     Trans tb,
                     int64_t M,
                     int64_t N,
                     int64_t K,
                     float,
                     const T*,
                     int64_t lda,
                     const T*,
                     int64_t ldb,
                     float,
                     const float*,
                     int64_t ldc) {
  MT_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M=", M, " N=", N, " K=", K);
  MT_CHECK(lda >= std::max<int64_t>(1, ta == Trans::kN ? K : M), "gemm: lda=", lda, " too small");
  MT_CHECK(ldb >= std::max<int64_t>(1, tb == Trans::kN ? N : K), "gemm: ldb=", ldb, " too small");
  MT_CHECK(ldc >= std::max<int64_t>(1, N), "gemm: ldc=", ldc, " too small for N=", N);
  return 2.0 * double(M) * double(N) * double(K);
}

double gemm_fp8_contract(Trans ta,
                         Trans tb,
                         int64_t M,
                         int64_t N,
                         int64_t K,
                         float alpha,
                         const bf16* A,
                         Fp8Format fa,
                         int64_t lda,
                         const bf16* B,
                         Fp8Format fb,
                         int64_t ldb,
                         float beta,
                         const float* C,
                         int64_t ldc) {
  MT_CHECK(fa == Fp8Format::kE4M3 || fb == Fp8Format::kE4M3,
           "gemm_fp8: E5M2 x E5M2 has no FP8 GEMM (one operand must be E4M3)");
  return gemm_contract(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

double moe_route_contract(const int32_t*, const float*, const float*, const MoeRouting& r) {
  MT_CHECK(r.T >= 0 && r.k >= 1 && r.k <= r.E, "moe_route: need T >= 0 and 1 <= k <= E (T=", r.T,
           " k=", r.k, " E=", r.E, ")");
  return 0;
}

// Multiply-adds of QK^T (D) and PV (Dv), 2 FLOPs each, halved for the causal mask as Megatron
// counts.
double attention_flops(const AttnShape& s, AttnMask mask) {
  MT_CHECK(s.B >= 0 && s.Sq >= 0 && s.Sk >= 0 && s.D > 0 && s.Dv > 0 && s.G > 0 && s.H > 0 &&
               s.H % s.G == 0,
           "attention: bad shape B=", s.B, " Sq=", s.Sq, " Sk=", s.Sk, " H=", s.H, " G=", s.G,
           " D=", s.D, " Dv=", s.Dv, " (need H % G == 0)");
  const double f =
      2.0 * double(s.B) * double(s.H) * double(s.Sq) * double(s.Sk) * double(s.D + s.Dv);
  return mask.causal ? f / 2 : f;
}
// `passes` times the FLOPs of an attention op, whose last two arguments are its shape and mask.
template <typename... A>
double attention_contract(double passes, const std::tuple<const A&...>& args) {
  constexpr size_t n = sizeof...(A);
  return passes * attention_flops(std::get<n - 2>(args), std::get<n - 1>(args));
}
template <typename... A>
double attention_forward_contract(const A&... args) {
  return attention_contract(1.0, std::tie(args...));
}
template <typename... A>
double attention_backward_contract(const A&... args) {
  return attention_contract(2.0, std::tie(args...));
}
// Per query row: two multiply-adds per output element.
double attention_merge_contract(
    const float*, const float*, const float*, const float*, const AttnShape& s) {
  MT_CHECK(s.B >= 0 && s.Sq >= 0 && s.H >= 0 && s.Dv >= 0, "attention_merge: bad shape B=", s.B,
           " Sq=", s.Sq, " H=", s.H, " Dv=", s.Dv);
  return 4.0 * double(s.B) * double(s.H) * double(s.Sq) * double(s.Dv);
}

double rope_contract(
    const float*, const int32_t*, int64_t, int64_t, int64_t D, int64_t rot_dim, RopeFreq f) {
  MT_CHECK(rot_dim > 0 && rot_dim % 2 == 0 && rot_dim <= D, "rope: rot_dim=", rot_dim,
           " must be even and in (0, head dim ", D, "]");
  MT_CHECK(f.base > 0 && f.yarn_factor > 0, "rope: base ", f.base, " and YaRN factor ",
           f.yarn_factor, " must be positive");
  return 0;
}

}  // namespace

// ---- the ops --------------------------------------------------------------------------------

#define MT_DEFINE_DISPATCH(ret, name, id, contract, params, args) \
  ret name(const Ctx& ctx, MT_UNPACK params) {                    \
    MT_PROFILE(#id, contract args);                               \
    switch (ctx.device) {                                         \
      case Device::kCPU:                                          \
        return cpu::name(ctx, MT_UNPACK args);                    \
      case Device::kCUDA:                                         \
        return cuda::name(ctx, MT_UNPACK args);                   \
    }                                                             \
    MT_ASSERT(false, "unknown device ", int(ctx.device));         \
  }
MTRON_KERNEL_OPS(MT_DEFINE_DISPATCH)
#undef MT_DEFINE_DISPATCH

// device.h

namespace {

// cpu() on the CPU, cuda() on CUDA.
template <typename Cpu, typename Cuda>
auto by_device(Device d, Cpu cpu, Cuda cuda) {
  switch (d) {
    case Device::kCPU:
      return cpu();
    case Device::kCUDA:
      return cuda();
  }
  MT_ASSERT(false, "unknown device ", int(d));
}

}  // namespace

int device_count(Device d) {
  return by_device(
      d, [] { return 1; }, [] { return cuda::device_count(); });
}

std::string device_unavailable(Device d) {
  return by_device(
      d, [] { return std::string(); }, [] { return cuda::device_unavailable(); });
}

int64_t attention_max_head_dim(Device d) {
  return by_device(
      d, [] { return std::numeric_limits<int64_t>::max(); },
      [] { return cuda::attention_max_head_dim(); });
}

int64_t chunk_elems(Device d) {
  return by_device(
      d, [] { return int64_t(1) << 22; },  // 16 MB of fp32: cache-sized GEMM outputs
      [] { return int64_t(1) << 26; });    // 256 MB: large GEMMs, few host synchronisations
}

void init_device(Device d, int ordinal) {
  by_device(
      d, [&] { MT_CHECK(ordinal == 0, "there is one CPU device (0), not ", ordinal); },
      [&] { cuda::init_device(ordinal); });
}

DeviceProperties device_properties(Device d) {
  return by_device(
      d, [] { return DeviceProperties{.name = "cpu"}; }, [] { return cuda::device_properties(); });
}

DeviceMemory device_memory(Device d) {
  return by_device(
      d,
      [&] {
        // No caching on the CPU: what is allocated is what is reserved.
        const MemoryStats m = memory_stats(d);
        return DeviceMemory{m.allocated, m.max_allocated, m.allocated, m.max_allocated};
      },
      [] { return cuda::device_memory(); });
}

void reset_peak_memory(Device d) {
  by_device(
      d, [&] { memory_reset_peak(d); }, [] { cuda::reset_peak_memory(); });
}

void* default_stream(Device d) {
  return by_device(
      d, []() -> void* { return nullptr; }, [] { return cuda::default_stream(); });
}

void* create_stream(Device d) {
  return by_device(
      d, []() -> void* { return nullptr; }, [] { return cuda::create_stream(); });
}

void destroy_stream(Device d, void* stream) {
  by_device(
      d, [] {}, [&] { cuda::destroy_stream(stream); });
}

void synchronize(const Ctx& ctx) {
  by_device(
      ctx.device, [] {}, [&] { cuda::synchronize(ctx); });
}

DeviceWork device_work(Device d) {
  return by_device(
      d, [] { return DeviceWork{}; }, [] { return cuda::device_work(); });
}

namespace {

// A copy between host and device memory (`what`: its name in the profile and the error).
template <typename CudaCopy>
void host_device_copy(const char* what,
                      const Ctx& ctx,
                      void* dst,
                      const void* src,
                      int64_t bytes,
                      CudaCopy cuda_copy) {
  MT_PROFILE(what);
  MT_ASSERT(bytes >= 0, what, " of ", bytes, " bytes");
  by_device(
      ctx.device, [&] { cpu::copy(ctx, dst, src, bytes); },
      [&] { cuda_copy(ctx, dst, src, bytes); });
}

}  // namespace

void copy_to_host(const Ctx& ctx, void* host_dst, const void* src, int64_t bytes) {
  host_device_copy("copy_to_host", ctx, host_dst, src, bytes, cuda::copy_to_host);
}

void copy_from_host(const Ctx& ctx, void* dst, const void* host_src, int64_t bytes) {
  host_device_copy("copy_from_host", ctx, dst, host_src, bytes, cuda::copy_from_host);
}

void copy_from_host_async(const Ctx& ctx, void* dst, const void* host_src, int64_t bytes) {
  host_device_copy("copy_from_host_async", ctx, dst, host_src, bytes, cuda::copy_from_host_async);
}

}  // namespace mtron::kernels
