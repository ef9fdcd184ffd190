// The CPU emulation of the CUDA execution model (see sim.h).
//
// Each CUDA thread of a block is a fiber on the calling OS thread; a block runs until every
// fiber has returned or waits at a barrier, then the barriers whose live threads have all
// arrived open (warp barriers first, then the block's), and so on. On x86-64 a fiber switch is a
// few instructions (switch_stack below: callee-saved registers and the FP control words, no
// system call; ucontext's swapcontext makes one to save the signal mask, which costs
// microseconds in a sandbox); elsewhere, and under AddressSanitizer (which follows ucontext's
// stack switches), it is swapcontext. No other core is involved, so the emulation's speed does
// not depend on the machine's load, and it is deterministic.
#include "mtron/kernels/cuda/sim/sim.h"

#include <sys/mman.h>
#include <ucontext.h>

#include <bit>
#include <cstring>

#include <vector>

#include "mtron/core/error.h"

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define MTRON_SIM_ASM_SWITCH 1
// mtron_sim_switch(from, to): pushes the callee-saved registers and the MXCSR / x87 control
// words on the current stack, saves the stack pointer in *from, switches to `to` and pops the
// same from there, returning into the context that saved it (or into a new fiber's entry).
extern "C" void mtron_sim_switch(void** from, void* to);
asm(R"(
  .text
  .globl mtron_sim_switch
  .type mtron_sim_switch, @function
mtron_sim_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size mtron_sim_switch, .-mtron_sim_switch
  .section .note.GNU-stack, "", @progbits
  .text
)");
#endif

namespace mtron::sim {
namespace {

constexpr size_t kStackBytes = size_t(256) << 10;  // per CUDA thread (kernels keep small frames)

enum class State { kRunnable, kAtBlock, kAtWarp, kDone };

// A suspended execution context: a saved stack pointer, or a ucontext.
struct Context {
#ifdef MTRON_SIM_ASM_SWITCH
  void* sp = nullptr;
#else
  ucontext_t uc;
#endif
};

void switch_context(Context& from, Context& to) {
#ifdef MTRON_SIM_ASM_SWITCH
  mtron_sim_switch(&from.sp, to.sp);
#else
  swapcontext(&from.uc, &to.uc);
#endif
}

struct Fiber {
  Context ctx;
  State state = State::kRunnable;
};

// The block being run on this OS thread.
struct Block {
  Context scheduler;
  std::vector<Fiber> fibers;
  std::vector<unsigned char> smem;
  std::vector<uint64_t> exchange;
  std::vector<uint32_t> mma;  // 6 words per thread: its A and B fragment registers
  const std::function<void()>* kernel = nullptr;
  int current = 0;
};

thread_local Block* tl_block = nullptr;
// Stacks are kept for the thread's later launches (mmap'd: untouched pages cost nothing).
thread_local std::vector<void*> tl_stacks;

Block& block() {
  MT_ASSERT(tl_block, "CUDA emulation: device function called outside sim::launch");
  return *tl_block;
}

void set_thread_index(int t) {
  threadIdx = {unsigned(t) % blockDim.x, (unsigned(t) / blockDim.x) % blockDim.y,
               unsigned(t) / (blockDim.x * blockDim.y)};
}

[[noreturn]] void fiber_main() {
  Block& b = block();
  (*b.kernel)();
  Fiber& f = b.fibers[size_t(b.current)];
  f.state = State::kDone;
  switch_context(f.ctx, b.scheduler);  // never resumed
  __builtin_unreachable();
}

// Suspends the running fiber in `s` until the scheduler opens its barrier.
void wait_at(State s) {
  Block& b = block();
  Fiber& f = b.fibers[size_t(b.current)];
  f.state = s;
  switch_context(f.ctx, b.scheduler);
}

// Readies f to run fiber_main on `stack`. (getcontext returns twice: kept out of launch, whose
// locals it would otherwise put at risk.)
__attribute__((noinline)) void make_fiber(Fiber& f, void* stack) {
  f.state = State::kRunnable;
#ifdef MTRON_SIM_ASM_SWITCH
  // The frame mtron_sim_switch pops: control words, r15..rbp (zero), then fiber_main as the
  // return address, in a slot 16-byte aligned (top - 16) so that fiber_main starts with the
  // stack alignment of a call.
  auto* top = static_cast<uint64_t*>(stack) + kStackBytes / sizeof(uint64_t);
  uint64_t* sp = top - 9;
  uint32_t mxcsr = 0;
  uint16_t fpucw = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpucw));
  std::memset(sp, 0, 8 * sizeof(uint64_t));
  std::memcpy(sp, &mxcsr, 4);
  std::memcpy(reinterpret_cast<char*>(sp) + 4, &fpucw, 2);
  sp[7] = reinterpret_cast<uint64_t>(&fiber_main);
  f.ctx.sp = sp;
#else
  getcontext(&f.ctx.uc);
  f.ctx.uc.uc_stack.ss_sp = stack;
  f.ctx.uc.uc_stack.ss_size = kStackBytes;
  f.ctx.uc.uc_link = nullptr;
  makecontext(&f.ctx.uc, fiber_main, 0);
#endif
}

__attribute__((noinline)) void resume(Block& b, int t) {
  b.current = t;
  set_thread_index(t);
  switch_context(b.scheduler, b.fibers[size_t(t)].ctx);
}

// Opens the barriers all of whose live threads wait at them; false if none could open.
bool open_barriers(Block& b) {
  bool opened = false;
  const int n = int(b.fibers.size());
  for (int w = 0; w < n / 32; ++w) {
    bool all = true, any = false;
    for (int t = w * 32; t < w * 32 + 32; ++t) {
      const State s = b.fibers[size_t(t)].state;
      if (s == State::kDone) continue;
      any = true;
      all = all && s == State::kAtWarp;
    }
    if (!any || !all) continue;
    for (int t = w * 32; t < w * 32 + 32; ++t) {
      if (b.fibers[size_t(t)].state == State::kAtWarp) b.fibers[size_t(t)].state = State::kRunnable;
    }
    opened = true;
  }
  if (opened) return true;
  bool all = true;
  for (const Fiber& f : b.fibers)
    all = all && (f.state == State::kDone || f.state == State::kAtBlock);
  if (!all) return false;
  for (Fiber& f : b.fibers) {
    if (f.state == State::kAtBlock) {
      f.state = State::kRunnable;
      opened = true;
    }
  }
  return opened;
}

}  // namespace

void launch(dim3 grid, dim3 block_dim, size_t smem_bytes, const std::function<void()>& kernel) {
  const int nthreads = int(block_dim.x * block_dim.y * block_dim.z);
  MT_ASSERT(nthreads > 0 && nthreads % 32 == 0 && nthreads <= 1024, "CUDA emulation: block of ",
            nthreads, " threads (need a multiple of 32, <= 1024)");
  MT_ASSERT(!tl_block, "CUDA emulation: launch from device code");
  const int64_t nblocks = int64_t(grid.x) * grid.y * grid.z;
  const DeviceAccess access;
  while (tl_stacks.size() < size_t(nthreads)) {
    void* s = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    MT_ASSERT(s != MAP_FAILED, "CUDA emulation: no memory for a thread stack");
    tl_stacks.push_back(s);
  }
  Block b;
  b.fibers.resize(size_t(nthreads));
  b.smem.resize(smem_bytes + 16);
  b.exchange.resize(size_t(nthreads));
  b.mma.resize(size_t(nthreads) * 6);
  b.kernel = &kernel;
  gridDim = grid;
  blockDim = block_dim;
  tl_block = &b;
  for (int64_t index = 0; index < nblocks; ++index) {
    blockIdx = {unsigned(index % grid.x), unsigned(index / grid.x % grid.y),
                unsigned(index / (int64_t(grid.x) * grid.y))};
    for (int t = 0; t < nthreads; ++t) make_fiber(b.fibers[size_t(t)], tl_stacks[size_t(t)]);
    for (;;) {
      for (int t = 0; t < nthreads; ++t) {
        if (b.fibers[size_t(t)].state == State::kRunnable) resume(b, t);
      }
      bool done = true;
      for (const Fiber& f : b.fibers) done = done && f.state == State::kDone;
      if (done) break;
      MT_ASSERT(open_barriers(b), "CUDA emulation: block (", blockIdx.x, ", ", blockIdx.y, ", ",
                blockIdx.z, ") deadlocks: its threads wait at different barriers");
    }
  }
  tl_block = nullptr;
}

void sync_block() {
  wait_at(State::kAtBlock);
}

void sync_warp() {
  wait_at(State::kAtWarp);
}

unsigned char* dynamic_smem() {
  // 16-byte aligned, as CUDA's dynamic shared memory
  auto addr = reinterpret_cast<uintptr_t>(block().smem.data());
  return block().smem.data() + ((16 - addr % 16) % 16);
}

uint64_t warp_exchange(uint64_t v, int src_lane) {
  Block& b = block();
  const int tid = b.current;
  const int warp = tid / 32;
  b.exchange[size_t(tid)] = v;
  sync_warp();
  const uint64_t r = b.exchange[size_t(warp * 32 + src_lane)];
  sync_warp();
  return r;
}

// The PTX ISA's fragment layout of mma.m16n8k16 (bf16 A row-major, B column-major, f32 C):
// lane = 4 group + tig. A (16 x 16): register r holds row group + 8 (r & 1), columns
// 2 tig + 8 (r >> 1) + {0, 1} (low half first). B (16 x 8): register r holds column group,
// rows 2 tig + 8 r + {0, 1}. C (16 x 8): element e is row group + 8 (e >> 1), column
// 2 tig + (e & 1).
void mma_bf16_16816(float c[4], const uint32_t a[4], const uint32_t b[2]) {
  Block& blk = block();
  const int tid = blk.current, base = tid / 32 * 32, lane = tid % 32;
  uint32_t* mine = blk.mma.data() + size_t(tid) * 6;
  std::memcpy(mine, a, 4 * sizeof(uint32_t));
  std::memcpy(mine + 4, b, 2 * sizeof(uint32_t));
  sync_warp();
  auto half = [](uint32_t reg, int hi) {
    return std::bit_cast<float>(uint32_t(hi ? reg & 0xffff0000u : reg << 16));
  };
  const uint32_t* w = blk.mma.data() + size_t(base) * 6;
  auto A = [&](int row, int col) {
    const int l = row % 8 * 4 + col % 8 / 2, r = row / 8 + 2 * (col / 8);
    return half(w[l * 6 + r], col & 1);
  };
  auto B = [&](int row, int col) {
    const int l = col * 4 + row % 8 / 2, r = row / 8;
    return half(w[l * 6 + 4 + r], row & 1);
  };
  const int group = lane / 4, tig = lane % 4;
  for (int e = 0; e < 4; ++e) {
    const int row = group + 8 * (e >> 1), col = 2 * tig + (e & 1);
    float acc = c[e];
    for (int k = 0; k < 16; ++k) acc += A(row, k) * B(k, col);  // bf16 products are exact
    c[e] = acc;
  }
  sync_warp();
}

// ldmatrix: lane l's address is row l % 8 of matrix l / 8. Without trans lane t gets row t / 4
// of each matrix, columns 2 (t % 4) + {0, 1}; with trans column t / 4, rows 2 (t % 4) + {0, 1}.
void ldmatrix_x4(uint32_t r[4], const uint16_t* row, bool trans) {
  Block& b = block();
  const int tid = b.current, lane = tid % 32;
  b.exchange[size_t(tid)] = to_bits(row);
  sync_warp();
  const uint16_t* rows[32];
  for (int l = 0; l < 32; ++l)
    rows[l] = reinterpret_cast<const uint16_t*>(b.exchange[size_t(tid - lane + l)]);
  for (int m = 0; m < 4; ++m) {
    const uint16_t* lo =
        trans ? rows[8 * m + 2 * (lane % 4)] : rows[8 * m + lane / 4] + 2 * (lane % 4);
    const uint16_t* hi = trans ? rows[8 * m + 2 * (lane % 4) + 1] : lo + 1;
    const int c = trans ? lane / 4 : 0;
    r[m] = uint32_t(lo[c]) | uint32_t(hi[c]) << 16;
  }
  sync_warp();
}

}  // namespace mtron::sim
