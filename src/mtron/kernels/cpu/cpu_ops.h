// defines: mtron::kernels::cpu::* (the CPU implementations behind kernels/*.h)
//
// Same contracts as the public functions (see the headers in kernels/), without the Ctx. One op
// family per file in cpu/. OpenMP parallelises inside a call; the calling thread must not be
// inside another OpenMP region.
#pragma once

#include <cstdint>
#include <string>

#include "mtron/kernels/adamw.h"
#include "mtron/kernels/attention.h"
#include "mtron/kernels/gemm.h"

namespace mtron::kernels::cpu {

// gemm.cpp
std::string gemm_library_info();
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
          int64_t ldc);
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
          int64_t ldc);

// elementwise.cpp
void add(float* out, const float* a, const float* b, int64_t n);
void scale_inplace(float* x, float s, int64_t n);
void convert(bf16* dst, const float* src, int64_t n);
void convert(float* dst, const bf16* src, int64_t n);
void bias_add(float* out, const float* bias, int64_t N, int64_t C);
void bias_backward(float* dbias, const float* dout, int64_t N, int64_t C);
double sum_squares(const float* x, int64_t n);
void fill_zero(void* x, int64_t bytes);
void fill(float* x, float value, int64_t n);
void copy(void* dst, const void* src, int64_t bytes);

// embedding.cpp
void embedding_forward(float* out,
                       const int32_t* ids,
                       const float* table,
                       int64_t N,
                       int64_t C,
                       int64_t row_start,
                       int64_t rows,
                       bool accumulate);
void embedding_backward(float* dtable,
                        const float* dout,
                        const int32_t* ids,
                        int64_t N,
                        int64_t C,
                        int64_t row_start,
                        int64_t rows);

// norm.cpp
void layernorm_forward(float* out,
                       float* mean,
                       float* rstd,
                       const float* inp,
                       const float* weight,
                       const float* bias,
                       int64_t N,
                       int64_t C,
                       float eps);
void layernorm_backward(float* dinp,
                        float* dweight,
                        float* dbias,
                        const float* dout,
                        const float* inp,
                        const float* weight,
                        const float* mean,
                        const float* rstd,
                        int64_t N,
                        int64_t C);
void rmsnorm_forward(float* out,
                     float* rstd,
                     const float* inp,
                     const float* weight,
                     int64_t N,
                     int64_t C,
                     float eps);
void rmsnorm_backward(float* dinp,
                      float* dweight,
                      const float* dout,
                      const float* inp,
                      const float* weight,
                      const float* rstd,
                      int64_t N,
                      int64_t C);

// activation.cpp
void gelu_forward(float* out, const float* inp, int64_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);
void swiglu_forward(float* out, const float* inp, int64_t N, int64_t F);
void swiglu_backward(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F);

// rope.cpp
void qkv_split(
    float* q, float* k, float* v, const float* qkv, int64_t N, int64_t G, int64_t hpg, int64_t D);
void qkv_merge_grad(float* dqkv,
                    const float* dq,
                    const float* dk,
                    const float* dv,
                    int64_t N,
                    int64_t G,
                    int64_t hpg,
                    int64_t D);
void rope_forward(
    float* x, const int32_t* pos, int64_t N, int64_t nh, int64_t D, int64_t rot_dim, float base);
void rope_backward(
    float* dx, const int32_t* pos, int64_t N, int64_t nh, int64_t D, int64_t rot_dim, float base);

// attention.cpp
void attention_forward(float* out,
                       float* lse,
                       const float* q,
                       const float* k,
                       const float* v,
                       const AttnShape& s,
                       AttnMask mask);
void attention_backward(float* dq,
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

// xent.cpp
void xent_stats(float* row_max,
                float* row_sumexp,
                float* target_logit,
                const float* logits,
                const int32_t* targets,
                int64_t n,
                int64_t Vl,
                int64_t col_start,
                int64_t vocab_valid);
void xent_backward(float* dlogits,
                   const float* logits,
                   const int32_t* targets,
                   const float* row_max,
                   const float* row_sumexp,
                   const float* row_scale,
                   int64_t n,
                   int64_t Vl,
                   int64_t col_start,
                   int64_t vocab_valid);

// adamw.cpp
void adamw_step(float* param,
                float* m,
                float* v,
                const float* grad,
                bf16* param_bf16,
                int64_t n,
                const AdamWParams& p);

}  // namespace mtron::kernels::cpu
