// defines: mtron::kernels::ref::* — naive reference kernels, for tests only
//
// Plain loops, accumulation in double (long double for the double instantiation), never
// optimised, no threads. Templated on the float type: the float instantiation is what the fast
// CPU kernels are compared with; the double one is what backward passes are checked against by
// central finite differences. Same contracts as kernels/*.h unless a comment says otherwise.
#pragma once

#include <cstdint>
#include <type_traits>

#include "mtron/kernels/adamw.h"
#include "mtron/kernels/attention.h"
#include "mtron/kernels/gemm.h"

namespace mtron::kernels::ref {

template <typename T>
void gemm(Trans ta,
          Trans tb,
          int64_t M,
          int64_t N,
          int64_t K,
          T alpha,
          const T* A,
          int64_t lda,
          const T* B,
          int64_t ldb,
          T beta,
          T* C,
          int64_t ldc);

template <typename T>
void add(T* out, const T* a, const T* b, int64_t n);
template <typename T>
void scale_inplace(T* x, T s, int64_t n);
// Round to nearest even, written from the definition (frexp/nearbyint on the bf16 quantum),
// independently of core's bit trick.
bf16 to_bf16(float x);
template <typename T>
void bias_add(T* out, const T* bias, int64_t N, int64_t C);
template <typename T>
void bias_backward(T* dbias, const T* dout, int64_t N, int64_t C);
template <typename T>
double sum_squares(const T* x, int64_t n);

template <typename T>
void embedding_forward(T* out,
                       const int32_t* ids,
                       const T* table,
                       int64_t N,
                       int64_t C,
                       int64_t row_start,
                       int64_t rows,
                       bool accumulate);
template <typename T>
void embedding_backward(T* dtable,
                        const T* dout,
                        const int32_t* ids,
                        int64_t N,
                        int64_t C,
                        int64_t row_start,
                        int64_t rows);

template <typename T>
void layernorm_forward(T* out,
                       T* mean,
                       T* rstd,
                       const T* inp,
                       const T* weight,
                       const T* bias,
                       int64_t N,
                       int64_t C,
                       T eps);
template <typename T>
void layernorm_backward(T* dinp,
                        T* dweight,
                        T* dbias,
                        const T* dout,
                        const T* inp,
                        const T* weight,
                        const T* mean,
                        const T* rstd,
                        int64_t N,
                        int64_t C);
template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int64_t N, int64_t C, T eps);
template <typename T>
void rmsnorm_backward(T* dinp,
                      T* dweight,
                      const T* dout,
                      const T* inp,
                      const T* weight,
                      const T* rstd,
                      int64_t N,
                      int64_t C);

template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n);
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n);
template <typename T>
void swiglu_forward(T* out, const T* inp, int64_t N, int64_t F);
template <typename T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, int64_t N, int64_t F);

template <typename T>
void qkv_split(T* q, T* k, T* v, const T* qkv, int64_t N, int64_t G, int64_t hpg, int64_t D);
template <typename T>
void qkv_merge_grad(
    T* dqkv, const T* dq, const T* dk, const T* dv, int64_t N, int64_t G, int64_t hpg, int64_t D);
// The angle is fp32 as in Megatron (whatever T is); cos/sin are taken in double.
template <typename T>
void rope_forward(
    T* x, const int32_t* pos, int64_t N, int64_t nh, int64_t D, int64_t rot_dim, float base);
template <typename T>
void rope_backward(
    T* dx, const int32_t* pos, int64_t N, int64_t nh, int64_t D, int64_t rot_dim, float base);

template <typename T>
void attention_forward(
    T* out, T* lse, const T* q, const T* k, const T* v, const AttnShape& s, AttnMask mask);
// Recomputes everything from q, k, v (it needs neither out nor lse); accumulates (+=).
template <typename T>
void attention_backward(T* dq,
                        T* dk,
                        T* dv,
                        const T* dout,
                        const T* q,
                        const T* k,
                        const T* v,
                        const AttnShape& s,
                        AttnMask mask);

template <typename T>
void xent_stats(T* row_max,
                T* row_sumexp,
                T* target_logit,
                const T* logits,
                const int32_t* targets,
                int64_t n,
                int64_t Vl,
                int64_t col_start,
                int64_t vocab_valid);
template <typename T>
void xent_backward(T* dlogits,
                   const T* logits,
                   const int32_t* targets,
                   const T* row_max,
                   const T* row_sumexp,
                   const T* row_scale,
                   int64_t n,
                   int64_t Vl,
                   int64_t col_start,
                   int64_t vocab_valid);

// adamw.h's formula evaluated in double (param_bf16 is not part of the reference).
template <typename T>
void adamw_step(T* param, T* m, T* v, const T* grad, int64_t n, const AdamWParams& p);

// Accumulator type: wider than T.
template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, float>, double, long double>;

}  // namespace mtron::kernels::ref
