// CUDA GELU (tanh approximation; gelu.cuh), squared ReLU and SwiGLU (kernels/activation.h),
// elementwise.
#include <initializer_list>

#include "mtron/kernels/cuda/column_sums.cuh"
#include "mtron/kernels/cuda/common.cuh"
#include "mtron/kernels/cuda/cuda_ops.h"
#include "mtron/kernels/cuda/gelu.cuh"
#include "mtron/kernels/cuda/map.cuh"

namespace mtron::kernels::cuda {
namespace {

constexpr int kThreads = 256;

struct Gelu {
  __device__ float operator()(float x) const { return gelu(x); }
};

struct GeluGrad {
  __device__ float operator()(float x, float dy) const { return gelu_grad(x, dy); }
};

// Squared ReLU; a NaN input stays NaN (x < 0 is false), as torch's relu.
__device__ __forceinline__ float relu(float x) {
  return x < 0.0f ? 0.0f : x;
}

struct Relu2 {
  __device__ float operator()(float x) const {
    const float r = relu(x);
    return r * r;
  }
};

struct Relu2Grad {
  __device__ float operator()(float x, float dy) const { return (2.0f * relu(x)) * dy; }
};

// gelu_backward_bias's values for column_sums_of: the gradient written as bf16, its bf16 value
// summed; inp and dout (I) float, or uint16_t holding bf16.
template <typename I>
struct GeluGradBf16 {
  uint16_t* dinp;
  const I* inp;
  const I* dout;
  __device__ float operator()(int64_t i) const {
    const uint16_t b = f32_to_bf16_bits(gelu_grad(load_f32(inp + i), load_f32(dout + i)));
    dinp[i] = b;
    return bf16_bits_to_f32(b);
  }
  __device__ void load8(int64_t i, float (&v)[8]) const {
    float dy[8];
    cuda::load8(v, inp + i);
    cuda::load8(dy, dout + i);
    MT_UNROLL
    for (int k = 0; k < 8; ++k) v[k] = bf16_bits_to_f32(f32_to_bf16_bits(gelu_grad(v[k], dy[k])));
    store8(dinp + i, v);  // v holds bf16 values: rounded to themselves
  }
  bool aligned() const { return aligned16({dinp, inp, dout}); }
};

// T: float, or uint16_t holding bf16 (inputs widened, outputs rounded once). Rows along y
// (grid-stride), columns along x in groups of W (8: 16-byte accesses, 1: scalar ones), so no
// index is divided; a row's gate and up halves are read at the same column.
template <int W, typename T>
__global__ void swiglu_forward_kernel(T* out, const T* inp, int64_t N, int64_t F) {
  const int64_t c = W * (int64_t(blockIdx.x) * blockDim.x + threadIdx.x);
  if (c >= F) return;
  for (int64_t r = blockIdx.y; r < N; r += gridDim.y) {
    const T* x = inp + r * 2 * F + c;
    float g[W], u[W];
    load_n<W>(g, x);
    load_n<W>(u, x + F);
    MT_UNROLL
    for (int k = 0; k < W; ++k) g[k] = g[k] * sigmoid(g[k]) * u[k];
    store_n<W>(out + r * F + c, g);
  }
}

// d gate = dout up s (1 + g (1 - s)),  d up = dout g s   (s = sigmoid(g))
template <int W, typename T>
__global__ void swiglu_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t N, int64_t F) {
  const int64_t c = W * (int64_t(blockIdx.x) * blockDim.x + threadIdx.x);
  if (c >= F) return;
  for (int64_t r = blockIdx.y; r < N; r += gridDim.y) {
    const T* x = inp + r * 2 * F + c;
    float g[W], u[W], d[W];
    load_n<W>(g, x);
    load_n<W>(u, x + F);
    load_n<W>(d, dout + r * F + c);
    MT_UNROLL
    for (int k = 0; k < W; ++k) {
      const float s = sigmoid(g[k]);
      const float dg = (d[k] * u[k]) * (s * fmaf(g[k], 1.0f - s, 1.0f));
      u[k] = d[k] * (g[k] * s);
      g[k] = dg;
    }
    T* dx = dinp + r * 2 * F + c;
    store_n<W>(dx, g);
    store_n<W>(dx + F, u);
  }
}

// The SwiGLU kernels' launch over N rows of F outputs: W = 8 where F is a multiple of 8 and every
// tensor 16-byte aligned (a row's halves then are too), else 1; column groups along x (up to
// kThreads a block), rows along y.
struct SwigluGrid {
  bool vec;
  dim3 grid;
  int threads;
};
SwigluGrid swiglu_grid(int64_t N, int64_t F, std::initializer_list<const void*> ptrs) {
  const bool vec = rows_by8(F, ptrs);
  const int64_t groups = vec ? F / 8 : F;
  const int threads = row_threads(groups, kThreads);
  return {vec, dim3(unsigned((groups + threads - 1) / threads), grid_for(N, 1)), threads};
}

template <typename T>
void swiglu_forward_as(
    const char* name, cudaStream_t st, T* out, const T* inp, int64_t N, int64_t F) {
  if (N <= 0 || F <= 0) return;
  const SwigluGrid g = swiglu_grid(N, F, {out, inp});
  launch(name, g.vec ? swiglu_forward_kernel<8, T> : swiglu_forward_kernel<1, T>, g.grid, g.threads,
         0, st, out, inp, N, F);
}

template <typename T>
void swiglu_backward_as(
    const char* name, cudaStream_t st, T* dinp, const T* inp, const T* dout, int64_t N, int64_t F) {
  if (N <= 0 || F <= 0) return;
  const SwigluGrid g = swiglu_grid(N, F, {dinp, inp, dout});
  launch(name, g.vec ? swiglu_backward_kernel<8, T> : swiglu_backward_kernel<1, T>, g.grid,
         g.threads, 0, st, dinp, inp, dout, N, F);
}

}  // namespace

void gelu_forward(const Ctx& ctx, float* out, const float* inp, int64_t n) {
  map1("gelu_forward", stream_of(ctx), Gelu{}, out, inp, n);
}

void gelu_forward(const Ctx& ctx, bf16* out, const float* inp, int64_t n) {
  map1("gelu_forward_bf16", stream_of(ctx), Gelu{}, bits(out), inp, n);
}

void gelu_forward(const Ctx& ctx, bf16* out, const bf16* inp, int64_t n) {
  map1("gelu_forward_bf16_in", stream_of(ctx), Gelu{}, bits(out), bits(inp), n);
}

void gelu_backward(const Ctx& ctx, float* dinp, const float* inp, const float* dout, int64_t n) {
  map2("gelu_backward", stream_of(ctx), GeluGrad{}, dinp, inp, dout, n);
}

void gelu_backward(const Ctx& ctx, bf16* dinp, const float* inp, const float* dout, int64_t n) {
  map2("gelu_backward_bf16", stream_of(ctx), GeluGrad{}, bits(dinp), inp, dout, n);
}

void gelu_backward(const Ctx& ctx, bf16* dinp, const bf16* inp, const bf16* dout, int64_t n) {
  map2("gelu_backward_bf16_in", stream_of(ctx), GeluGrad{}, bits(dinp), bits(inp), bits(dout), n);
}

void relu2_forward(const Ctx& ctx, float* out, const float* inp, int64_t n) {
  map1("relu2_forward", stream_of(ctx), Relu2{}, out, inp, n);
}

void relu2_forward(const Ctx& ctx, bf16* out, const float* inp, int64_t n) {
  map1("relu2_forward_bf16", stream_of(ctx), Relu2{}, bits(out), inp, n);
}

void relu2_forward(const Ctx& ctx, bf16* out, const bf16* inp, int64_t n) {
  map1("relu2_forward_bf16_in", stream_of(ctx), Relu2{}, bits(out), bits(inp), n);
}

void relu2_backward(const Ctx& ctx, float* dinp, const float* inp, const float* dout, int64_t n) {
  map2("relu2_backward", stream_of(ctx), Relu2Grad{}, dinp, inp, dout, n);
}

void relu2_backward(const Ctx& ctx, bf16* dinp, const float* inp, const float* dout, int64_t n) {
  map2("relu2_backward_bf16", stream_of(ctx), Relu2Grad{}, bits(dinp), inp, dout, n);
}

void relu2_backward(const Ctx& ctx, bf16* dinp, const bf16* inp, const bf16* dout, int64_t n) {
  map2("relu2_backward_bf16_in", stream_of(ctx), Relu2Grad{}, bits(dinp), bits(inp), bits(dout), n);
}

void gelu_backward_bias(const Ctx& ctx,
                        float* dbias,
                        bf16* dinp,
                        const float* inp,
                        const float* dout,
                        int64_t N,
                        int64_t C) {
  column_sums_of(stream_of(ctx), dbias,
                 GeluGradBf16<float>{reinterpret_cast<uint16_t*>(dinp), inp, dout}, N, C);
}

void gelu_backward_bias(const Ctx& ctx,
                        float* dbias,
                        bf16* dinp,
                        const bf16* inp,
                        const bf16* dout,
                        int64_t N,
                        int64_t C) {
  column_sums_of(stream_of(ctx), dbias,
                 GeluGradBf16<uint16_t>{reinterpret_cast<uint16_t*>(dinp),
                                        reinterpret_cast<const uint16_t*>(inp),
                                        reinterpret_cast<const uint16_t*>(dout)},
                 N, C);
}

void swiglu_forward(const Ctx& ctx, float* out, const float* inp, int64_t N, int64_t F) {
  swiglu_forward_as("swiglu_forward", stream_of(ctx), out, inp, N, F);
}

void swiglu_forward(const Ctx& ctx, bf16* out, const bf16* inp, int64_t N, int64_t F) {
  swiglu_forward_as("swiglu_forward_bf16_in", stream_of(ctx), bits(out), bits(inp), N, F);
}

void swiglu_backward(
    const Ctx& ctx, float* dinp, const float* inp, const float* dout, int64_t N, int64_t F) {
  swiglu_backward_as("swiglu_backward", stream_of(ctx), dinp, inp, dout, N, F);
}

void swiglu_backward(
    const Ctx& ctx, bf16* dinp, const bf16* inp, const bf16* dout, int64_t N, int64_t F) {
  swiglu_backward_as("swiglu_backward_bf16_in", stream_of(ctx), bits(dinp), bits(inp), bits(dout),
                     N, F);
}

}  // namespace mtron::kernels::cuda
