// Times Muon's step (optim/muon.h) on GPT-2 124M's four weight matrices of one layer: the fused
// QKV [2304, 768] (split into its q, k and v rows), the attention output [768, 768], fc1
// [3072, 768] and fc2 [768, 3072]. Usage: muon_bench [ROUNDS] [bf16|fp32]. Prints one line per
// round: the seconds of one step over the four and the GFLOP/s of their Newton-Schulz GEMMs
// (5 steps of A = X X^T, B = b A + c A A, X = a X + B X on the m x n matrix, m <= n:
// 4 m^2 n + 2 m^3 each); bench/optim/run.sh compares it with bench/optim/muon_torch.py.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "mtron/optim/muon.h"

int main(int argc, char** argv) {
  using namespace mtron;
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
  const bool bf16 = argc > 2 ? std::string(argv[2]) == "bf16" : true;
  struct Matrix {
    Shape shape;
    std::vector<int64_t> qkv;
  };
  const std::vector<Matrix> mats = {
      {{2304, 768}, {64, 64, 64}}, {{768, 768}, {}}, {{3072, 768}, {}}, {{768, 3072}, {}}};
  optim::MuonConfig cfg;
  cfg.bf16 = bf16;
  optim::Muon muon(cfg, {});
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> w, g, m;
  double flops = 0;
  for (const Matrix& x : mats) {
    const size_t n = size_t(numel(x.shape));
    w.emplace_back(n), g.emplace_back(n), m.emplace_back(n, 0.0f);
    for (size_t i = 0; i < n; ++i) w.back()[i] = 0.02f * normal(rng), g.back()[i] = normal(rng);
    // The parts Newton-Schulz runs on: the whole, or the QKV weight's q, k, v rows.
    std::vector<int64_t> rows;
    if (x.qkv.empty()) {
      rows.push_back(x.shape[0]);
    } else {
      const int64_t per = x.qkv[0] + x.qkv[1] + x.qkv[2];
      for (const int64_t q : x.qkv) rows.push_back(x.shape[0] / per * q);
    }
    for (const int64_t r : rows) {
      const double a = double(std::min(r, x.shape[1])), b = double(std::max(r, x.shape[1]));
      flops += 5 * (4 * a * a * b + 2 * a * a * a);
    }
  }
  for (int round = 0; round < rounds; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < mats.size(); ++i) {
      optim::MuonMatrix mm;
      mm.global = mm.local = mats[i].shape;
      mm.qkv_rows = mats[i].qkv;
      muon.step(mm, w[i].data(), g[i].data(), nullptr, DType::kBF16, m[i].data(), 0.02, 0.01f,
                1.0f);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("mtron %s round %d: %.4f s, %.1f GFLOP/s\n", bf16 ? "bf16" : "fp32", round, s,
                flops / s / 1e9);
  }
  return 0;
}
