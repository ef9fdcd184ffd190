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
void fill_zero(const Ctx&, void*, int64_t) {
  no_cuda("fill_zero");
}
void fill(const Ctx&, float*, float, int64_t) {
  no_cuda("fill");
}
void copy(const Ctx&, void*, const void*, int64_t) {
  no_cuda("copy");
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

int device_count() {
  return 0;
}
void init_device(int) {
  no_cuda("init_device");
}
DeviceProperties device_properties() {
  no_cuda("device_properties");
}
DeviceMemory device_memory() {
  no_cuda("device_memory");
}
void reset_peak_memory() {
  no_cuda("reset_peak_memory");
}
void* create_stream() {
  no_cuda("create_stream");
}
void destroy_stream(void*) {
  no_cuda("destroy_stream");
}
void synchronize(const Ctx&) {
  no_cuda("synchronize");
}
void copy_to_host(const Ctx&, void*, const void*, int64_t) {
  no_cuda("copy_to_host");
}
void copy_from_host(const Ctx&, void*, const void*, int64_t) {
  no_cuda("copy_from_host");
}

}  // namespace mtron::kernels::cuda
