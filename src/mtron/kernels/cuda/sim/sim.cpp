// The CPU emulation of the CUDA execution model (see sim.h).
#include "mtron/kernels/cuda/sim/sim.h"

#include <barrier>
#include <memory>
#include <thread>
#include <vector>

#include "mtron/core/error.h"

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace mtron::sim {
namespace {

struct Block {
  explicit Block(int nthreads, size_t smem_bytes)
      : sync(nthreads), smem(smem_bytes + 16), exchange(size_t(nthreads)) {
    for (int w = 0; w < nthreads / 32; ++w) warps.push_back(std::make_unique<std::barrier<>>(32));
  }
  std::barrier<> sync;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<unsigned char> smem;
  std::vector<uint64_t> exchange;
};

thread_local Block* tl_block = nullptr;
thread_local int tl_tid = 0;

Block& block() {
  MT_ASSERT(tl_block, "CUDA emulation: device function called outside sim::launch");
  return *tl_block;
}

}  // namespace

void launch(dim3 grid, dim3 block_dim, size_t smem_bytes, const std::function<void()>& kernel) {
  const int nthreads = int(block_dim.x * block_dim.y * block_dim.z);
  MT_ASSERT(nthreads > 0 && nthreads % 32 == 0 && nthreads <= 1024, "CUDA emulation: block of ",
            nthreads, " threads (need a multiple of 32, <= 1024)");
  const int64_t nblocks = int64_t(grid.x) * grid.y * grid.z;
  // One OS thread per CUDA thread for the whole grid; blocks run one after another. Between
  // blocks every thread meets at `next`, whose completion step (run once, with all threads
  // waiting) makes the next block's state: fresh barriers, so threads that returned early from
  // one block take part again in the next.
  int64_t index = 0;
  auto current = std::make_unique<Block>(nthreads, smem_bytes);
  auto advance = [&]() noexcept {
    if (++index < nblocks) current = std::make_unique<Block>(nthreads, smem_bytes);
  };
  std::barrier next(nthreads, advance);
  std::vector<std::thread> threads;
  threads.reserve(size_t(nthreads));
  for (int t = 0; t < nthreads; ++t) {
    threads.emplace_back([&, t] {
      tl_tid = t;
      gridDim = grid;
      blockDim = block_dim;
      threadIdx = {unsigned(t) % block_dim.x, (unsigned(t) / block_dim.x) % block_dim.y,
                   unsigned(t) / (block_dim.x * block_dim.y)};
      while (index < nblocks) {
        Block& b = *current;
        tl_block = &b;
        blockIdx = {unsigned(index % grid.x), unsigned(index / grid.x % grid.y),
                    unsigned(index / (int64_t(grid.x) * grid.y))};
        kernel();
        // A thread that has returned no longer takes part in the block's barriers (as on the
        // GPU).
        b.warps[size_t(t / 32)]->arrive_and_drop();
        b.sync.arrive_and_drop();
        tl_block = nullptr;
        next.arrive_and_wait();
      }
    });
  }
  for (auto& th : threads) th.join();
}

void sync_block() {
  block().sync.arrive_and_wait();
}

void sync_warp() {
  block().warps[size_t(tl_tid / 32)]->arrive_and_wait();
}

unsigned char* dynamic_smem() {
  // 16-byte aligned, as CUDA's dynamic shared memory
  auto addr = reinterpret_cast<uintptr_t>(block().smem.data());
  return block().smem.data() + ((16 - addr % 16) % 16);
}

uint64_t warp_exchange(uint64_t v, int src_lane) {
  Block& b = block();
  const int warp = tl_tid / 32;
  b.exchange[size_t(tl_tid)] = v;
  b.warps[size_t(warp)]->arrive_and_wait();
  const uint64_t r = b.exchange[size_t(warp * 32 + src_lane)];
  b.warps[size_t(warp)]->arrive_and_wait();
  return r;
}

}  // namespace mtron::sim
