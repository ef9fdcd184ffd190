// GEMM library comparison on the GPT-2 124M training shapes (4096 tokens per micro-batch):
// oneDNN fp32 and bf16 (through mtron::kernels::gemm, i.e. with the primitive cache) against
// OpenBLAS fp32 (cblas_sgemm), for the forward (NT), dgrad (NN) and wgrad (TN, beta = 1) forms.
// Libraries run interleaved, rep by rep, so machine noise hits them alike; medians are printed,
// from wall time and, after "|", per thread of CPU time (the library's own speed on a shared
// machine; exact with OMP_NUM_THREADS=1, which is how docs/kernels.md compares them).
//
//   build/cpu-release/bench/kernels/gemm_bench [reps]
// (mtron_kernels makes OpenBLAS run AVX-512 kernels on AVX-512 CPUs; see docs/kernels.md.)
#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "mtron/core/timer.h"
#include "mtron/kernels/cpu_isa.h"
#include "mtron/kernels/gemm.h"

namespace {

using mtron::bf16;
using mtron::kernels::Trans;

struct Shape {
  const char* name;
  int64_t M, N, K;
  Trans ta, tb;
  float beta;
};

double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 5;
  std::printf("%s; OpenBLAS %d threads\n", mtron::kernels::cpu_summary().c_str(),
              openblas_get_num_threads());
  const Trans N = Trans::kN, T = Trans::kT;
  // name, M, N, K: forward Y[4096,out] = X W^T; dgrad dX = dY W; wgrad dW += dY^T X
  const std::vector<Shape> shapes = {
      {"qkv fwd      ", 4096, 2304, 768, N, T, 0}, {"qkv dgrad    ", 4096, 768, 2304, N, N, 0},
      {"qkv wgrad    ", 2304, 768, 4096, T, N, 1}, {"fc1 fwd      ", 4096, 3072, 768, N, T, 0},
      {"fc1 dgrad    ", 4096, 768, 3072, N, N, 0}, {"fc1 wgrad    ", 3072, 768, 4096, T, N, 1},
      {"fc2 fwd      ", 4096, 768, 3072, N, T, 0}, {"fc2 dgrad    ", 4096, 3072, 768, N, N, 0},
      {"fc2 wgrad    ", 768, 3072, 4096, T, N, 1}, {"proj fwd     ", 4096, 768, 768, N, T, 0},
      {"proj dgrad   ", 4096, 768, 768, N, N, 0},  {"proj wgrad   ", 768, 768, 4096, T, N, 1},
      {"lmhead fwd   ", 4096, 8192, 768, N, T, 0}, {"lmhead dgrad ", 4096, 768, 8192, N, N, 1},
      {"lmhead wgrad ", 8192, 768, 4096, T, N, 1}, {"attn tile NT ", 64, 64, 64, N, T, 0},
      {"attn S=QK^T  ", 1024, 1024, 64, N, T, 0},  {"attn O=PV    ", 1024, 64, 1024, N, N, 0},
  };
  std::printf("%-14s %6s %6s %6s  %12s %12s %12s   (GFLOP/s, median of %d)\n", "shape", "M", "N",
              "K", "oneDNN f32", "OpenBLAS f32", "oneDNN bf16", reps);
  const mtron::kernels::Ctx ctx{};
  for (const Shape& s : shapes) {
    const int64_t lda = s.ta == N ? s.K : s.M, ldb = s.tb == N ? s.N : s.K, ldc = s.N;
    std::vector<float> A(size_t(s.M * s.K)), B(size_t(s.K * s.N)), C(size_t(s.M * s.N), 0.0f);
    for (size_t i = 0; i < A.size(); ++i) A[i] = float(i % 13) * 0.01f;
    for (size_t i = 0; i < B.size(); ++i) B[i] = float(i % 7) * 0.01f;
    std::vector<bf16> Ab(A.size()), Bb(B.size());
    for (size_t i = 0; i < A.size(); ++i) Ab[i] = mtron::float_to_bf16(A[i]);
    for (size_t i = 0; i < B.size(); ++i) Bb[i] = mtron::float_to_bf16(B[i]);
    const double flop = 2.0 * double(s.M) * double(s.N) * double(s.K);
    // small shapes: repeat inside one timing so it is long enough to measure
    const int inner = std::max(1, int(2e9 / flop));
    std::vector<std::function<void()>> libs = {
        [&] {
          mtron::kernels::gemm(ctx, s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), lda, B.data(), ldb,
                               s.beta, C.data(), ldc);
        },
        [&] {
          cblas_sgemm(CblasRowMajor, s.ta == N ? CblasNoTrans : CblasTrans,
                      s.tb == N ? CblasNoTrans : CblasTrans, int(s.M), int(s.N), int(s.K), 1.0f,
                      A.data(), int(lda), B.data(), int(ldb), s.beta, C.data(), int(ldc));
        },
        [&] {
          mtron::kernels::gemm(ctx, s.ta, s.tb, s.M, s.N, s.K, 1.0f, Ab.data(), lda, Bb.data(), ldb,
                               s.beta, C.data(), ldc);
        }};
    std::vector<std::vector<double>> t(libs.size()), c(libs.size());
    const int threads = openblas_get_num_threads();
    for (auto& f : libs) f();  // warm-up (primitive creation, page faults)
    for (int r = 0; r < reps; ++r)
      for (size_t l = 0; l < libs.size(); ++l) {
        const double t0 = mtron::now_seconds(), c0 = cpu_seconds();
        for (int i = 0; i < inner; ++i) libs[l]();
        t[l].push_back((mtron::now_seconds() - t0) / inner);
        c[l].push_back((cpu_seconds() - c0) / inner / threads);
      }
    std::printf("%-14s %6lld %6lld %6lld  %12.0f %12.0f %12.0f  | %6.0f %6.0f %6.0f\n", s.name,
                (long long)s.M, (long long)s.N, (long long)s.K, flop / median(t[0]) * 1e-9,
                flop / median(t[1]) * 1e-9, flop / median(t[2]) * 1e-9, flop / median(c[0]) * 1e-9,
                flop / median(c[1]) * 1e-9, flop / median(c[2]) * 1e-9);
  }
  return 0;
}
