// The public kernel entry points (kernels/*.h), generated from the op lists (kernels/op.h): the
// op's contract (argument checks common to every backend, FLOPs for the profile), then a switch
// on ctx.device to the CPU (cpu/) or CUDA (cuda/) implementation. Also the device functions of
// kernels/device.h.
#include <algorithm>

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

double moe_route_contract(const int32_t*, const float*, const float*, const MoeRouting& r) {
  MT_CHECK(r.T >= 0 && r.k >= 1 && r.k <= r.E, "moe_route: need T >= 0 and 1 <= k <= E (T=", r.T,
           " k=", r.k, " E=", r.E, ")");
  return 0;
}

// Multiply-adds of QK^T and PV (2 FLOPs each), halved for the causal mask as Megatron counts.
double attention_flops(const AttnShape& s, AttnMask mask) {
  MT_CHECK(s.B >= 0 && s.Sq >= 0 && s.Sk >= 0 && s.D > 0 && s.G > 0 && s.H > 0 && s.H % s.G == 0,
           "attention: bad shape B=", s.B, " Sq=", s.Sq, " Sk=", s.Sk, " H=", s.H, " G=", s.G,
           " D=", s.D, " (need H % G == 0)");
  const double f = 4.0 * double(s.B) * double(s.H) * double(s.Sq) * double(s.Sk) * double(s.D);
  return mask.causal ? f / 2 : f;
}
double attention_forward_contract(const float*,
                                  const float*,
                                  const float*,
                                  const float*,
                                  const float*,
                                  const AttnShape& s,
                                  AttnMask mask) {
  return attention_flops(s, mask);
}
double attention_backward_contract(const float*,
                                   const float*,
                                   const float*,
                                   const float*,
                                   const float*,
                                   const float*,
                                   const float*,
                                   const float*,
                                   const float*,
                                   const AttnShape& s,
                                   AttnMask mask) {
  return 2.0 * attention_flops(s, mask);
}

double rope_contract(
    const float*, const int32_t*, int64_t, int64_t, int64_t D, int64_t rot_dim, float) {
  MT_CHECK(rot_dim > 0 && rot_dim % 2 == 0 && rot_dim <= D, "rope: rot_dim=", rot_dim,
           " must be even and in (0, head dim ", D, "]");
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

int device_count(Device d) {
  switch (d) {
    case Device::kCPU:
      return 1;
    case Device::kCUDA:
      return cuda::device_count();
  }
  MT_ASSERT(false, "unknown device ", int(d));
}

std::string device_unavailable(Device d) {
  switch (d) {
    case Device::kCPU:
      return "";
    case Device::kCUDA:
      return cuda::device_unavailable();
  }
  MT_ASSERT(false, "unknown device ", int(d));
}

int64_t chunk_elems(Device d) {
  switch (d) {
    case Device::kCPU:
      return int64_t(1) << 22;  // 16 MB of fp32: cache-sized GEMM outputs
    case Device::kCUDA:
      return int64_t(1) << 26;  // 256 MB: large GEMMs, few host synchronisations
  }
  MT_ASSERT(false, "unknown device ", int(d));
}

void init_device(Device d, int ordinal) {
  switch (d) {
    case Device::kCPU:
      MT_CHECK(ordinal == 0, "there is one CPU device (0), not ", ordinal);
      return;
    case Device::kCUDA:
      return cuda::init_device(ordinal);
  }
  MT_ASSERT(false, "unknown device ", int(d));
}

DeviceProperties device_properties(Device d) {
  switch (d) {
    case Device::kCPU:
      return DeviceProperties{.name = "cpu"};
    case Device::kCUDA:
      return cuda::device_properties();
  }
  MT_ASSERT(false, "unknown device ", int(d));
}

DeviceMemory device_memory(Device d) {
  switch (d) {
    case Device::kCPU: {
      // No caching on the CPU: what is allocated is what is reserved.
      const MemoryStats m = memory_stats(d);
      return {m.allocated, m.max_allocated, m.allocated, m.max_allocated};
    }
    case Device::kCUDA:
      return cuda::device_memory();
  }
  MT_ASSERT(false, "unknown device ", int(d));
}

void reset_peak_memory(Device d) {
  switch (d) {
    case Device::kCPU:
      return memory_reset_peak(d);
    case Device::kCUDA:
      return cuda::reset_peak_memory();
  }
  MT_ASSERT(false, "unknown device ", int(d));
}

void* create_stream(Device d) {
  switch (d) {
    case Device::kCPU:
      return nullptr;
    case Device::kCUDA:
      return cuda::create_stream();
  }
  MT_ASSERT(false, "unknown device ", int(d));
}

void destroy_stream(Device d, void* stream) {
  switch (d) {
    case Device::kCPU:
      return;
    case Device::kCUDA:
      return cuda::destroy_stream(stream);
  }
  MT_ASSERT(false, "unknown device ", int(d));
}

void synchronize(const Ctx& ctx) {
  switch (ctx.device) {
    case Device::kCPU:
      return;
    case Device::kCUDA:
      return cuda::synchronize(ctx);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void copy_to_host(const Ctx& ctx, void* host_dst, const void* src, int64_t bytes) {
  MT_PROFILE("copy_to_host");
  MT_ASSERT(bytes >= 0, "copy_to_host of ", bytes, " bytes");
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::copy(ctx, host_dst, src, bytes);
    case Device::kCUDA:
      return cuda::copy_to_host(ctx, host_dst, src, bytes);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void copy_from_host(const Ctx& ctx, void* dst, const void* host_src, int64_t bytes) {
  MT_PROFILE("copy_from_host");
  MT_ASSERT(bytes >= 0, "copy_from_host of ", bytes, " bytes");
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::copy(ctx, dst, host_src, bytes);
    case Device::kCUDA:
      return cuda::copy_from_host(ctx, dst, host_src, bytes);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

}  // namespace mtron::kernels
