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

// The op parameters are named in the lists and unused here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define MT_DEFINE_NO_CUDA(ret, name, id, contract, params, args) \
  ret name(const Ctx& ctx, MT_UNPACK params) {                   \
    no_cuda(#name);                                              \
  }
MTRON_KERNEL_OPS(MT_DEFINE_NO_CUDA)
#undef MT_DEFINE_NO_CUDA
#pragma GCC diagnostic pop

int device_count() {
  return 0;
}
std::string device_unavailable() {
  return "this mtron was built without CUDA (configure with -DMTRON_CUDA=ON, the cuda-release "
         "preset)";
}
int64_t attention_max_head_dim() {
  no_cuda("attention_max_head_dim");
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
void* default_stream() {
  no_cuda("default_stream");
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
void copy_from_host_async(const Ctx&, void*, const void*, int64_t) {
  no_cuda("copy_from_host_async");
}
DeviceWork device_work() {
  no_cuda("device_work");
}

}  // namespace mtron::kernels::cuda
