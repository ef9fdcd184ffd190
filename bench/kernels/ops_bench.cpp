// Speed of the non-GEMM CPU kernels at GPT-2 124M training shapes (micro-batch 4 x seq 1024 =
// 4096 tokens, hidden 768, 12 heads of 64, vocabulary 50304): GB/s for memory-bound ops (bytes
// that must move at least once), GFLOP/s for attention (causal: the visible half of the scores).
// A plain copy of the same size gives the bandwidth to compare with. Besides wall time, the rate
// per thread of CPU time is printed: on a shared machine it tells the kernel's own speed (with
// OMP_NUM_THREADS=1 it is exact; with more threads it counts OpenMP spin-waits too).
//
//   build/cpu-release/bench/kernels/ops_bench [reps] [filter]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "mtron/core/timer.h"
#include "mtron/kernels/activation.h"
#include "mtron/kernels/adamw.h"
#include "mtron/kernels/attention.h"
#include "mtron/kernels/elementwise.h"
#include "mtron/kernels/embedding.h"
#include "mtron/kernels/norm.h"
#include "mtron/kernels/rope.h"
#include "mtron/kernels/xent.h"

namespace {

using namespace mtron;
using namespace mtron::kernels;

int g_reps = 5;

double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}
const char* g_filter = nullptr;

std::vector<float> filled(int64_t n, float scale = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t x = 12345;
  for (auto& e : v) {
    x = x * 1664525u + 1013904223u;
    e = scale * (float(x >> 8) / float(1 << 24) - 0.5f);
  }
  return v;
}

// Runs f once to warm up, then g_reps times; prints the median with `work` units per second.
void run(const std::string& name,
         const std::string& shape,
         double work,
         const char* unit,
         const std::function<void()>& f) {
  if (g_filter && name.find(g_filter) == std::string::npos) return;
  f();
  std::vector<double> t, c;
  for (int r = 0; r < g_reps; ++r) {
    const double t0 = now_seconds(), c0 = cpu_seconds();
    f();
    t.push_back(now_seconds() - t0);
    c.push_back(cpu_seconds() - c0);
  }
  std::sort(t.begin(), t.end());
  std::sort(c.begin(), c.end());
  const double med = t[t.size() / 2], cmed = c[c.size() / 2];
  std::printf("%-22s %-26s %9.3f ms %8.1f %-7s | per thread of CPU time %8.1f\n", name.c_str(),
              shape.c_str(), med * 1e3, work / med * 1e-9, unit, work / cmed * 1e-9);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) g_reps = std::atoi(argv[1]);
  if (argc > 2) g_filter = argv[2];
  const Ctx ctx{};
  const int64_t B = 4, S = 1024, N = B * S, C = 768, H = 12, D = 64, F = 4 * C, V = 50304;
  const double f4 = 4.0;  // bytes per float

  {  // reference bandwidth: copy of N x 4C floats
    auto a = filled(N * F), b = filled(N * F);
    run("copy (memcpy)", "4096x3072", 2 * f4 * N * F, "GB/s",
        [&] { std::memcpy(b.data(), a.data(), a.size() * 4); });
    run("add", "4096x3072", 3 * f4 * N * F, "GB/s",
        [&] { add(ctx, b.data(), a.data(), b.data(), N * F); });
    run("scale_inplace", "4096x3072", 2 * f4 * N * F, "GB/s",
        [&] { scale_inplace(ctx, b.data(), 0.5f, N * F); });
    double total = 0;
    run("sum_squares", "4096x3072", f4 * N * F, "GB/s",
        [&] { sum_squares(ctx, &total, a.data(), N * F); });
    std::vector<bf16> h(a.size());
    run("convert f32->bf16", "4096x3072", 6.0 * N * F, "GB/s",
        [&] { convert(ctx, h.data(), a.data(), N * F); });
    run("convert bf16->f32", "4096x3072", 6.0 * N * F, "GB/s",
        [&] { convert(ctx, b.data(), h.data(), N * F); });
    auto bias = filled(F);
    run("bias_add", "4096x3072", 2 * f4 * N * F, "GB/s",
        [&] { bias_add(ctx, b.data(), bias.data(), N, F); });
    run("bias_backward", "4096x3072", f4 * N * F, "GB/s",
        [&] { bias_backward(ctx, bias.data(), a.data(), N, F); });
    run("gelu_forward", "4096x3072", 2 * f4 * N * F, "GB/s",
        [&] { gelu_forward(ctx, b.data(), a.data(), N * F); });
    auto d = filled(N * F);
    run("gelu_backward", "4096x3072", 3 * f4 * N * F, "GB/s",
        [&] { gelu_backward(ctx, d.data(), a.data(), b.data(), N * F); });
  }
  {
    auto x = filled(N * C), y = filled(N * C), w = filled(C), bb = filled(C), dy = filled(N * C);
    std::vector<float> mean(N), rstd(N), dw(C), db(C);
    run("layernorm_forward", "4096x768", 2 * f4 * N * C, "GB/s", [&] {
      layernorm_forward(ctx, y.data(), mean.data(), rstd.data(), x.data(), w.data(), bb.data(), N,
                        C, 1e-5f);
    });
    auto dx = filled(N * C);
    run("layernorm_backward", "4096x768", 4 * f4 * N * C, "GB/s", [&] {
      layernorm_backward(ctx, dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(),
                         mean.data(), rstd.data(), N, C);
    });
    run("rmsnorm_forward", "4096x768", 2 * f4 * N * C, "GB/s",
        [&] { rmsnorm_forward(ctx, y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f); });
    run("rmsnorm_backward", "4096x768", 4 * f4 * N * C, "GB/s", [&] {
      rmsnorm_backward(ctx, dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
    });
  }
  {
    auto in = filled(N * 2 * 2048), out = filled(N * 2048), din = filled(N * 2 * 2048);
    run("swiglu_forward", "4096x(2x2048)", 3 * f4 * N * 2048, "GB/s",
        [&] { swiglu_forward(ctx, out.data(), in.data(), N, 2048); });
    run("swiglu_backward", "4096x(2x2048)", 5 * f4 * N * 2048, "GB/s",
        [&] { swiglu_backward(ctx, din.data(), in.data(), out.data(), N, 2048); });
  }
  {
    auto qkv = filled(N * 3 * C), q = filled(N * C), k = filled(N * C), v = filled(N * C);
    run("qkv_split", "4096x12x(1+2)x64", 2 * f4 * N * 3 * C, "GB/s",
        [&] { qkv_split(ctx, q.data(), k.data(), v.data(), qkv.data(), N, H, 1, D); });
    run("qkv_merge_grad", "4096x12x(1+2)x64", 2 * f4 * N * 3 * C, "GB/s",
        [&] { qkv_merge_grad(ctx, qkv.data(), q.data(), k.data(), v.data(), N, H, 1, D); });
    std::vector<int32_t> pos(N);
    for (int64_t i = 0; i < N; ++i) pos[size_t(i)] = int32_t(i % S);
    run("rope_forward", "4096x12x64", 2 * f4 * N * C, "GB/s",
        [&] { rope_forward(ctx, q.data(), pos.data(), N, H, D, D, RopeFreq{10000.0f}, 0); });
    run("rope_backward", "4096x12x64", 2 * f4 * N * C, "GB/s",
        [&] { rope_backward(ctx, q.data(), pos.data(), N, H, D, D, RopeFreq{10000.0f}, 0); });
  }
  {
    auto table = filled(V * C), out = filled(N * C), dtable = filled(V * C);
    std::vector<int32_t> ids(N);
    for (int64_t i = 0; i < N; ++i) ids[size_t(i)] = int32_t((i * 7919) % V);
    run("embedding_forward", "4096 of 50304x768", 2 * f4 * N * C, "GB/s",
        [&] { embedding_forward(ctx, out.data(), ids.data(), table.data(), N, C, 0, V, false); });
    run("embedding_backward", "4096 of 50304x768", 3 * f4 * N * C, "GB/s",
        [&] { embedding_backward(ctx, dtable.data(), out.data(), ids.data(), N, C, 0, V); });
  }
  {
    const int64_t Vl = 8192;  // one vocabulary chunk of the LM head
    auto logits = filled(N * Vl, 20.0f);
    std::vector<float> mx(N), se(N), tl(N);
    std::vector<int32_t> tg(N);
    for (int64_t i = 0; i < N; ++i) tg[size_t(i)] = int32_t((i * 31) % Vl);
    run("xent_stats", "4096x8192 chunk", f4 * N * Vl, "GB/s", [&] {
      xent_stats(ctx, mx.data(), se.data(), tl.data(), logits.data(), tg.data(), N, Vl, 0, V);
    });
    run("xent_backward", "4096x8192 in place", 2 * f4 * N * Vl, "GB/s", [&] {
      xent_backward(ctx, logits.data(), logits.data(), tg.data(), mx.data(), se.data(), nullptr, N,
                    Vl, 0, V);
    });
  }
  {
    const int64_t P = 124'000'000 / 4;  // a quarter of GPT-2 124M per call
    auto p = filled(P), m = filled(P), v = filled(P, 0.01f), g = filled(P);
    for (auto& e : v) e = std::abs(e);
    std::vector<bf16> pb(static_cast<size_t>(P));
    AdamWParams hp;
    hp.lr = 1e-4f;
    hp.weight_decay = 0.1f;
    run("adamw_step", "31M fp32", 28.0 * P, "GB/s",
        [&] { adamw_step(ctx, p.data(), m.data(), v.data(), g.data(), nullptr, P, hp); });
    run("adamw_step +bf16 copy", "31M fp32", 30.0 * P, "GB/s",
        [&] { adamw_step(ctx, p.data(), m.data(), v.data(), g.data(), pb.data(), P, hp); });
  }
  {
    const AttnShape s{B, S, S, H, H, D, D, 1.0f / 8.0f};
    auto q = filled(N * C), k = filled(N * C), v = filled(N * C), out = filled(N * C);
    auto dout = filled(N * C), dq = filled(N * C), dk = filled(N * C), dv = filled(N * C);
    std::vector<float> lse(size_t(B * H * S));
    // causal: half of the S x S scores; forward 2 products, backward 5
    const double fwd = 2.0 * 2.0 * B * H * double(S) * S * D / 2;
    run("attention_forward", "B4 S1024 H12 D64 causal", fwd, "GFLOP/s", [&] {
      attention_forward(ctx, out.data(), lse.data(), q.data(), k.data(), v.data(), s, {true, 0});
    });
    run("attention_backward", "B4 S1024 H12 D64 causal", 2.5 * fwd, "GFLOP/s", [&] {
      attention_backward(ctx, dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                         v.data(), out.data(), lse.data(), s, {true, 0});
    });
    // the bf16 ops on the fused QKV buffer, as a bf16 GPT-2 layer calls them
    const AttnShape f{B, S, S, H, H, D, D, 1.0f / 8.0f, true, true};
    const auto bf16s = [](int64_t n) {
      std::vector<bf16> x(static_cast<size_t>(n));
      for (size_t i = 0; i < x.size(); ++i) x[i] = float_to_bf16(0.01f * float(i % 97));
      return x;
    };
    auto qkv16 = bf16s(3 * N * C), o16 = bf16s(N * C), do16 = bf16s(N * C),
         dqkv16 = bf16s(3 * N * C);
    const auto views = fused_qkv_views(qkv16.data(), H, H, D);
    const auto dviews = fused_qkv_views(dqkv16.data(), H, H, D);
    run("attention_forward_bf16", "B4 S1024 H12 D64 causal fused", fwd, "GFLOP/s", [&] {
      attention_forward(ctx, o16.data(), lse.data(), views.q, views.k, views.v, f, {true, 0});
    });
    run("attention_backward_bf16", "B4 S1024 H12 D64 causal fused", 2.5 * fwd, "GFLOP/s", [&] {
      attention_backward(ctx, dviews.q, dviews.k, dviews.v, do16.data(), views.q, views.k, views.v,
                         o16.data(), lse.data(), f, {true, 0});
    });
  }
  return 0;
}
