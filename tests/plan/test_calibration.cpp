// Calibration files: the fits recover known constants, the file round-trips, a CPU cluster's
// time-model parameters come from the entry for its ranks per node, and a GPU cluster's from
// the entry measured on its GPU model.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <utility>

#include "mtron/core/error.h"
#include "mtron/plan/calibration.h"
#include "util.h"

namespace mtron::plan {
namespace {

TEST(Calibration, GemmFitRecoversTheModel) {
  const double F = 300e9, B = 20e9, c = 3e-6;
  std::vector<GemmSample> s;
  for (int64_t M : {64, 256, 1024})
    for (int64_t N : {128, 768, 3072})
      for (int64_t K : {64, 768}) {
        const double t = 2.0 * M * N * K / F +
                         gemm_operand_bytes(double(M), double(N), double(K), Precision::kBF16) / B +
                         c;
        s.push_back({M, N, K, t});
      }
  const GemmFit f = fit_gemm(s, Precision::kBF16);
  EXPECT_NEAR(f.flops / F, 1, 1e-6);
  EXPECT_NEAR(f.bandwidth / B, 1, 1e-6);
  EXPECT_NEAR(f.overhead / c, 1, 1e-6);
  EXPECT_LT(f.median_rel_error, 1e-9);
}

// Small GEMMs on a busy machine: times that the operand bytes and a fixed cost explain without
// the flop term (the CUDA emulation's 32x96 shapes once fitted that way in CI). The rate stays
// finite: the flop term is in every candidate fit.
TEST(Calibration, GemmFitKeepsAFiniteRateWhenBytesExplainTheTimes) {
  std::vector<GemmSample> s;
  for (int64_t T : {64, 128})
    for (auto [in, out] : {std::pair<int64_t, int64_t>{32, 96}, {96, 32}})
      for (auto [M, N, K] : {std::array<int64_t, 3>{T, out, in}, {T, in, out}, {out, in, T}})
        s.push_back({M, N, K,
                     4e-4 + gemm_operand_bytes(double(M), double(N), double(K), Precision::kBF16) /
                                0.12e9});
  const GemmFit f = fit_gemm(s, Precision::kBF16);
  EXPECT_TRUE(f.flops > 0 && std::isfinite(f.flops)) << f.flops;
  EXPECT_LT(f.median_rel_error, 0.2);
  const Link l = fit_link(
      {{Collective::kSendRecv, 2, 4096.0, 1e-5}, {Collective::kSendRecv, 2, 8192.0, 1e-5}});
  EXPECT_TRUE(l.bandwidth > 0 && std::isfinite(l.bandwidth)) << l.bandwidth;
}

TEST(Calibration, LinkFitRecoversBandwidthAndLatency) {
  const Link truth{2e9, 5e-6, "x"};
  std::vector<CollectiveSample> s;
  for (Collective op : {Collective::kAllReduce, Collective::kAllGather, Collective::kSendRecv})
    for (int64_t n : {2, 4})
      for (double bytes : {4096.0, 65536.0, 1048576.0, 16777216.0})
        s.push_back({op, n, bytes, collective_seconds(op, bytes, n, truth)});
  const Link l = fit_link(s);
  EXPECT_NEAR(l.bandwidth / truth.bandwidth, 1, 1e-6);
  EXPECT_NEAR(l.latency / truth.latency, 1, 1e-6);
}

TEST(Calibration, FileRoundTripAndRankScaling) {
  Calibration cal;
  cal.host = "test";
  RankCalibration r;
  r.ranks_per_node = 2;
  r.threads_per_rank = 1;
  r.memory_bandwidth = 10e9;
  for (int64_t K : {64, 256, 1024})
    r.gemm["fp32"].push_back({512, 512, K, 2.0 * 512 * 512 * K / 100e9 + 1e-5});
  r.collectives.push_back({Collective::kAllReduce, 2, 1e6, 1e-3});
  r.collectives.push_back({Collective::kAllReduce, 2, 1e7, 9e-3});
  cal.by_ranks[2] = r;
  const auto path = std::filesystem::temp_directory_path() / "mtron_calibration_test.json";
  save_calibration(cal, path.string());
  const Calibration back = load_calibration(path.string());
  std::filesystem::remove(path);
  ASSERT_EQ(back.by_ranks.count(2), 1u);
  EXPECT_EQ(back.by_ranks.at(2).gemm.at("fp32").size(), 3u);

  Cluster c;
  c.hardware = find_hardware("local-cpu");
  c.num_devices = c.devices_per_node = 2;
  const PerfParams p2 = perf_from_calibration(back, c, Precision::kFP32);
  EXPECT_NEAR(p2.gemm_flops / back.by_ranks.at(2).gemm_fit.at("fp32").flops, 1, 1e-12);
  EXPECT_FALSE(p2.fused_attention);
  EXPECT_FALSE(p2.gemm_overlaps_memory);
  EXPECT_DOUBLE_EQ(p2.memory_bandwidth, 10e9);
  c.num_devices = c.devices_per_node = 4;  // not measured: the 2-rank entry, shared by 4
  const PerfParams p4 = perf_from_calibration(back, c, Precision::kFP32);
  EXPECT_NEAR(p4.gemm_flops / p2.gemm_flops, 0.5, 1e-12);
  EXPECT_NEAR(p4.memory_bandwidth, 5e9, 1);
  EXPECT_THROW(perf_from_calibration(back, c, Precision::kBF16), Error);  // not measured
  EXPECT_THROW(load_calibration("/nonexistent/calibration.json"), Error);
}

TEST(Calibration, AttentionFitRecoversTheRate) {
  const double F = 400e12;
  std::vector<AttentionSample> s;
  for (int64_t S : {1024, 2048, 4096, 8192}) {
    const auto [fwd, bwd] = fused_attention_seconds(F, double(S), double(S), 32.0 * 128, double(S));
    s.push_back({1, S, 32, 8, 128, true, fwd + bwd});
  }
  const AttentionFit f = fit_attention(s);
  EXPECT_NEAR(f.flops / F, 1, 1e-9);
  EXPECT_LT(f.median_rel_error, 1e-9);
  s[0].seconds *= 3;  // one disturbed measurement moves the median little
  EXPECT_NEAR(fit_attention(s).flops / F, 1, 1e-9);
}

// A GPU entry (what `mtron plan --calibrate --device cuda` writes) replaces the catalog's GEMM,
// attention, memory and NVLink figures for the GPU it was measured on, and only for that one.
TEST(Calibration, GpuEntryDrivesThePlanOfThatGpu) {
  const double F = 700e12, B = 3e12, c = 8e-6, A = 350e12;
  RankCalibration r;
  r.device = "NVIDIA H200";
  r.ranks_per_node = 8;
  r.memory_bandwidth = 4.1e12;
  for (int64_t M : {1024, 4096, 8192})
    for (int64_t N : {4096, 14336})
      for (int64_t K : {4096, 14336})
        r.gemm["bf16"].push_back(
            {M, N, K,
             2.0 * M * N * K / F +
                 gemm_operand_bytes(double(M), double(N), double(K), Precision::kBF16) / B + c});
  for (int64_t S : {2048, 8192}) {
    const auto [fwd, bwd] = fused_attention_seconds(A, double(S), double(S), 4096, double(S));
    r.attention.push_back({1, S, 32, 8, 128, true, fwd + bwd});
  }
  const Link nvl{360e9, 12e-6, "NVLink"};
  for (Collective op : {Collective::kAllReduce, Collective::kAllGather})
    for (double bytes : {1e6, 1e8, 1e9})
      r.collectives.push_back({op, 8, bytes, collective_seconds(op, bytes, 8, nvl)});
  Calibration cal;
  cal.gpus[r.device] = r;
  const auto path = std::filesystem::temp_directory_path() / "mtron_gpu_calibration_test.json";
  save_calibration(cal, path.string());
  const Calibration back = load_calibration(path.string());
  std::filesystem::remove(path);
  ASSERT_EQ(back.gpus.count("NVIDIA H200"), 1u);
  EXPECT_TRUE(back.by_ranks.empty());

  const Cluster h200 = test::gpus("h200", 64);
  const PerfParams pp = perf_from_calibration(back, h200, Precision::kBF16);
  EXPECT_NEAR(pp.gemm_flops / F, 1, 1e-6);
  EXPECT_NEAR(pp.gemm_bandwidth / B, 1, 1e-6);
  EXPECT_NEAR(pp.gemm_overhead / c, 1, 1e-6);
  EXPECT_FALSE(pp.gemm_overlaps_memory);  // the fitted model
  EXPECT_NEAR(pp.attention_flops / A, 1, 1e-9);
  EXPECT_DOUBLE_EQ(pp.memory_bandwidth, 4.1e12);
  EXPECT_NEAR(pp.nvlink.bandwidth / nvl.bandwidth, 1, 1e-6);
  EXPECT_TRUE(pp.fused_attention);  // the rest stays the catalog's
  const PerfParams catalog = perf_from_hardware(h200, Precision::kBF16);
  EXPECT_DOUBLE_EQ(pp.network.bandwidth, catalog.network.bandwidth);
  // The GEMM the time model charges is the measured one.
  EXPECT_NEAR(gemm_seconds(pp, 4096, 14336, 4096, Precision::kBF16) /
                  (2.0 * 4096 * 14336 * 4096 / F +
                   gemm_operand_bytes(4096, 14336, 4096, Precision::kBF16) / B + c),
              1, 1e-6);
  EXPECT_THROW(perf_from_calibration(back, test::gpus("h100-sxm", 8), Precision::kBF16), Error);
  EXPECT_THROW(perf_from_calibration(back, h200, Precision::kFP8), Error);  // not measured
}

}  // namespace
}  // namespace mtron::plan
