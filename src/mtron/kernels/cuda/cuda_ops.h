// defines: mtron::kernels::cuda::* (the CUDA implementations behind kernels/*.h)
//
// Same contracts and signatures as the public functions of kernels/*.h (the Ctx carries the
// stream) and, without the Device argument, of kernels/device.h. A build without CUDA links
// cuda/no_cuda.cpp, whose functions throw mtron::Error (device_count returns 0).
#pragma once

#include <cstdint>

#include "mtron/kernels/adamw.h"
#include "mtron/kernels/attention.h"
#include "mtron/kernels/ctx.h"
#include "mtron/kernels/device.h"
#include "mtron/kernels/gemm.h"

namespace mtron::kernels::cuda {

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
          int64_t ldc);
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
          int64_t ldc);
void add(const Ctx& ctx, float* out, const float* a, const float* b, int64_t n);
void scale_inplace(const Ctx& ctx, float* x, float s, int64_t n);
void convert(const Ctx& ctx, bf16* dst, const float* src, int64_t n);
void convert(const Ctx& ctx, float* dst, const bf16* src, int64_t n);
void bias_add(const Ctx& ctx, float* out, const float* bias, int64_t N, int64_t C);
void bias_backward(const Ctx& ctx, float* dbias, const float* dout, int64_t N, int64_t C);
double sum_squares(const Ctx& ctx, const float* x, int64_t n);
void fill_zero(const Ctx& ctx, void* x, int64_t bytes);
void fill(const Ctx& ctx, float* x, float value, int64_t n);
void copy(const Ctx& ctx, void* dst, const void* src, int64_t bytes);
void embedding_forward(const Ctx& ctx,
                       float* out,
                       const int32_t* ids,
                       const float* table,
                       int64_t N,
                       int64_t C,
                       int64_t row_start,
                       int64_t rows,
                       bool accumulate);
void embedding_backward(const Ctx& ctx,
                        float* dtable,
                        const float* dout,
                        const int32_t* ids,
                        int64_t N,
                        int64_t C,
                        int64_t row_start,
                        int64_t rows);
void layernorm_forward(const Ctx& ctx,
                       float* out,
                       float* mean,
                       float* rstd,
                       const float* inp,
                       const float* weight,
                       const float* bias,
                       int64_t N,
                       int64_t C,
                       float eps);
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
                        int64_t C);
void rmsnorm_forward(const Ctx& ctx,
                     float* out,
                     float* rstd,
                     const float* inp,
                     const float* weight,
                     int64_t N,
                     int64_t C,
                     float eps);
void rmsnorm_backward(const Ctx& ctx,
                      float* dinp,
                      float* dweight,
                      const float* dout,
                      const float* inp,
                      const float* weight,
                      const float* rstd,
                      int64_t N,
                      int64_t C);
void gelu_forward(const Ctx& ctx, float* out, const float* inp, int64_t n);
void gelu_backward(const Ctx& ctx, float* dinp, const float* inp, const float* dout, int64_t n);
void swiglu_forward(const Ctx& ctx, float* out, const float* inp, int64_t N, int64_t F);
void swiglu_backward(
    const Ctx& ctx, float* dinp, const float* inp, const float* dout, int64_t N, int64_t F);
void qkv_split(const Ctx& ctx,
               float* q,
               float* k,
               float* v,
               const float* qkv,
               int64_t N,
               int64_t G,
               int64_t hpg,
               int64_t D);
void qkv_merge_grad(const Ctx& ctx,
                    float* dqkv,
                    const float* dq,
                    const float* dk,
                    const float* dv,
                    int64_t N,
                    int64_t G,
                    int64_t hpg,
                    int64_t D);
void rope_forward(const Ctx& ctx,
                  float* x,
                  const int32_t* pos,
                  int64_t N,
                  int64_t nh,
                  int64_t D,
                  int64_t rot_dim,
                  float base);
void rope_backward(const Ctx& ctx,
                   float* dx,
                   const int32_t* pos,
                   int64_t N,
                   int64_t nh,
                   int64_t D,
                   int64_t rot_dim,
                   float base);
void attention_forward(const Ctx& ctx,
                       float* out,
                       float* lse,
                       const float* q,
                       const float* k,
                       const float* v,
                       const AttnShape& s,
                       AttnMask mask);
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
                        AttnMask mask);
void xent_stats(const Ctx& ctx,
                float* row_max,
                float* row_sumexp,
                float* target_logit,
                const float* logits,
                const int32_t* targets,
                int64_t n,
                int64_t Vl,
                int64_t col_start,
                int64_t vocab_valid);
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
                   int64_t vocab_valid);
void adamw_step(const Ctx& ctx,
                float* param,
                float* m,
                float* v,
                const float* grad,
                bf16* param_bf16,
                int64_t n,
                const AdamWParams& p);

// device.h
int device_count();
void init_device(int ordinal);
DeviceProperties device_properties();
DeviceMemory device_memory();
void reset_peak_memory();
void* create_stream();
void destroy_stream(void* stream);
void synchronize(const Ctx& ctx);
void copy_to_host(const Ctx& ctx, void* host_dst, const void* src, int64_t bytes);
void copy_from_host(const Ctx& ctx, void* dst, const void* host_src, int64_t bytes);

}  // namespace mtron::kernels::cuda
