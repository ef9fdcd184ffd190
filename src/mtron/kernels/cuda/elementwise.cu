// CUDA elementwise ops (kernels/elementwise.h): add, scale, f32<->bf16 and f32<->f16 conversion,
// bias add and backward, sum of squares, fill, hidden dropout; and the column-sum and
// matrix-scale helpers of runtime.h.
//
// Memory-bound grid-stride loops with 64-bit indices; add, scale and the bf16 conversions by
// map.cuh's maps (16-byte accesses). The reductions (bias_backward,
// sum_squares) use a fixed partition that depends on the sizes only, so results are
// deterministic and independent of the GPU model.
#include "mtron/kernels/cuda/column_sums.cuh"
#include "mtron/kernels/cuda/common.cuh"
#include "mtron/kernels/cuda/cuda_ops.h"
#include "mtron/kernels/cuda/map.cuh"

namespace mtron::kernels::cuda {
namespace {

constexpr int kThreads = 256;

struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Scale {
  float s;
  __device__ float operator()(float x) const { return x * s; }
};
struct Identity {
  __device__ float operator()(float x) const { return x; }
};

__global__ void fill_kernel(float* x, float v, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] = v;
}

__global__ void to_f16_kernel(uint16_t* dst, const float* src, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = f32_to_f16_bits(src[i]);
}

__global__ void f16_to_f32_kernel(float* dst, const uint16_t* src, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = f16_bits_to_f32(src[i]);
}

__global__ void bias_add_kernel(float* out, const float* bias, int64_t N, int64_t C) {
  const int64_t n = N * C;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] += bias[i % C];
}

__global__ void scale_matrix_kernel(float* C, int64_t M, int64_t N, int64_t ldc, float beta) {
  const int64_t n = M * N;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float* c = C + (i / N) * ldc + i % N;
    *c = beta == 0.0f ? 0.0f : *c * beta;
  }
}

// Hidden dropout (DropoutRows): each thread takes runs of kDropRun features of one row, whose
// multipliers core/philox_inline.h's dropout_scales draws (two or three Philox blocks a run), so
// the mask is the CPU's bit for bit.
constexpr int kDropRun = 8;

__global__ void dropout_kernel(float* x, const int32_t* pos, int64_t rows, DropoutRows d) {
  const int64_t runs = (d.width + kDropRun - 1) / kDropRun, n = rows * runs;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < n;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = t / runs, f0 = t % runs * kDropRun;
    const int64_t len = d.width - f0 < kDropRun ? d.width - f0 : kDropRun;
    const int64_t b = (d.row0 + r) % d.B;
    float z[kDropRun];
    dropout_scales(z, d.key, uint64_t(((d.sample0 + b) * d.S + pos[r]) * d.width + f0), 1, len,
                   d.p);
    float* row = x + r * d.width + f0;
    for (int64_t f = 0; f < len; ++f) row[f] *= z[f];
  }
}

// sum_squares, pass 1: one double partial per block (squares in fp32, sums in double); elements
// [0, n8) eight at a time (16-byte loads), as map.cuh's maps.
__global__ void sum_squares_kernel(double* part, const float* x, int64_t n, int64_t n8) {
  __shared__ double red[32];
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  double s = 0;
  for (int64_t i = 8 * t; i < n8; i += 8 * stride) {
    float v[8];
    load8(v, x + i);
    MT_UNROLL
    for (int k = 0; k < 8; ++k) s += double(v[k] * v[k]);
  }
  for (int64_t i = n8 + t; i < n; i += stride) s += double(x[i] * x[i]);
  s = block_sum(s, red);
  if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// pass 2: one block adds the partials to *total.
__global__ void sum_parts_kernel(double* total, const double* part, int64_t n) {
  __shared__ double red[32];
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += part[i];
  s = block_sum(s, red);
  if (threadIdx.x == 0) *total += s;
}

}  // namespace

void add(const Ctx& ctx, float* out, const float* a, const float* b, int64_t n) {
  map2("add", stream_of(ctx), Add{}, out, a, b, n);
}

void scale_inplace(const Ctx& ctx, float* x, float s, int64_t n) {
  map1("scale_inplace", stream_of(ctx), Scale{s}, x, x, n);
}

void fill(const Ctx& ctx, float* x, float value, int64_t n) {
  launch("fill", fill_kernel, grid_for(n, kThreads), kThreads, 0, stream_of(ctx), x, value, n);
}

void convert(const Ctx& ctx, bf16* dst, const float* src, int64_t n) {
  map1("convert_to_bf16", stream_of(ctx), Identity{}, bits(dst), src, n);
}

void convert(const Ctx& ctx, float* dst, const bf16* src, int64_t n) {
  map1("convert_to_f32", stream_of(ctx), Identity{}, dst, bits(src), n);
}

void convert(const Ctx& ctx, f16* dst, const float* src, int64_t n) {
  launch("convert_to_fp16", to_f16_kernel, grid_for(n, kThreads), kThreads, 0, stream_of(ctx),
         reinterpret_cast<uint16_t*>(dst), src, n);
}

void convert(const Ctx& ctx, float* dst, const f16* src, int64_t n) {
  launch("convert_fp16_to_fp32", f16_to_f32_kernel, grid_for(n, kThreads), kThreads, 0,
         stream_of(ctx), dst, reinterpret_cast<const uint16_t*>(src), n);
}

void bias_add(const Ctx& ctx, float* out, const float* bias, int64_t N, int64_t C) {
  launch("bias_add", bias_add_kernel, grid_for(N * C, kThreads), kThreads, 0, stream_of(ctx), out,
         bias, N, C);
}

void bias_backward(const Ctx& ctx, float* dbias, const float* dout, int64_t N, int64_t C) {
  add_column_sums(stream_of(ctx), dbias, dout, N, C);
}

void bias_backward(const Ctx& ctx, float* dbias, const bf16* dout, int64_t N, int64_t C) {
  column_sums_of(stream_of(ctx), dbias,
                 ColumnsOf<uint16_t>{reinterpret_cast<const uint16_t*>(dout)}, N, C);
}

void bias_backward_narrow(
    const Ctx& ctx, float* dbias, bf16* dout16, const float* dout, int64_t N, int64_t C) {
  column_sums_of(stream_of(ctx), dbias, ColumnsOf<float>{dout, reinterpret_cast<uint16_t*>(dout16)},
                 N, C);
}

void dropout(const Ctx& ctx, float* x, const int32_t* pos, int64_t rows, const DropoutRows& d) {
  const int64_t n = rows * ((d.width + kDropRun - 1) / kDropRun);
  launch("dropout", dropout_kernel, grid_for(n, kThreads), kThreads, 0, stream_of(ctx), x, pos,
         rows, d);
}

void sum_squares(const Ctx& ctx, double* total, const float* x, int64_t n) {
  if (n <= 0) return;
  const cudaStream_t s = stream_of(ctx);
  const int64_t n8 = vector_part(n, {x});
  const unsigned blocks = map_grid(n, n8);
  Scratch part(sizeof(double) * blocks, s);
  launch("sum_squares", sum_squares_kernel, blocks, kMapThreads, 0, s, part.as<double>(), x, n, n8);
  launch("sum_parts", sum_parts_kernel, 1, kThreads, 0, s, total, part.as<double>(),
         int64_t(blocks));
}

void scale_matrix(cudaStream_t stream, float* C, int64_t M, int64_t N, int64_t ldc, float beta) {
  launch("scale_matrix", scale_matrix_kernel, grid_for(M * N, kThreads), kThreads, 0, stream, C, M,
         N, ldc, beta);
}

void add_column_sums(cudaStream_t stream, float* dst, const float* src, int64_t R, int64_t C) {
  column_sums_of(stream, dst, ColumnsOf<float>{src}, R, C);
}

}  // namespace mtron::kernels::cuda
