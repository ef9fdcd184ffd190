// CUDA cross-entropy building blocks over a logits chunk (kernels/xent.h).
//
// Stats: one block per row, one pass over the row's valid columns, 8 of them per load where the
// row is 16-byte aligned: each thread keeps the running max of what it read and the sum of
// exp(l - that max), rescaled when the max grows (once per 8 columns); then the block's max and
// each thread's sum rescaled to it, summed. Padded columns (global id >= vocab_valid) are never
// read by the stats and are written as 0 by the backward, as on the CPU.
#include "mtron/kernels/cuda/common.cuh"
#include "mtron/kernels/cuda/cuda_ops.h"

namespace mtron::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__host__ __device__ __forceinline__ int64_t valid_cols(int64_t Vl,
                                                       int64_t col_start,
                                                       int64_t vocab_valid) {
  const int64_t v = vocab_valid - col_start;
  return v < 0 ? 0 : (v > Vl ? Vl : v);
}

// The kernels take the op's arguments (kernels/xent.h).

// (m, s) += the values v[0..n): m their running max, s the sum of exp(v - m).
template <int kN>
__device__ __forceinline__ void add_exps(float& m, float& s, const float (&v)[kN], int n) {
  float mv = kNegInf;
  MT_UNROLL
  for (int i = 0; i < kN; ++i)
    if (i < n) mv = fmaxf(mv, v[i]);
  const float m_new = fmaxf(m, mv);
  if (m_new == kNegInf) return;  // nothing but -inf so far
  s = m == kNegInf ? 0.0f : s * expf(m - m_new);
  MT_UNROLL
  for (int i = 0; i < kN; ++i)
    if (i < n) s += expf(v[i] - m_new);
  m = m_new;
}

// One block per row; logits: float, or uint16_t holding bf16.
template <typename L>
__global__ void xent_stats_kernel(MT_PARAMS_OF(xent_stats, L)) {
  __shared__ float red[32];
  const int64_t r = blockIdx.x, nv = valid_cols(Vl, col_start, vocab_valid);
  if (r >= n) return;
  const L* x = logits + r * Vl;
  float m = kNegInf, s = 0;
  int64_t done = 0;  // columns below `done` go 8 at a time
  if (reinterpret_cast<uintptr_t>(x) % 16 == 0) {
    done = nv / 8 * 8;
    for (int64_t c = 8 * int64_t(threadIdx.x); c < done; c += 8 * int64_t(blockDim.x)) {
      float v[8];
      load8(v, x + c);
      add_exps(m, s, v, 8);
    }
  }
  for (int64_t c = done + threadIdx.x; c < nv; c += blockDim.x) {
    const float v[1] = {load_f32(x + c)};
    add_exps(m, s, v, 1);
  }
  const float row_m = block_max(m, red);
  s = m == kNegInf ? 0.0f : s * expf(m - row_m);
  s = block_sum(s, red);
  if (threadIdx.x == 0) {
    row_max[r] = row_m;
    row_sumexp[r] = s;
    const int64_t t = int64_t(targets[r]) - col_start;
    target_logit[r] = (t >= 0 && t < Vl) ? load_f32(x + t) : 0.0f;
  }
}

__global__ void xent_rescale_kernel(MT_PARAMS(xent_rescale)) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < n;
       r += int64_t(gridDim.x) * blockDim.x) {
    row_sumexp[r] = xent_rescaled_sumexp(row_sumexp[r], row_max[r], global_max[r]);
    row_max[r] = global_max[r];
  }
}

// One block: each thread sums its rows r = threadIdx.x + k blockDim.x, then the block's sum.
__global__ void xent_loss_sum_kernel(MT_PARAMS(xent_loss_sum)) {
  __shared__ double red[32];
  double s = 0;
  for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {
    if (!row_mask || row_mask[r] != 0.0f)
      s += xent_row_loss(row_max[r], row_sumexp[r], target_logit[r]);
  }
  s = block_sum(s, red);
  if (threadIdx.x == 0) *loss_sum += s;
}

// dlogits (T) and logits (L): float, or uint16_t holding bf16. Rows along y, columns along x
// (grid-stride loops both): a row's statistics are read once per thread, no index is divided.
template <typename T, typename L>
__global__ void xent_backward_kernel(MT_PARAMS_EXPAND(MT_PARAMS_xent_backward_in(T, L))) {
  const int64_t nv = valid_cols(Vl, col_start, vocab_valid);
  for (int64_t r = blockIdx.y; r < n; r += gridDim.y) {
    const float scale = row_scale ? row_scale[r] : 1.0f;
    const bool empty = row_max[r] == kNegInf || !(row_sumexp[r] > 0);
    const float vm = empty ? 0.0f : row_max[r];
    const float vs = empty ? 0.0f : scale / row_sumexp[r];
    const int64_t target = int64_t(targets[r]) - col_start;
    const L* x = logits + r * Vl;
    T* dx = dlogits + r * Vl;
    for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < Vl;
         c += int64_t(gridDim.x) * blockDim.x) {
      float d = 0;
      if (c < nv) {
        d = expf(load_f32(x + c) - vm) * vs;
        if (c == target) d -= scale;
      }
      store_as(dx + c, d);
    }
  }
}

// The backward's grid: columns by blocks of 4 kThreads, rows one a block along y.
dim3 backward_grid(int64_t n, int64_t Vl) {
  return dim3(grid_for(Vl, 4 * kThreads), grid_for(n, 1));
}

}  // namespace

void xent_stats(const Ctx& ctx, MT_PARAMS(xent_stats)) {
  if (n <= 0) return;
  launch("xent_stats", xent_stats_kernel<float>, unsigned(n), kThreads, 0, stream_of(ctx), row_max,
         row_sumexp, target_logit, logits, targets, n, Vl, col_start, vocab_valid);
}

void xent_stats(const Ctx& ctx, MT_PARAMS(xent_stats_bf16)) {
  if (n <= 0) return;
  launch("xent_stats_bf16", xent_stats_kernel<uint16_t>, unsigned(n), kThreads, 0, stream_of(ctx),
         row_max, row_sumexp, target_logit, reinterpret_cast<const uint16_t*>(logits), targets, n,
         Vl, col_start, vocab_valid);
}

void xent_rescale(const Ctx& ctx, MT_PARAMS(xent_rescale)) {
  if (n <= 0) return;
  launch("xent_rescale", xent_rescale_kernel, grid_for(n, kThreads), kThreads, 0, stream_of(ctx),
         row_max, row_sumexp, global_max, n);
}

void xent_loss_sum(const Ctx& ctx, MT_PARAMS(xent_loss_sum)) {
  if (n <= 0) return;
  launch("xent_loss_sum", xent_loss_sum_kernel, 1, kThreads, 0, stream_of(ctx), loss_sum, row_max,
         row_sumexp, target_logit, row_mask, n);
}

void xent_backward(const Ctx& ctx, MT_PARAMS(xent_backward)) {
  launch("xent_backward", xent_backward_kernel<float, float>, backward_grid(n, Vl), kThreads, 0,
         stream_of(ctx), dlogits, logits, targets, row_max, row_sumexp, row_scale, n, Vl, col_start,
         vocab_valid);
}

void xent_backward(const Ctx& ctx, MT_PARAMS(xent_backward_bf16)) {
  launch("xent_backward_bf16", xent_backward_kernel<uint16_t, float>, backward_grid(n, Vl),
         kThreads, 0, stream_of(ctx), reinterpret_cast<uint16_t*>(dlogits), logits, targets,
         row_max, row_sumexp, row_scale, n, Vl, col_start, vocab_valid);
}

void xent_backward(const Ctx& ctx, MT_PARAMS(xent_backward_bf16_logits)) {
  launch("xent_backward_bf16_logits", xent_backward_kernel<uint16_t, uint16_t>,
         backward_grid(n, Vl), kThreads, 0, stream_of(ctx), reinterpret_cast<uint16_t*>(dlogits),
         reinterpret_cast<const uint16_t*>(logits), targets, row_max, row_sumexp, row_scale, n, Vl,
         col_start, vocab_valid);
}

}  // namespace mtron::kernels::cuda
