// CUDA embedding lookup and its deterministic backward (kernels/embedding.h).
//
// Backward: the token ids are sorted stably (CUB radix sort, keys = ids, values = token index),
// so the tokens of each id form one run in token order. One block per run start adds the run's
// rows of dout into the table row, column by column, in token order, starting from the table's
// value: the same sequence of fp32 additions as the CPU kernel, so the result is bit-identical
// to it and independent of the GPU. No atomics.
#include <cstdint>

#ifdef MTRON_CUDA_SIM
#include <algorithm>
#include <numeric>
#include <vector>
#else
#include <cub/device/device_radix_sort.cuh>
#endif

#include "mtron/core/error.h"
#include "mtron/kernels/cuda/common.cuh"
#include "mtron/kernels/cuda/cuda_ops.h"

namespace mtron::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRunThreads = 128;

// The op's arguments; one thread per output element.
__global__ void embedding_forward_kernel(MT_PARAMS(embedding_forward)) {
  const int64_t n_items = N * C;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_items;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / C, c = i % C;
    const int64_t r = int64_t(ids[n]) - row_start;
    const float val = (r >= 0 && r < rows) ? table[r * C + c] : 0.0f;
    out[i] = accumulate ? out[i] + val : val;
  }
}

// Block p handles the run of equal ids that starts at sorted position p (others return).
__global__ void embedding_backward_kernel(float* dtable,
                                          const float* dout,
                                          const int32_t* sorted_ids,
                                          const int32_t* sorted_tokens,
                                          int64_t N,
                                          int64_t C,
                                          int64_t row_start,
                                          int64_t rows) {
  const int64_t p = blockIdx.x;
  const int32_t id = sorted_ids[p];
  if (p > 0 && sorted_ids[p - 1] == id) return;
  const int64_t r = int64_t(id) - row_start;
  if (r < 0 || r >= rows) return;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = dtable[r * C + c];
    for (int64_t q = p; q < N && sorted_ids[q] == id; ++q)
      acc += dout[int64_t(sorted_tokens[q]) * C + c];
    dtable[r * C + c] = acc;
  }
}

__global__ void iota_kernel(int32_t* x, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] = int32_t(i);
}

// Stable sort of (ids, token index) pairs by id.
void sort_ids(int32_t* sorted_ids,
              int32_t* sorted_tokens,
              const int32_t* ids,
              int32_t* tokens,
              int64_t N,
              cudaStream_t s) {
  launch("embedding_iota", iota_kernel, grid_for(N, kThreads), kThreads, 0, s, tokens, N);
#ifdef MTRON_CUDA_SIM
  // The emulation's device memory is host memory, readable while `access` lives.
  sim::check_device_pointer("embedding_backward (ids)", ids);
  const sim::DeviceAccess access;
  std::vector<int32_t> order(static_cast<size_t>(N));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return ids[a] < ids[b]; });
  for (int64_t i = 0; i < N; ++i) {
    sorted_ids[i] = ids[order[size_t(i)]];
    sorted_tokens[i] = tokens[order[size_t(i)]];
  }
#else
  size_t temp_bytes = 0;
  MT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, ids, sorted_ids, tokens,
                                                sorted_tokens, int(N), 0, 32, s));
  Scratch temp(temp_bytes, s);
  MT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.as<void>(), temp_bytes, ids, sorted_ids,
                                                tokens, sorted_tokens, int(N), 0, 32, s));
#endif
}

}  // namespace

void embedding_forward(const Ctx& ctx, MT_PARAMS(embedding_forward)) {
  launch("embedding_forward", embedding_forward_kernel, grid_for(N * C, kThreads), kThreads, 0,
         stream_of(ctx), out, ids, table, N, C, row_start, rows, accumulate);
}

void embedding_backward(const Ctx& ctx, MT_PARAMS(embedding_backward)) {
  if (N <= 0 || C <= 0) return;
  MT_CHECK(N < (int64_t(1) << 31), "embedding_backward: ", N, " tokens (at most 2^31 - 1 on CUDA)");
  const cudaStream_t s = stream_of(ctx);
  Scratch buf(sizeof(int32_t) * size_t(3 * N), s);
  int32_t* tokens = buf.as<int32_t>();
  int32_t* sorted_ids = tokens + N;
  int32_t* sorted_tokens = tokens + 2 * N;
  sort_ids(sorted_ids, sorted_tokens, ids, tokens, N, s);
  launch("embedding_backward", embedding_backward_kernel, unsigned(N), kRunThreads, 0, s, dtable,
         dout, sorted_ids, sorted_tokens, N, C, row_start, rows);
}

}  // namespace mtron::kernels::cuda
