// The CUDA entry points of a build without CUDA (MTRON_CUDA=OFF): each throws a user error,
// so asking for a CUDA tensor op fails with one clear line instead of a link error.
#include "mtron/core/error.h"
#include "mtron/kernels/cuda/cuda_ops.h"

namespace mtron::kernels::cuda {
namespace {
[[noreturn]] void no_cuda(const char* op) {
  throw Error(
      str("kernels::", op, ": this mtron was built without CUDA (configure with -DMTRON_CUDA=ON)"));
}
}  // namespace

void gemm(const Ctx&,
          Trans,
          Trans,
          int64_t,
          int64_t,
          int64_t,
          float,
          const float*,
          int64_t,
          const float*,
          int64_t,
          float,
          float*,
          int64_t) {
  no_cuda("gemm");
}
void gemm(const Ctx&,
          Trans,
          Trans,
          int64_t,
          int64_t,
          int64_t,
          float,
          const bf16*,
          int64_t,
          const bf16*,
          int64_t,
          float,
          float*,
          int64_t) {
  no_cuda("gemm");
}
void add(const Ctx&, float*, const float*, const float*, int64_t) {
  no_cuda("add");
}
void scale_inplace(const Ctx&, float*, float, int64_t) {
  no_cuda("scale_inplace");
}
void convert(const Ctx&, bf16*, const float*, int64_t) {
  no_cuda("convert");
}
void convert(const Ctx&, float*, const bf16*, int64_t) {
  no_cuda("convert");
}
void bias_add(const Ctx&, float*, const float*, int64_t, int64_t) {
  no_cuda("bias_add");
}
void bias_backward(const Ctx&, float*, const float*, int64_t, int64_t) {
  no_cuda("bias_backward");
}
double sum_squares(const Ctx&, const float*, int64_t) {
  no_cuda("sum_squares");
}
void embedding_forward(
    const Ctx&, float*, const int32_t*, const float*, int64_t, int64_t, int64_t, int64_t, bool) {
  no_cuda("embedding_forward");
}
void embedding_backward(
    const Ctx&, float*, const float*, const int32_t*, int64_t, int64_t, int64_t, int64_t) {
  no_cuda("embedding_backward");
}
void layernorm_forward(const Ctx&,
                       float*,
                       float*,
                       float*,
                       const float*,
                       const float*,
                       const float*,
                       int64_t,
                       int64_t,
                       float) {
  no_cuda("layernorm_forward");
}
void layernorm_backward(const Ctx&,
                        float*,
                        float*,
                        float*,
                        const float*,
                        const float*,
                        const float*,
                        const float*,
                        const float*,
                        int64_t,
                        int64_t) {
  no_cuda("layernorm_backward");
}
void rmsnorm_forward(
    const Ctx&, float*, float*, const float*, const float*, int64_t, int64_t, float) {
  no_cuda("rmsnorm_forward");
}
void rmsnorm_backward(const Ctx&,
                      float*,
                      float*,
                      const float*,
                      const float*,
                      const float*,
                      const float*,
                      int64_t,
                      int64_t) {
  no_cuda("rmsnorm_backward");
}
void gelu_forward(const Ctx&, float*, const float*, int64_t) {
  no_cuda("gelu_forward");
}
void gelu_backward(const Ctx&, float*, const float*, const float*, int64_t) {
  no_cuda("gelu_backward");
}
void swiglu_forward(const Ctx&, float*, const float*, int64_t, int64_t) {
  no_cuda("swiglu_forward");
}
void swiglu_backward(const Ctx&, float*, const float*, const float*, int64_t, int64_t) {
  no_cuda("swiglu_backward");
}
void qkv_split(
    const Ctx&, float*, float*, float*, const float*, int64_t, int64_t, int64_t, int64_t) {
  no_cuda("qkv_split");
}
void qkv_merge_grad(const Ctx&,
                    float*,
                    const float*,
                    const float*,
                    const float*,
                    int64_t,
                    int64_t,
                    int64_t,
                    int64_t) {
  no_cuda("qkv_merge_grad");
}
void rope_forward(const Ctx&, float*, const int32_t*, int64_t, int64_t, int64_t, int64_t, float) {
  no_cuda("rope_forward");
}
void rope_backward(const Ctx&, float*, const int32_t*, int64_t, int64_t, int64_t, int64_t, float) {
  no_cuda("rope_backward");
}
void attention_forward(const Ctx&,
                       float*,
                       float*,
                       const float*,
                       const float*,
                       const float*,
                       const AttnShape&,
                       AttnMask) {
  no_cuda("attention_forward");
}
void attention_backward(const Ctx&,
                        float*,
                        float*,
                        float*,
                        const float*,
                        const float*,
                        const float*,
                        const float*,
                        const float*,
                        const float*,
                        const AttnShape&,
                        AttnMask) {
  no_cuda("attention_backward");
}
void xent_stats(const Ctx&,
                float*,
                float*,
                float*,
                const float*,
                const int32_t*,
                int64_t,
                int64_t,
                int64_t,
                int64_t) {
  no_cuda("xent_stats");
}
void xent_backward(const Ctx&,
                   float*,
                   const float*,
                   const int32_t*,
                   const float*,
                   const float*,
                   const float*,
                   int64_t,
                   int64_t,
                   int64_t,
                   int64_t) {
  no_cuda("xent_backward");
}
void adamw_step(
    const Ctx&, float*, float*, float*, const float*, bf16*, int64_t, const AdamWParams&) {
  no_cuda("adamw_step");
}

}  // namespace mtron::kernels::cuda
