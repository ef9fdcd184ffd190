// defines: stream_cases, memory_cases (op_table_cases.h): the device's streams and memory
#include <cmath>
#include <cstdint>
#include <vector>

#include "mtron/core/memory.h"
#include "mtron/core/tensor.h"
#include "mtron/kernels/ops.h"
#include "mtron/kernels/ref/ref_ops.h"
#include "op_checker.h"
#include "op_table_cases.h"

namespace mtron::kernels::test {

void stream_cases(Checker& ck) {
  ck.run("stream", "gemm, attention, sum_squares on a created stream", [&] {
    const Ctx sdev{g_dev.device, create_stream(g_dev.device)};
    const int64_t M = 65, N = 70, K = 33;
    Pair<float> A(randn(M * K)), B(randn(N * K)), C(poison(M * N));
    ref::gemm(Trans::kN, Trans::kT, M, N, K, 1.0f, A.host(), K, B.host(), K, 0.0f, C.host(), N);
    gemm(sdev, Trans::kN, Trans::kT, M, N, K, 1.0f, A.dev(), K, B.dev(), K, 0.0f, C.dev(), N);
    synchronize(sdev);
    ck.check("gemm C", C, kTolF32);
    const AttnShape s{1, 40, 40, 2, 1, 32, 32, 1.0f / std::sqrt(32.0f)};
    const int64_t nq = 40 * 2 * 32, nk = 40 * 32;
    Pair<float> q(randn(nq)), k(randn(nk)), v(randn(nk)), out(poison(nq)), lse(poison(80));
    ref::attention_forward(out.host(), lse.host(), q.host(), k.host(), v.host(), s, {true, 0});
    attention_forward(sdev, out.dev(), lse.dev(), q.dev(), k.dev(), v.dev(), s, {true, 0});
    synchronize(sdev);
    ck.check("attention out", out, kTolF32);
    Pair<double> total(std::vector<double>{0.0});
    const double r = ref::sum_squares(out.host(), nq);
    sum_squares(sdev, total.dev(), out.dev(), nq);
    synchronize(sdev);
    ck.check("sum_squares", {float(total.dev_result()[0])}, {float(r)}, kTolF32);
    destroy_stream(sdev.device, sdev.stream);
  });
}

// Discardable memory (core/memory.h): a block filled, a range of it returned (zero_release: its
// whole pages or granules discarded, the rest zeroed) and backed again reads 0 in the range and
// its old values elsewhere. On CUDA (kernels/cuda/vmm.cpp: the driver's virtual memory
// management, 2 MiB granules at this size) the counters drop by the granules while discarded.
void memory_cases(Checker& ck) {
  ck.run("discardable memory", "24 MiB, bytes [1 MiB + 4, 21 MiB) returned", [&] {
    constexpr int64_t kMiB = int64_t(1) << 20, n = 6 * kMiB;  // floats
    const Tensor t = Tensor::empty_discardable({n}, DType::kF32, g_dev.device);
    fill(g_dev, t.f32(), 2.5f, n);
    const int64_t from = kMiB / 4 + 1, to = 21 * kMiB / 4;  // floats
    const int64_t before = memory_stats(g_dev.device).allocated;
    zero_release(g_dev, t.f32() + from, (to - from) * 4);
    const int64_t dropped = before - memory_stats(g_dev.device).allocated;
    device_commit(g_dev.device, t.raw(), size_t(n) * 4);
    std::vector<float> got(static_cast<size_t>(n)), want(static_cast<size_t>(n), 2.5f);
    std::fill(want.begin() + from, want.begin() + to, 0.0f);
    copy_to_host(g_dev, got.data(), t.raw(), n * 4);
    ck.check("values", got, want, 0.0);
    if (g_dev.device == Device::kCUDA) {  // at least the granules [2, 20) MiB of 2 MiB or less
      ck.check("MiB returned >= 18", {float(dropped >= 18 * kMiB)}, {1.0f}, 0.0);
      ck.check("MiB backed again", {float(before - memory_stats(g_dev.device).allocated)}, {0.0f},
               0.0);
    }
  });
}

}  // namespace mtron::kernels::test
