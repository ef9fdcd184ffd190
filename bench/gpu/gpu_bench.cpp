// gpu_bench: speed of the CUDA GEMMs and attention at the shapes of GPT-2 124M and of a 1.3B
// model (24 layers, hidden 2048, 16 heads, seq 2048), in TFLOP/s and as a share of the dense
// peak of an H100/H200 (bf16 989.4, fp32 66.9 TFLOP/s; the fp32 GEMMs run on the fp32 units,
// not TF32).
//
//   gpu_bench [reps]
//
// Each figure is the mean over `reps` launches after 3 warm-up launches, timed on the host
// around a device synchronisation (launch gaps included, which the large shapes make small).
// GEMMs: the forward, dgrad and wgrad of each linear layer (gemm.h's three forms) for 16384
// tokens, and one LM-head chunk of 1024 rows. Attention: causal, forward and backward, on mtron's
// kernels and through cuDNN (FLOPs counted as Megatron does: the visible half, backward = 2 x
// forward). The memory-bound ops of the 1.3B model's bf16 step in GB/s, as a share of 4.8 TB/s.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "mtron/core/error.h"
#include "mtron/core/profile.h"
#include "mtron/core/tensor.h"
#include "mtron/kernels/activation.h"
#include "mtron/kernels/adamw.h"
#include "mtron/kernels/attention.h"
#include "mtron/kernels/device.h"
#include "mtron/kernels/elementwise.h"
#include "mtron/kernels/gemm.h"
#include "mtron/kernels/norm.h"
#include "mtron/kernels/xent.h"

namespace {

using namespace mtron;
using namespace mtron::kernels;

const Ctx kDev{Device::kCUDA, nullptr};
constexpr double kPeakBf16 = 989.4e12, kPeakFp32 = 66.9e12, kBandwidth = 4.8e12;
int g_reps = 20;

// Device memory holding n random-ish values (a cheap hash, so no value is zero).
Tensor filled(int64_t n, DType t) {
  std::vector<float> h(static_cast<size_t>(n));
  uint32_t x = 2463534242u;
  for (auto& v : h) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    v = float(x >> 8) / float(1 << 24) - 0.5f;
  }
  Tensor f = Tensor::empty({n}, DType::kF32, Device::kCUDA);
  copy_from_host(kDev, f.raw(), h.data(), n * 4);
  if (t == DType::kF32) return f;
  Tensor b = Tensor::empty({n}, DType::kBF16, Device::kCUDA);
  convert(kDev, b.bf(), f.f32(), n);
  return b;
}

double seconds_per_call(const std::function<void()>& f) {
  for (int i = 0; i < 3; ++i) f();
  synchronize(kDev);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < g_reps; ++i) f();
  synchronize(kDev);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / g_reps;
}

void row(const std::string& what, const std::string& shape, double s, double flops, double peak) {
  std::printf("%-30s %-28s %9.3f %9.1f %7.1f%%\n", what.c_str(), shape.c_str(), s * 1e3,
              flops / s / 1e12, 100.0 * flops / s / peak);
  std::fflush(stdout);
}

// C[M,N] = op(A) op(B) (+ C when beta = 1), A/B of type t.
void bench_gemm(const std::string& what,
                Trans ta,
                Trans tb,
                int64_t M,
                int64_t N,
                int64_t K,
                float beta,
                DType t) {
  Tensor A = filled(M * K, t), B = filled(K * N, t), C = filled(M * N, DType::kF32);
  const int64_t lda = ta == Trans::kN ? K : M, ldb = tb == Trans::kN ? N : K;
  const double s = seconds_per_call([&] {
    if (t == DType::kBF16)
      gemm(kDev, ta, tb, M, N, K, 1.0f, A.bf(), lda, B.bf(), ldb, beta, C.f32(), N);
    else
      gemm(kDev, ta, tb, M, N, K, 1.0f, A.f32(), lda, B.f32(), ldb, beta, C.f32(), N);
  });
  row(str(what, t == DType::kBF16 ? " bf16" : " fp32"), str(M, "x", N, "x", K), s,
      2.0 * double(M) * double(N) * double(K), t == DType::kBF16 ? kPeakBf16 : kPeakFp32);
}

struct Model {
  const char* name;
  int64_t hidden, heads, seq, batch;  // batch: sequences per attention call
};

// fc1's forward with its bias and GELU in the epilogue (bf16 output and pre-activation) and fc2's
// dgrad with GELU's derivative in it, to set beside the plain "fc1 fwd" and "fc2 dgrad" rows.
void gelu_gemms(const Model& m, int64_t tokens) {
  const int64_t h = m.hidden, F = 4 * h;
  Tensor x = filled(tokens * h, DType::kBF16), w1 = filled(F * h, DType::kBF16);
  Tensor b1 = filled(F, DType::kBF16), act = filled(tokens * F, DType::kBF16);
  Tensor pre = filled(tokens * F, DType::kBF16), dy = filled(tokens * h, DType::kBF16);
  Tensor w2 = filled(h * F, DType::kBF16);
  const double flops = 2.0 * double(tokens) * double(F) * double(h);
  const std::string shape = str(tokens, "x", F, "x", h);
  row(str(m.name, " fc1 fwd+gelu bf16"), shape, seconds_per_call([&] {
        gemm_gelu(kDev, Trans::kN, Trans::kT, tokens, F, h, x.bf(), h, w1.bf(), h, act.bf(),
                  pre.bf(), b1.bf());
      }),
      flops, kPeakBf16);
  row(str(m.name, " fc2 dgrad+dgelu bf16"), shape, seconds_per_call([&] {
        gemm_dgelu(kDev, Trans::kN, Trans::kN, tokens, F, h, dy.bf(), h, w2.bf(), F, act.bf(),
                   pre.bf());
      }),
      flops, kPeakBf16);
}

void gemms(const Model& m, int64_t tokens, DType t) {
  const int64_t h = m.hidden;
  struct Lin {
    const char* name;
    int64_t out, in;
  };
  for (const Lin& l :
       {Lin{"qkv", 3 * h, h}, Lin{"proj", h, h}, Lin{"fc1", 4 * h, h}, Lin{"fc2", h, 4 * h}}) {
    bench_gemm(str(m.name, " ", l.name, " fwd"), Trans::kN, Trans::kT, tokens, l.out, l.in, 0.0f,
               t);
    bench_gemm(str(m.name, " ", l.name, " dgrad"), Trans::kN, Trans::kN, tokens, l.in, l.out, 0.0f,
               t);
    bench_gemm(str(m.name, " ", l.name, " wgrad"), Trans::kT, Trans::kN, l.out, l.in, tokens, 1.0f,
               t);
  }
  bench_gemm(str(m.name, " lm-head chunk"), Trans::kN, Trans::kT, 1024, 50304, h, 0.0f, t);
  if (t == DType::kBF16) gelu_gemms(m, tokens);
}

// Attention forward and backward with fp32 products (the fp32 kernels), bf16 products on fp32
// tensors (the tensor-core kernels), bf16 products on bf16 tensors on the same kernels
// (AttnShape::own_kernels: bf16 tiles copied to shared memory by cp.async) and through cuDNN's
// fused attention (the default of the bf16 ops that bf16 training calls; mtron warns and runs its
// kernels where cuDNN takes no graph), deterministic and, for the backward, with dq accumulated
// atomically (AttnShape::nondeterministic: NVTE_ALLOW_NONDETERMINISTIC_ALGO=1), side by side.
enum class AttnKind { kFp32, kTc, kTcBf16, kCudnn, kCudnnNondet };

void attention(const Model& m, AttnKind kind) {
  const int64_t D = m.hidden / m.heads;
  const AttnShape s{m.batch,
                    m.seq,
                    m.seq,
                    m.heads,
                    m.heads,
                    D,
                    D,
                    1.0f / std::sqrt(float(D)),
                    kind != AttnKind::kFp32,
                    false,
                    kind == AttnKind::kTc || kind == AttnKind::kTcBf16,
                    kind == AttnKind::kCudnnNondet};
  const int64_t nq = s.Sq * s.B * s.H * s.D;
  const DType t = kind == AttnKind::kFp32 || kind == AttnKind::kTc ? DType::kF32 : DType::kBF16;
  Tensor q = filled(nq, t), k = filled(nq, t), v = filled(nq, t), out = filled(nq, t);
  Tensor dout = filled(nq, t), dq = filled(nq, t), dk = filled(nq, t), dv = filled(nq, t);
  Tensor lse = filled(s.B * s.H * s.Sq, DType::kF32);
  const AttnMask mask{true, 0};
  const double flops = 4.0 * double(s.B * s.H) * double(s.Sq) * double(s.Sk) * double(D) / 2;
  const std::string shape = str("B", s.B, " S", s.Sq, " H", s.H, " D", D);
  const char* name = kind == AttnKind::kFp32     ? "fp32"
                     : kind == AttnKind::kTc     ? "bf16 tc"
                     : kind == AttnKind::kTcBf16 ? "bf16 tc16"
                     : kind == AttnKind::kCudnn  ? "bf16 cudnn"
                                                 : "bf16 cudnn nd";
  if (kind != AttnKind::kCudnnNondet) {  // its forward is kCudnn's
    const double f = seconds_per_call([&] {
      if (t == DType::kBF16)
        attention_forward(kDev, out.bf(), lse.f32(), q.bf(), k.bf(), v.bf(), s, mask);
      else
        attention_forward(kDev, out.f32(), lse.f32(), q.f32(), k.f32(), v.f32(), s, mask);
    });
    row(str(m.name, " attention fwd ", name), shape, f, flops, kPeakBf16);
  }
  const double b = seconds_per_call([&] {
    if (t == DType::kBF16)
      attention_backward(kDev, dq.bf(), dk.bf(), dv.bf(), dout.bf(), q.bf(), k.bf(), v.bf(),
                         out.bf(), lse.f32(), s, mask);
    else
      attention_backward(kDev, dq.f32(), dk.f32(), dv.f32(), dout.f32(), q.f32(), k.f32(), v.f32(),
                         out.f32(), lse.f32(), s, mask);
  });
  row(str(m.name, " attention bwd ", name), shape, b, 2 * flops, kPeakBf16);
}

// The bytes one call of `call` reads and writes, as its op's contract counts them
// (kernels/contracts.h, the cost `mtron train --profile` reports): the profile's total before and
// after one call.
double contract_bytes(const std::function<void()>& call) {
  const auto total = [] {
    double b = 0;
    for (const ProfileEntry& e : profile_report()) b += e.cost.bytes;
    return b;
  };
  const double before = total();
  profile_enable(true);
  call();
  profile_enable(false);
  return total() - before;
}

// A memory-bound op's row: its time per call, and its bytes read and written per call in GB/s
// and as a share of the H200's 4.8 TB/s.
void mem_row(const std::string& what, const std::string& shape, const std::function<void()>& call) {
  const double bytes = contract_bytes(call), s = seconds_per_call(call);
  std::printf("%-30s %-28s %9.3f %9.1f %7.1f%%\n", what.c_str(), shape.c_str(), s * 1e3,
              bytes / s / 1e9, 100.0 * bytes / s / kBandwidth);
  std::fflush(stdout);
}

// The memory-bound ops of a bf16 training step at m's shapes, 16384 tokens (the 1.3B model's
// step): GELU forward and backward with fc1's bias gradient (bf16, 4h columns), LayerNorm forward
// (bf16 output) and backward, the bias gradient and bf16 copy of an fp32 output gradient; the
// cross-entropy statistics and backward over one LM-head chunk of bf16 logits; AdamW with the
// bf16 copy and a clipping factor, the gradient norm's sum of squares and an in-place scaling (the
// fp16 loss scaler's unscaling) over 256M parameters.
void memory_bound(const Model& m, int64_t tokens) {
  const int64_t h = m.hidden, F = 4 * h, nf = tokens * F, nh = tokens * h;
  const std::string name = m.name;
  std::printf("\n%-30s %-28s %9s %9s %8s\n", "memory-bound op", "shape", "ms", "GB/s",
              "of 4.8TB/s");
  {
    Tensor x = filled(nf, DType::kBF16), dy = filled(nf, DType::kBF16),
           y = filled(nf, DType::kBF16);
    Tensor db = filled(F, DType::kF32);
    const std::string shape = str(tokens, "x", F);
    mem_row(name + " gelu fwd bf16", shape, [&] { gelu_forward(kDev, y.bf(), x.bf(), nf); });
    mem_row(name + " gelu bwd+bias bf16", shape,
            [&] { gelu_backward_bias(kDev, db.f32(), y.bf(), x.bf(), dy.bf(), tokens, F); });
  }
  {
    Tensor x = filled(nh, DType::kF32), g = filled(nh, DType::kF32), dx = filled(nh, DType::kF32);
    Tensor y = filled(nh, DType::kBF16), w = filled(h, DType::kF32), b = filled(h, DType::kF32);
    Tensor mean = filled(tokens, DType::kF32), rstd = filled(tokens, DType::kF32);
    Tensor dw = filled(h, DType::kF32), dbias = filled(h, DType::kF32);
    const std::string shape = str(tokens, "x", h);
    mem_row(name + " layernorm fwd bf16", shape, [&] {
      layernorm_forward(kDev, y.bf(), mean.f32(), rstd.f32(), x.f32(), w.f32(), b.f32(), tokens, h,
                        1e-5f);
    });
    mem_row(name + " layernorm bwd", shape, [&] {
      layernorm_backward(kDev, dx.f32(), dw.f32(), dbias.f32(), g.f32(), x.f32(), w.f32(),
                         mean.f32(), rstd.f32(), tokens, h);
    });
    mem_row(name + " bias grad + bf16 copy", shape,
            [&] { bias_backward_narrow(kDev, dbias.f32(), y.bf(), g.f32(), tokens, h); });
  }
  {
    const int64_t rows = 1024, V = 50304, n = rows * V;
    Tensor logits = filled(n, DType::kBF16), dlogits = filled(n, DType::kBF16);
    Tensor mx = filled(rows, DType::kF32), se = filled(rows, DType::kF32);
    Tensor tl = filled(rows, DType::kF32), scale = filled(rows, DType::kF32);
    Tensor targets = Tensor::empty({rows}, DType::kI32, Device::kCUDA);
    fill_zero(kDev, targets.raw(), rows * 4);
    const std::string shape = str(rows, "x", V);
    mem_row(name + " xent stats bf16", shape, [&] {
      xent_stats(kDev, mx.f32(), se.f32(), tl.f32(), logits.bf(), targets.i32(), rows, V, 0, V);
    });
    mem_row(name + " xent bwd bf16", shape, [&] {
      xent_backward(kDev, dlogits.bf(), logits.bf(), targets.i32(), mx.f32(), se.f32(), scale.f32(),
                    rows, V, 0, V);
    });
  }
  {
    const int64_t n = int64_t(1) << 28;
    Tensor p = filled(n, DType::kF32), mo = filled(n, DType::kF32), v = filled(n, DType::kF32);
    Tensor g = filled(n, DType::kF32), pb = filled(n, DType::kBF16);
    Tensor total = Tensor::empty({1}, DType::kF64, Device::kCUDA);
    const AdamWParams ap{.lr = 1e-4f, .weight_decay = 0.1f, .step = 1, .grad_scale = 0.5f};
    const AdamWRun run{.begin = 0, .n = n, .moment = 0, .lr = 1e-4f, .weight_decay = 0.1f};
    const std::string shape = str(n >> 20, "M params");
    mem_row(name + " adamw + bf16 copy", shape, [&] {
      adamw_step_runs(kDev, p.f32(), mo.f32(), v.f32(), g.f32(), pb.bf(), &run, 1, ap);
    });
    mem_row(name + " grad norm sum_squares", shape,
            [&] { sum_squares(kDev, static_cast<double*>(total.raw()), g.f32(), n); });
    mem_row(name + " grad scale_inplace", shape, [&] { scale_inplace(kDev, g.f32(), 1.0f, n); });
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) g_reps = std::max(1, std::atoi(argv[1]));
  try {
    init_device(Device::kCUDA, 0);
    const DeviceProperties p = device_properties(Device::kCUDA);
    std::printf(
        "gpu_bench: \"%s\", %d SMs, %d reps; %% of peak: bf16 %.1f, fp32 %.1f TFLOP/s "
        "(attention: of the bf16 peak)\n\n",
        p.name.c_str(), p.multiprocessors, g_reps, kPeakBf16 / 1e12, kPeakFp32 / 1e12);
    std::printf("%-30s %-28s %9s %9s %8s\n", "op", "shape (MxNxK)", "ms", "TFLOP/s", "of peak");
    const Model gpt2{"gpt2-124m", 768, 12, 1024, 16};
    const Model big{"1.3b", 2048, 16, 2048, 8};
    for (const Model& m : {gpt2, big}) {
      gemms(m, 16384, DType::kBF16);
      for (AttnKind kind : {AttnKind::kFp32, AttnKind::kTc, AttnKind::kTcBf16, AttnKind::kCudnn,
                            AttnKind::kCudnnNondet})
        attention(m, kind);
    }
    memory_bound(big, 16384);
    gemms(gpt2, 16384, DType::kF32);  // the fp32 path, for reference
    const DeviceMemory mem = device_memory(Device::kCUDA);
    std::printf("\ndevice memory: max allocated %.2f GiB, max reserved %.2f GiB\n",
                double(mem.max_allocated) / (1 << 30), double(mem.max_reserved) / (1 << 30));
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "gpu_bench: %s\n", ex.what());
    return 1;
  }
  return 0;
}
