// defines: the CUDA dialect switch (the real runtime, or the CPU emulation of sim/sim.h when
//          MTRON_CUDA_SIM is defined), MT_CUDA_CHECK, cuda_fail, check_launch, stream_of, Scratch,
//          copy_to_host_sync, scale_matrix, Work, work, aligned16
//
// Host-side helpers shared by the CUDA kernels (.cu) and the host-only CUDA code (runtime.cpp,
// allocator.cpp, gemm.cpp). The sim build replaces runtime.cpp and allocator.cpp by
// sim/runtime_sim.cpp and gemm.cpp by sim/gemm_sim.cpp.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#ifdef MTRON_CUDA_SIM
#include "mtron/kernels/cuda/sim/sim.h"
#else
#include <cuda_runtime.h>
#endif

#include "mtron/kernels/ctx.h"
#include "mtron/kernels/cuda/cuda_ops.h"

namespace mtron::kernels::cuda {

// Throws mtron::InternalError naming the call and CUDA's message; mtron::Error for out of memory
// (the user's to fix: a smaller batch, recompute, more parallelism).
[[noreturn]] void cuda_fail(const char* file, int line, const char* what, int code);

#define MT_CUDA_CHECK(call)                                                                   \
  do {                                                                                        \
    const auto mt_rc_ = (call);                                                               \
    if (mt_rc_ != cudaSuccess)                                                                \
      ::mtron::kernels::cuda::cuda_fail(__FILE__, __LINE__, #call, static_cast<int>(mt_rc_)); \
  } while (0)

// After a kernel launch: cudaGetLastError, and, when MTRON_CUDA_SYNC=1 is set in the
// environment, a synchronisation of the stream, so that an asynchronous fault is reported
// against the kernel that caused it (bench/gpu/op_check runs this way).
void check_launch(const char* kernel, cudaStream_t stream);

// ctx's stream: the compute stream (device.h, default_stream) when ctx names none.
inline cudaStream_t stream_of(const Ctx& ctx) {
  return static_cast<cudaStream_t>(ctx.stream ? ctx.stream : default_stream());
}

// Stream-ordered temporary device memory: allocated on `stream` from the caching pool
// (allocator.cpp) and freed on it when the object goes out of scope, so kernels queued on the
// stream before the free may still use it.
class Scratch {
 public:
  Scratch(size_t bytes, cudaStream_t stream);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  [[maybe_unused]] cudaStream_t stream_;  // the emulation runs kernels in order: it needs none
};

// The counts behind device_work() (kernels/device.h), kept by launch(), the GEMMs, the copies and
// the synchronisations of the CUDA runtime and of its emulation alike.
struct Work {
  std::atomic<int64_t> launches{0}, gemms{0}, copies{0}, host_syncs{0};
};
inline Work& work() {
  static Work w;
  return w;
}

// Whether every address is 16-byte aligned (null ones count as aligned).
inline bool aligned16(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// Copies device memory to the host and waits for it (and for the work queued before it).
void copy_to_host_sync(void* host, const void* dev, size_t bytes, cudaStream_t stream);

// Helpers implemented in elementwise.cu for the other files:
// C[M,N] (row stride ldc) *= beta; beta == 0 writes zeros (NaN in C does not survive).
void scale_matrix(cudaStream_t stream, float* C, int64_t M, int64_t N, int64_t ldc, float beta);
// dst[c] += sum over r < R of src[r*C + c], in a fixed order (deterministic): rows are summed in
// chunks of 256, the chunk sums likewise, and so on.
void add_column_sums(cudaStream_t stream, float* dst, const float* src, int64_t R, int64_t C);

}  // namespace mtron::kernels::cuda
