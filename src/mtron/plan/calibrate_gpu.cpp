// `mtron plan --calibrate --device cuda`: measures this node's GPUs as mtron's trainer uses them,
// through the kernel layer on Device::kCUDA (cuBLASLt GEMMs, mtron's fused attention, device
// copies) and the comm layer (NCCL over an MPI bootstrap, from parallel/launch.h's
// init_rank_device), one rank per GPU, every rank at once.
// The samples go through the same fits as the CPU calibration (plan/calibration.h).
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "mtron/comm/comm.h"
#include "mtron/core/error.h"
#include "mtron/core/tensor.h"
#include "mtron/kernels/attention.h"
#include "mtron/kernels/device.h"
#include "mtron/kernels/elementwise.h"
#include "mtron/kernels/gemm.h"
#include "mtron/parallel/launch.h"
#include "mtron/plan/calibrate.h"
#include "mtron/plan/calibration.h"

namespace mtron::plan {
namespace {

using kernels::Ctx;

// The ranks (one per GPU): `world` for barriers and the slowest rank's time, `nccl` for the
// collectives measured (none with one GPU).
struct Gpus {
  Comm& world;
  std::unique_ptr<Comm> nccl;
  int rank() const { return world.rank(); }
  int size() const { return world.size(); }
};

// Times `fn` on every GPU at once (time_ranks, each call synchronised): at least 5 repetitions
// and 0.2 s.
template <typename F>
double time_all(const Gpus& g, const Ctx& ctx, F&& fn) {
  return time_ranks(
      g.world,
      [&] {
        fn();
        kernels::synchronize(ctx);
      },
      0.2, 5);
}

Tensor device_tensor(int64_t n, DType t, const Ctx& ctx) {
  Tensor x = Tensor::empty({n}, t, Device::kCUDA);
  kernels::fill_zero(ctx, x.raw(), int64_t(x.nbytes()));
  return x;
}

// bf16 GEMMs of transformer linears: forward (NT), dgrad (NN), wgrad (TN), as the trainer's
// linear layers call them.
void measure_gemms(const Gpus& g, const Ctx& ctx, bool quick, RankCalibration* r) {
  using kernels::Trans;
  // quick: shapes small enough for the CUDA emulation (tests).
  const std::vector<int64_t> tokens =
      quick ? std::vector<int64_t>{64, 128} : std::vector<int64_t>{1024, 4096, 8192};
  const std::vector<std::pair<int64_t, int64_t>> linears =
      quick ? std::vector<std::pair<int64_t, int64_t>>{{32, 96}, {96, 32}}
            : std::vector<std::pair<int64_t, int64_t>>{{4096, 6144},  {4096, 4096},  {4096, 28672},
                                                       {14336, 4096}, {8192, 10240}, {8192, 57344},
                                                       {28672, 8192}};
  auto& samples = r->gemm["bf16"];
  for (int64_t T : tokens) {
    for (auto [in, out] : linears) {
      const Tensor x = device_tensor(T * in, DType::kBF16, ctx);
      const Tensor w = device_tensor(out * in, DType::kBF16, ctx);
      const Tensor dy = device_tensor(T * out, DType::kBF16, ctx);
      const Tensor c = device_tensor(std::max(T, in) * std::max(out, in), DType::kF32, ctx);
      auto run = [&](Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, const Tensor& a,
                     int64_t lda, const Tensor& b, int64_t ldb) {
        const double s = time_all(g, ctx, [&] {
          kernels::gemm(ctx, ta, tb, M, N, K, 1.0f, a.bf(), lda, b.bf(), ldb, 0.0f, c.f32(), N);
        });
        samples.push_back({M, N, K, s});
      };
      run(Trans::kN, Trans::kT, T, out, in, x, in, w, in);    // Y = X W^T
      run(Trans::kN, Trans::kN, T, in, out, dy, out, w, in);  // dX = dY W
      run(Trans::kT, Trans::kN, out, in, T, dy, out, x, in);  // dW = dY^T X
    }
  }
}

// Causal fused attention, forward and backward, with bf16 products (bf16 training's
// tensor-core kernels), at Llama-like shapes (32 heads of 128, 8 key/value groups; quick: 2
// heads of 32, one group).
void measure_attention(const Gpus& g, const Ctx& ctx, bool quick, RankCalibration* r) {
  const std::vector<int64_t> seqs =
      quick ? std::vector<int64_t>{32, 64} : std::vector<int64_t>{1024, 2048, 4096, 8192};
  const int64_t heads = quick ? 2 : 32, groups = quick ? 1 : 8, dim = quick ? 32 : 128;
  for (int64_t S : seqs) {
    const kernels::AttnShape s{1,   S, S, heads, groups, dim, dim, 1.0f / std::sqrt(float(dim)),
                               true};
    const int64_t nq = S * s.H * s.D, nkv = S * s.G * s.D;
    const Tensor q = device_tensor(nq, DType::kF32, ctx), k = device_tensor(nkv, DType::kF32, ctx),
                 v = device_tensor(nkv, DType::kF32, ctx), o = device_tensor(nq, DType::kF32, ctx),
                 lse = device_tensor(s.H * S, DType::kF32, ctx),
                 dq = device_tensor(nq, DType::kF32, ctx),
                 dk = device_tensor(nkv, DType::kF32, ctx),
                 dv = device_tensor(nkv, DType::kF32, ctx);
    const double sec = time_all(g, ctx, [&] {
      kernels::attention_forward(ctx, o.f32(), lse.f32(), q.f32(), k.f32(), v.f32(), s, {});
      kernels::attention_backward(ctx, dq.f32(), dk.f32(), dv.f32(), o.f32(), q.f32(), k.f32(),
                                  v.f32(), o.f32(), lse.f32(), s, {});
    });
    r->attention.push_back({s.B, S, s.H, s.G, s.D, true, sec});
  }
}

// Device-to-device copy: bytes read plus bytes written per second.
double measure_memory_bandwidth(const Gpus& g, const Ctx& ctx, bool quick) {
  const int64_t bytes = quick ? (int64_t(1) << 20) : (int64_t(1) << 30);
  const Tensor a = device_tensor(bytes, DType::kU8, ctx), b = device_tensor(bytes, DType::kU8, ctx);
  const double sec = time_all(g, ctx, [&] { kernels::copy(ctx, b.raw(), a.raw(), bytes); });
  return 2.0 * double(bytes) / sec;
}

// NCCL all-reduce, all-gather and reduce-scatter over all the node's GPUs, 1 MiB to 1 GiB.
void measure_collectives(const Gpus& g, const Ctx& ctx, bool quick, RankCalibration* r) {
  if (!g.nccl) return;
  const int n = g.size();
  for (int64_t bytes = int64_t(1) << 20; bytes <= (quick ? int64_t(1) << 24 : int64_t(1) << 30);
       bytes *= 8) {
    const int64_t count = bytes / 4, part = count / n;
    const Tensor send = device_tensor(count, DType::kF32, ctx);
    const Tensor recv = device_tensor(count, DType::kF32, ctx);
    r->collectives.push_back({Collective::kAllReduce, n, double(bytes), time_all(g, ctx, [&] {
                                g.nccl->all_reduce(send.raw(), count, DType::kF32, ReduceOp::kSum);
                              })});
    r->collectives.push_back({Collective::kAllGather, n, double(bytes), time_all(g, ctx, [&] {
                                g.nccl->all_gather(send.raw(), recv.raw(), part, DType::kF32);
                              })});
    r->collectives.push_back({Collective::kReduceScatter, n, double(bytes), time_all(g, ctx, [&] {
                                g.nccl->reduce_scatter(send.raw(), recv.raw(), part, DType::kF32,
                                                       ReduceOp::kSum);
                              })});
  }
}

}  // namespace

int run_gpu_calibration(const CalibrateOptions& o, Launch& launch) {
  MT_CHECK(launch.local_size() == launch.size(),
           "--calibrate --device cuda measures one node: run it with one rank per GPU of one "
           "node (got ",
           launch.size(), " ranks, ", launch.local_size(), " on this node)");
  Gpus g{launch.world(), init_rank_device(Device::kCUDA, launch.world(), launch.local_size(),
                                          nullptr, "--calibrate --device cuda")};
  const Ctx ctx{Device::kCUDA, nullptr};
  const std::string device = kernels::device_properties(Device::kCUDA).name;
  if (g.rank() == 0)
    std::fprintf(stderr,
                 "mtron plan --calibrate --device cuda: %d x %s; this takes a few minutes\n",
                 g.size(), device.c_str());

  RankCalibration r;
  r.device = device;
  r.ranks_per_node = launch.local_size();
  measure_gemms(g, ctx, o.quick, &r);
  measure_attention(g, ctx, o.quick, &r);
  r.memory_bandwidth = measure_memory_bandwidth(g, ctx, o.quick);
  measure_collectives(g, ctx, o.quick, &r);
  if (g.rank() == 0) {
    Calibration cal = load_or_new_calibration(o.path);
    cal.gpus[device] = r;
    save_calibration(cal, o.path);
    const GemmFit f = fit_gemm(r.gemm["bf16"], Precision::kBF16);
    const AttentionFit a = fit_attention(r.attention);
    std::printf("calibration for %d x %s written to %s\n", g.size(), device.c_str(),
                o.path.c_str());
    std::printf(
        "  GEMM bf16 (cuBLASLt): %.4g TFLOP/s, operands at %.4g GB/s, %.3g us per call (median "
        "error of the fit %.0f%% over %zu shapes)\n",
        f.flops / 1e12, f.bandwidth / 1e9, f.overhead * 1e6, 100 * f.median_rel_error,
        r.gemm["bf16"].size());
    std::printf("  fused attention: %.4g TFLOP/s (median error %.0f%% over %zu lengths)\n",
                a.flops / 1e12, 100 * a.median_rel_error, r.attention.size());
    std::printf("  memory bandwidth: %.4g GB/s\n", r.memory_bandwidth / 1e9);
    if (!r.collectives.empty()) {
      const Link l = fit_link(r.collectives);
      std::printf("  NCCL collectives: bus bandwidth %.1f GB/s per GPU, latency %.1f us per step\n",
                  l.bandwidth / 1e9, l.latency * 1e6);
    } else {
      std::printf("  NCCL collectives: not measured (one GPU; run under mpirun -np <GPUs>)\n");
    }
  }
  return 0;
}

}  // namespace mtron::plan
