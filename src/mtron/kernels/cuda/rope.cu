// CUDA fused-QKV split/merge, multi-latent attention's K/V split/merge and rotary position
// embedding (kernels/rope.h).
//
// Split and merge are pure gathers, one thread per element of the fused qkv[N, G, hpg + 2, D]
// (reads and writes contiguous along D). RoPE follows the CPU kernel's arithmetic: fp32
// inv_freq_i (RopeFreq::inv_freq), angle = float(pos) * inv_freq_i, cos/sin of the fp32 angle
// times mscale, the rotation written with the same fused multiply-adds.
#include "mtron/kernels/cuda/common.cuh"
#include "mtron/kernels/cuda/cuda_ops.h"

namespace mtron::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// Where element i of qkv[N, G, hpg + 2, D] goes: dst is q, k or v, at index *at.
struct QkvPlace {
  int which;  // 0 = q, 1 = k, 2 = v
  int64_t at;
};

__device__ __forceinline__ QkvPlace qkv_place(int64_t i, int64_t G, int64_t hpg, int64_t D) {
  const int64_t d = i % D;
  const int64_t t = i / D;
  const int64_t j = t % (hpg + 2);
  const int64_t ng = t / (hpg + 2);  // n * G + g
  const int64_t g = ng % G, n = ng / G;
  if (j < hpg) return {0, ((n * G + g) * hpg + j) * D + d};  // q[n, g*hpg + j, d], H = G*hpg
  return {j == hpg ? 1 : 2, ng * D + d};
}

// The kernels take the op's arguments (kernels/rope.h); split and merge: one thread per element
// of qkv.
__global__ void qkv_split_kernel(MT_PARAMS(qkv_split)) {
  const int64_t n = N * G * (hpg + 2) * D;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const QkvPlace p = qkv_place(i, G, hpg, D);
    float* dst = p.which == 0 ? q : (p.which == 1 ? k : v);
    dst[p.at] = qkv[i];
  }
}

// dqkv: float, or uint16_t holding bf16
template <typename T>
__global__ void qkv_merge_kernel(MT_PARAMS_OF(qkv_merge_grad, T)) {
  const int64_t n = N * G * (hpg + 2) * D;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const QkvPlace p = qkv_place(i, G, hpg, D);
    const float* src = p.which == 0 ? dq : (p.which == 1 ? dk : dv);
    store_as(dqkv + i, src[p.at]);
  }
}

// mla_kv_split: one thread per element of k[N, H, Dn + Dr] and v[N, H, Dv] (k's first).
__global__ void mla_kv_split_kernel(MT_PARAMS(mla_kv_split)) {
  const int64_t Dk = Dn + Dr, nk = N * H * Dk, n = nk + N * H * Dv;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    if (i < nk) {
      const int64_t d = i % Dk, nh = i / Dk;
      k[i] = d < Dn ? kv[nh * (Dn + Dv) + d] : kpe[nh / H * Dr + d - Dn];
    } else {
      const int64_t e = i - nk, d = e % Dv, nh = e / Dv;
      v[e] = kv[nh * (Dn + Dv) + Dn + d];
    }
  }
}

// mla_kv_merge_grad: one thread per element of dkv[N, H, Dn + Dv] and of dkpe[N, Dr] (each
// dkpe element sums its token's H heads in head order).
__global__ void mla_kv_merge_kernel(MT_PARAMS(mla_kv_merge_grad)) {
  const int64_t Dk = Dn + Dr, nkv = N * H * (Dn + Dv), n = nkv + N * Dr;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    if (i < nkv) {
      const int64_t d = i % (Dn + Dv), nh = i / (Dn + Dv);
      dkv[i] = d < Dn ? dk[nh * Dk + d] : dv[nh * Dv + d - Dn];
    } else {
      const int64_t e = i - nkv, d = e % Dr, t = e / Dr;
      float sum = 0;
      for (int64_t h = 0; h < H; ++h) sum += dk[(t * H + h) * Dk + Dn + d];
      dkpe[e] = sum;
    }
  }
}

// One thread per (token, head, i < R/2), R = rot_dim. sign = +1 rotates by +angle, -1 by -angle
// (the adjoint).
template <typename T>
__global__ void rope_kernel(MT_PARAMS_OF(rope_forward, T), float sign) {
  const int64_t R = rot_dim, half = R / 2;
  const int64_t n_items = N * nh * half;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < n_items;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = t % half;
    const int64_t row = t / half;  // n * nh + h
    if (!rope_rotates(row % nh, group)) continue;
    const int64_t n = row / nh;
    const float angle = float(pos[n]) * f.inv_freq(i, R);
    const float c = cosf(angle) * f.mscale, s = sign * sinf(angle) * f.mscale;
    T* x1 = x + row * D + f.pair_first(i);
    T* x2 = x1 + f.pair_step(R);
    const float a = load_f32(x1), b = load_f32(x2);
    store_as(x1, fmaf(-b, s, a * c));
    store_as(x2, fmaf(a, s, b * c));
  }
}

}  // namespace

void qkv_split(const Ctx& ctx, MT_PARAMS(qkv_split)) {
  const int64_t n = N * G * (hpg + 2) * D;
  launch("qkv_split", qkv_split_kernel, grid_for(n, kThreads), kThreads, 0, stream_of(ctx), q, k, v,
         qkv, N, G, hpg, D);
}

void qkv_merge_grad(const Ctx& ctx, MT_PARAMS(qkv_merge_grad)) {
  const int64_t n = N * G * (hpg + 2) * D;
  launch("qkv_merge_grad", qkv_merge_kernel<float>, grid_for(n, kThreads), kThreads, 0,
         stream_of(ctx), dqkv, dq, dk, dv, N, G, hpg, D);
}

void qkv_merge_grad(const Ctx& ctx, MT_PARAMS(qkv_merge_grad_bf16)) {
  const int64_t n = N * G * (hpg + 2) * D;
  launch("qkv_merge_grad_bf16", qkv_merge_kernel<uint16_t>, grid_for(n, kThreads), kThreads, 0,
         stream_of(ctx), reinterpret_cast<uint16_t*>(dqkv), dq, dk, dv, N, G, hpg, D);
}

void mla_kv_split(const Ctx& ctx, MT_PARAMS(mla_kv_split)) {
  const int64_t n = N * H * (Dn + Dr + Dv);
  launch("mla_kv_split", mla_kv_split_kernel, grid_for(n, kThreads), kThreads, 0, stream_of(ctx), k,
         v, kv, kpe, N, H, Dn, Dr, Dv);
}

void mla_kv_merge_grad(const Ctx& ctx, MT_PARAMS(mla_kv_merge_grad)) {
  const int64_t n = N * H * (Dn + Dv) + N * Dr;
  launch("mla_kv_merge_grad", mla_kv_merge_kernel, grid_for(n, kThreads), kThreads, 0,
         stream_of(ctx), dkv, dkpe, dk, dv, N, H, Dn, Dr, Dv);
}

namespace {
template <typename T>
void rope_launch(const Ctx& ctx, const char* name, MT_PARAMS_OF(rope_forward, T), float sign) {
  launch(name, rope_kernel<T>, grid_for(N * nh * (rot_dim / 2), kThreads), kThreads, 0,
         stream_of(ctx), x, pos, N, nh, D, rot_dim, f, group, sign);
}
}  // namespace

void rope_forward(const Ctx& ctx, MT_PARAMS(rope_forward)) {
  rope_launch(ctx, "rope_forward", x, pos, N, nh, D, rot_dim, f, group, 1.0f);
}
void rope_forward(const Ctx& ctx, MT_PARAMS(rope_forward_bf16)) {
  rope_launch(ctx, "rope_forward_bf16", bits(x), pos, N, nh, D, rot_dim, f, group, 1.0f);
}
void rope_backward(const Ctx& ctx, MT_PARAMS(rope_backward)) {
  rope_launch(ctx, "rope_backward", dx, pos, N, nh, D, rot_dim, f, group, -1.0f);
}
void rope_backward(const Ctx& ctx, MT_PARAMS(rope_backward_bf16)) {
  rope_launch(ctx, "rope_backward_bf16", bits(dx), pos, N, nh, D, rot_dim, f, group, -1.0f);
}

}  // namespace mtron::kernels::cuda
