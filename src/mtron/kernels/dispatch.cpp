// The public kernel entry points (kernels/*.h): argument checks common to every backend, then
// a switch on ctx.device to the CPU (cpu/) or CUDA (cuda/) implementation.
#include "mtron/core/error.h"
#include "mtron/core/memory.h"
#include "mtron/core/profile.h"
#include "mtron/kernels/activation.h"
#include "mtron/kernels/adamw.h"
#include "mtron/kernels/attention.h"
#include "mtron/kernels/cpu/cpu_ops.h"
#include "mtron/kernels/cuda/cuda_ops.h"
#include "mtron/kernels/device.h"
#include "mtron/kernels/elementwise.h"
#include "mtron/kernels/embedding.h"
#include "mtron/kernels/gemm.h"
#include "mtron/kernels/norm.h"
#include "mtron/kernels/rope.h"
#include "mtron/kernels/xent.h"

namespace mtron::kernels {
namespace {

void check_gemm(
    Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc) {
  MT_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M=", M, " N=", N, " K=", K);
  MT_CHECK(lda >= std::max<int64_t>(1, ta == Trans::kN ? K : M), "gemm: lda=", lda, " too small");
  MT_CHECK(ldb >= std::max<int64_t>(1, tb == Trans::kN ? N : K), "gemm: ldb=", ldb, " too small");
  MT_CHECK(ldc >= std::max<int64_t>(1, N), "gemm: ldc=", ldc, " too small for N=", N);
}

void check_attention(const AttnShape& s) {
  MT_CHECK(s.B >= 0 && s.Sq >= 0 && s.Sk >= 0 && s.D > 0 && s.G > 0 && s.H > 0 && s.H % s.G == 0,
           "attention: bad shape B=", s.B, " Sq=", s.Sq, " Sk=", s.Sk, " H=", s.H, " G=", s.G,
           " D=", s.D, " (need H % G == 0)");
}

// Multiply-adds of QK^T and PV (2 FLOPs each), halved for the causal mask as Megatron counts.
double attention_flops(const AttnShape& s, AttnMask mask) {
  const double f = 4.0 * double(s.B) * double(s.H) * double(s.Sq) * double(s.Sk) * double(s.D);
  return mask.causal ? f / 2 : f;
}

void check_rope(int64_t D, int64_t rot_dim) {
  MT_CHECK(rot_dim > 0 && rot_dim % 2 == 0 && rot_dim <= D, "rope: rot_dim=", rot_dim,
           " must be even and in (0, head dim ", D, "]");
}

}  // namespace

std::string gemm_library_info() {
  return cpu::gemm_library_info();
}

void gemm(const Ctx& ctx,
          Trans ta,
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
  MT_PROFILE("gemm.fp32", 2.0 * double(M) * double(N) * double(K));
  check_gemm(ta, tb, M, N, K, lda, ldb, ldc);
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    case Device::kCUDA:
      return cuda::gemm(ctx, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void gemm(const Ctx& ctx,
          Trans ta,
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
  MT_PROFILE("gemm.bf16", 2.0 * double(M) * double(N) * double(K));
  check_gemm(ta, tb, M, N, K, lda, ldb, ldc);
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    case Device::kCUDA:
      return cuda::gemm(ctx, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void add(const Ctx& ctx, float* out, const float* a, const float* b, int64_t n) {
  MT_PROFILE("add");
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::add(out, a, b, n);
    case Device::kCUDA:
      return cuda::add(ctx, out, a, b, n);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void scale_inplace(const Ctx& ctx, float* x, float s, int64_t n) {
  MT_PROFILE("scale_inplace");
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::scale_inplace(x, s, n);
    case Device::kCUDA:
      return cuda::scale_inplace(ctx, x, s, n);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void convert(const Ctx& ctx, bf16* dst, const float* src, int64_t n) {
  MT_PROFILE("convert.to_bf16");
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::convert(dst, src, n);
    case Device::kCUDA:
      return cuda::convert(ctx, dst, src, n);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void convert(const Ctx& ctx, float* dst, const bf16* src, int64_t n) {
  MT_PROFILE("convert.to_fp32");
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::convert(dst, src, n);
    case Device::kCUDA:
      return cuda::convert(ctx, dst, src, n);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void bias_add(const Ctx& ctx, float* out, const float* bias, int64_t N, int64_t C) {
  MT_PROFILE("bias_add");
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::bias_add(out, bias, N, C);
    case Device::kCUDA:
      return cuda::bias_add(ctx, out, bias, N, C);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void bias_backward(const Ctx& ctx, float* dbias, const float* dout, int64_t N, int64_t C) {
  MT_PROFILE("bias_backward");
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::bias_backward(dbias, dout, N, C);
    case Device::kCUDA:
      return cuda::bias_backward(ctx, dbias, dout, N, C);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

double sum_squares(const Ctx& ctx, const float* x, int64_t n) {
  MT_PROFILE("sum_squares");
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::sum_squares(x, n);
    case Device::kCUDA:
      return cuda::sum_squares(ctx, x, n);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void fill_zero(const Ctx& ctx, void* x, int64_t bytes) {
  MT_PROFILE("fill_zero");
  MT_ASSERT(bytes >= 0, "fill_zero of ", bytes, " bytes");
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::fill_zero(x, bytes);
    case Device::kCUDA:
      return cuda::fill_zero(ctx, x, bytes);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void fill(const Ctx& ctx, float* x, float value, int64_t n) {
  MT_PROFILE("fill");
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::fill(x, value, n);
    case Device::kCUDA:
      return cuda::fill(ctx, x, value, n);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void copy(const Ctx& ctx, void* dst, const void* src, int64_t bytes) {
  MT_PROFILE("copy");
  MT_ASSERT(bytes >= 0, "copy of ", bytes, " bytes");
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::copy(dst, src, bytes);
    case Device::kCUDA:
      return cuda::copy(ctx, dst, src, bytes);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void embedding_forward(const Ctx& ctx,
                       float* out,
                       const int32_t* ids,
                       const float* table,
                       int64_t N,
                       int64_t C,
                       int64_t row_start,
                       int64_t rows,
                       bool accumulate) {
  MT_PROFILE("embedding_forward");
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::embedding_forward(out, ids, table, N, C, row_start, rows, accumulate);
    case Device::kCUDA:
      return cuda::embedding_forward(ctx, out, ids, table, N, C, row_start, rows, accumulate);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void embedding_backward(const Ctx& ctx,
                        float* dtable,
                        const float* dout,
                        const int32_t* ids,
                        int64_t N,
                        int64_t C,
                        int64_t row_start,
                        int64_t rows) {
  MT_PROFILE("embedding_backward");
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::embedding_backward(dtable, dout, ids, N, C, row_start, rows);
    case Device::kCUDA:
      return cuda::embedding_backward(ctx, dtable, dout, ids, N, C, row_start, rows);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void layernorm_forward(const Ctx& ctx,
                       float* out,
                       float* mean,
                       float* rstd,
                       const float* inp,
                       const float* weight,
                       const float* bias,
                       int64_t N,
                       int64_t C,
                       float eps) {
  MT_PROFILE("layernorm_forward");
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps);
    case Device::kCUDA:
      return cuda::layernorm_forward(ctx, out, mean, rstd, inp, weight, bias, N, C, eps);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void layernorm_backward(const Ctx& ctx,
                        float* dinp,
                        float* dweight,
                        float* dbias,
                        const float* dout,
                        const float* inp,
                        const float* weight,
                        const float* mean,
                        const float* rstd,
                        int64_t N,
                        int64_t C) {
  MT_PROFILE("layernorm_backward");
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
    case Device::kCUDA:
      return cuda::layernorm_backward(ctx, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N,
                                      C);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void rmsnorm_forward(const Ctx& ctx,
                     float* out,
                     float* rstd,
                     const float* inp,
                     const float* weight,
                     int64_t N,
                     int64_t C,
                     float eps) {
  MT_PROFILE("rmsnorm_forward");
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
    case Device::kCUDA:
      return cuda::rmsnorm_forward(ctx, out, rstd, inp, weight, N, C, eps);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void rmsnorm_backward(const Ctx& ctx,
                      float* dinp,
                      float* dweight,
                      const float* dout,
                      const float* inp,
                      const float* weight,
                      const float* rstd,
                      int64_t N,
                      int64_t C) {
  MT_PROFILE("rmsnorm_backward");
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
    case Device::kCUDA:
      return cuda::rmsnorm_backward(ctx, dinp, dweight, dout, inp, weight, rstd, N, C);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void gelu_forward(const Ctx& ctx, float* out, const float* inp, int64_t n) {
  MT_PROFILE("gelu_forward");
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::gelu_forward(out, inp, n);
    case Device::kCUDA:
      return cuda::gelu_forward(ctx, out, inp, n);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void gelu_backward(const Ctx& ctx, float* dinp, const float* inp, const float* dout, int64_t n) {
  MT_PROFILE("gelu_backward");
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::gelu_backward(dinp, inp, dout, n);
    case Device::kCUDA:
      return cuda::gelu_backward(ctx, dinp, inp, dout, n);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void swiglu_forward(const Ctx& ctx, float* out, const float* inp, int64_t N, int64_t F) {
  MT_PROFILE("swiglu_forward");
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::swiglu_forward(out, inp, N, F);
    case Device::kCUDA:
      return cuda::swiglu_forward(ctx, out, inp, N, F);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void swiglu_backward(
    const Ctx& ctx, float* dinp, const float* inp, const float* dout, int64_t N, int64_t F) {
  MT_PROFILE("swiglu_backward");
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::swiglu_backward(dinp, inp, dout, N, F);
    case Device::kCUDA:
      return cuda::swiglu_backward(ctx, dinp, inp, dout, N, F);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void qkv_split(const Ctx& ctx,
               float* q,
               float* k,
               float* v,
               const float* qkv,
               int64_t N,
               int64_t G,
               int64_t hpg,
               int64_t D) {
  MT_PROFILE("qkv_split");
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::qkv_split(q, k, v, qkv, N, G, hpg, D);
    case Device::kCUDA:
      return cuda::qkv_split(ctx, q, k, v, qkv, N, G, hpg, D);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void qkv_merge_grad(const Ctx& ctx,
                    float* dqkv,
                    const float* dq,
                    const float* dk,
                    const float* dv,
                    int64_t N,
                    int64_t G,
                    int64_t hpg,
                    int64_t D) {
  MT_PROFILE("qkv_merge_grad");
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::qkv_merge_grad(dqkv, dq, dk, dv, N, G, hpg, D);
    case Device::kCUDA:
      return cuda::qkv_merge_grad(ctx, dqkv, dq, dk, dv, N, G, hpg, D);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void rope_forward(const Ctx& ctx,
                  float* x,
                  const int32_t* pos,
                  int64_t N,
                  int64_t nh,
                  int64_t D,
                  int64_t rot_dim,
                  float base) {
  MT_PROFILE("rope_forward");
  check_rope(D, rot_dim);
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::rope_forward(x, pos, N, nh, D, rot_dim, base);
    case Device::kCUDA:
      return cuda::rope_forward(ctx, x, pos, N, nh, D, rot_dim, base);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void rope_backward(const Ctx& ctx,
                   float* dx,
                   const int32_t* pos,
                   int64_t N,
                   int64_t nh,
                   int64_t D,
                   int64_t rot_dim,
                   float base) {
  MT_PROFILE("rope_backward");
  check_rope(D, rot_dim);
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::rope_backward(dx, pos, N, nh, D, rot_dim, base);
    case Device::kCUDA:
      return cuda::rope_backward(ctx, dx, pos, N, nh, D, rot_dim, base);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void attention_forward(const Ctx& ctx,
                       float* out,
                       float* lse,
                       const float* q,
                       const float* k,
                       const float* v,
                       const AttnShape& s,
                       AttnMask mask) {
  MT_PROFILE("attention_forward", attention_flops(s, mask));
  check_attention(s);
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::attention_forward(out, lse, q, k, v, s, mask);
    case Device::kCUDA:
      return cuda::attention_forward(ctx, out, lse, q, k, v, s, mask);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void attention_backward(const Ctx& ctx,
                        float* dq,
                        float* dk,
                        float* dv,
                        const float* dout,
                        const float* q,
                        const float* k,
                        const float* v,
                        const float* out,
                        const float* lse,
                        const AttnShape& s,
                        AttnMask mask) {
  MT_PROFILE("attention_backward", 2.0 * attention_flops(s, mask));
  check_attention(s);
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::attention_backward(dq, dk, dv, dout, q, k, v, out, lse, s, mask);
    case Device::kCUDA:
      return cuda::attention_backward(ctx, dq, dk, dv, dout, q, k, v, out, lse, s, mask);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void xent_stats(const Ctx& ctx,
                float* row_max,
                float* row_sumexp,
                float* target_logit,
                const float* logits,
                const int32_t* targets,
                int64_t n,
                int64_t Vl,
                int64_t col_start,
                int64_t vocab_valid) {
  MT_PROFILE("xent_stats");
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::xent_stats(row_max, row_sumexp, target_logit, logits, targets, n, Vl, col_start,
                             vocab_valid);
    case Device::kCUDA:
      return cuda::xent_stats(ctx, row_max, row_sumexp, target_logit, logits, targets, n, Vl,
                              col_start, vocab_valid);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void xent_backward(const Ctx& ctx,
                   float* dlogits,
                   const float* logits,
                   const int32_t* targets,
                   const float* row_max,
                   const float* row_sumexp,
                   const float* row_scale,
                   int64_t n,
                   int64_t Vl,
                   int64_t col_start,
                   int64_t vocab_valid) {
  MT_PROFILE("xent_backward");
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::xent_backward(dlogits, logits, targets, row_max, row_sumexp, row_scale, n, Vl,
                                col_start, vocab_valid);
    case Device::kCUDA:
      return cuda::xent_backward(ctx, dlogits, logits, targets, row_max, row_sumexp, row_scale, n,
                                 Vl, col_start, vocab_valid);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

void adamw_step(const Ctx& ctx,
                float* param,
                float* m,
                float* v,
                const float* grad,
                bf16* param_bf16,
                int64_t n,
                const AdamWParams& p) {
  MT_PROFILE("adamw_step");
  switch (ctx.device) {
    case Device::kCPU:
      return cpu::adamw_step(param, m, v, grad, param_bf16, n, p);
    case Device::kCUDA:
      return cuda::adamw_step(ctx, param, m, v, grad, param_bf16, n, p);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

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
      return cpu::copy(host_dst, src, bytes);
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
      return cpu::copy(dst, host_src, bytes);
    case Device::kCUDA:
      return cuda::copy_from_host(ctx, dst, host_src, bytes);
  }
  MT_ASSERT(false, "unknown device ", int(ctx.device));
}

}  // namespace mtron::kernels
