// defines: the CUDA dialect subset the kernels of kernels/cuda use, emulated on the CPU
//          (dim3, threadIdx/blockIdx/blockDim/gridDim, __syncthreads, __shfl_xor_sync, the
//          tensor cores' bf16 mma.sync and ldmatrix, cp.async, the qualifiers, the math functions),
//          and sim::launch, which runs a grid block by block.
//
// Why: this machine and CI have no GPU, but the kernels' logic (indexing, masking, reductions,
// barriers) can still be checked against the CPU kernels. Compiled with -DMTRON_CUDA_SIM, the
// .cu files build as plain C++ against this header: each CUDA thread of a block is a fiber on
// the launching OS thread (sim.cpp), __syncthreads suspends it until every live thread of the
// block has arrived (a thread that returned no longer counts, as on the GPU), warp shuffles
// exchange values through a per-warp buffer between two warp barriers (the live threads of the
// warp), __shared__ variables are function-local statics (blocks run one after another, so one
// copy serves the running block), and dynamic shared memory is a per-block buffer. Threads run
// in a fixed order, so the emulation is deterministic; it does not model memory ordering
// between threads beyond the barriers (a kernel that needs a fence the emulation does not see
// would pass here and fail on the GPU) nor warp-synchronous code without __syncwarp, and threads
// waiting at different barriers (a __syncthreads in divergent code) fail an assertion. Block
// sizes must be multiples of 32.
//
// Only what the kernels use is emulated; cuBLASLt and CUB calls are replaced at their call
// sites (gemm_sim.cpp, embedding.cu).
//
// Device memory (runtime_sim.cpp) is one reserved address range that is inaccessible except
// while emulated device work runs (a DeviceAccess lives: sim::launch, the copies, the GEMMs,
// the sort): host code that reads or writes device memory directly, which on a GPU would crash
// or read garbage, faults here too, with a message naming the address. So code above kernels/
// run on the emulated device is checked to go through kernels/device.h for every access.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) {
  return {x, y, z, w};
}
inline float4 make_float4(float x, float y, float z, float w) {
  return {x, y, z, w};
}

extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)

using cudaStream_t = void*;
enum cudaError_t { cudaSuccess = 0 };
inline const char* cudaGetErrorString(cudaError_t) {
  return "no error (emulated)";
}

namespace mtron::sim {

// Whether p points into the emulated device memory.
bool is_device_memory(const void* p);
// A pointer argument of device work must be null or device memory: a host pointer handed to a
// kernel, a GEMM or a device-side copy faults on a GPU (throws mtron::InternalError naming `what`).
void check_device_pointer(const char* what, const void* p);
// A struct of pointers passes them as v.for_each_pointer(f) does.
template <typename T>
void check_device_arg(const char* what, const T& v) {
  if constexpr (std::is_pointer_v<T>)
    check_device_pointer(what, v);
  else if constexpr (requires { v.for_each_pointer([](const void*) {}); })
    v.for_each_pointer([&](const void* p) { check_device_pointer(what, p); });
}

// Makes the emulated device memory accessible for this object's lifetime (nests).
class DeviceAccess {
 public:
  DeviceAccess();
  ~DeviceAccess();
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;
};

// Marks [p, p + bytes) of device memory as used by a pending non-blocking communication until
// unpin_in_flight(token). Freeing device memory that overlaps a pinned range aborts with a
// message: on a GPU the allocator frees on the compute stream, and a communication on NCCL's
// stream not yet joined to it (by its request's wait) may still read or write the block that
// the next allocation is given (kernels/device.h, comm/nccl.h).
uint64_t pin_in_flight(const void* p, size_t bytes);
void unpin_in_flight(uint64_t token);

// Runs kernel() for every thread of every block of the grid; smem_bytes of dynamic shared
// memory per block.
void launch(dim3 grid, dim3 block, size_t smem_bytes, const std::function<void()>& kernel);

void sync_block();
void sync_warp();
unsigned char* dynamic_smem();
// Writes this thread's 8-byte value, waits for its warp, returns the value of lane `src_lane`.
uint64_t warp_exchange(uint64_t v, int src_lane);
// The warp-wide mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32 (c += A B) with this lane's
// fragment registers (the PTX ISA's layout, sim.cpp); products summed in fp32 in k order.
void mma_bf16_16816(float c[4], const uint32_t a[4], const uint32_t b[2]);
// The warp-wide ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 with this lane's row address
// (common.cuh ldmatrix_x4): the addresses go through the warp's exchange buffer.
void ldmatrix_x4(uint32_t r[4], const uint16_t* row, bool trans);
// cp.async.cg.shared.global of 16 bytes, src_bytes of them read, the rest zeros: done at once.
inline void cp_async16(void* smem, const void* gmem, int src_bytes) {
  std::memset(smem, 0, 16);
  if (src_bytes > 0) std::memcpy(smem, gmem, size_t(src_bytes));
}

template <typename T>
uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8);
  uint64_t u = 0;
  std::memcpy(&u, &v, sizeof(T));
  return u;
}
template <typename T>
T from_bits(uint64_t u) {
  T v;
  std::memcpy(&v, &u, sizeof(T));
  return v;
}

}  // namespace mtron::sim

inline void __syncthreads() {
  mtron::sim::sync_block();
}
inline void __syncwarp(unsigned = 0xffffffffu) {
  mtron::sim::sync_warp();
}

template <typename T>
T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  const int lane = int(threadIdx.x % 32);
  return mtron::sim::from_bits<T>(
      mtron::sim::warp_exchange(mtron::sim::to_bits(v), lane ^ lane_mask));
}
template <typename T>
T __shfl_sync(unsigned, T v, int src_lane) {
  return mtron::sim::from_bits<T>(mtron::sim::warp_exchange(mtron::sim::to_bits(v), src_lane));
}

inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float rsqrtf(float x) {
  return 1.0f / std::sqrt(x);
}
// a product rounded to fp32, never fused into a following addition
inline float __fmul_rn(float a, float b) {
  volatile float p = a * b;
  return p;
}
// a sum rounded to fp32, never fused with a preceding product
inline float __fadd_rn(float a, float b) {
  volatile float s = a + b;
  return s;
}
