// The hardware catalog (embedded JSON), lookups and errors, the local CPU and its rank view.
#include <gtest/gtest.h>

#include <fstream>

#include "mtron/core/hardware.h"
#include "test_helpers.h"

namespace mtron {
namespace {

using tests::error_of;

TEST(Hardware, CatalogHasTheIssuesEntries) {
  for (const char* n :
       {"a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "b200", "gb200", "local-cpu"})
    EXPECT_EQ(find_hardware(n).name, n);
  const Hardware h = find_hardware("H100");  // alias, any case
  EXPECT_EQ(h.name, "h100-sxm");
  EXPECT_DOUBLE_EQ(h.peak_flops(Precision::kBF16), 989.4e12);
  EXPECT_DOUBLE_EQ(h.peak_flops(Precision::kFP8), 1978.9e12);
  EXPECT_DOUBLE_EQ(h.mfu_peak_flops(Precision::kFP8), 989.4e12);  // fp8 MFU against bf16
  EXPECT_EQ(h.gpus_per_node, 8);
  EXPECT_EQ(h.nvlink_domain, 8);
  EXPECT_DOUBLE_EQ(h.nvlink_bandwidth, 450e9);
  EXPECT_DOUBLE_EQ(h.inter_node_bandwidth(), 50e9);  // 8 x NDR 400 for 8 GPUs
  EXPECT_EQ(h.network.name, "ib-ndr400");
  EXPECT_GT(h.memory_bytes, 79 * 1024.0 * 1024 * 1024);
  EXPECT_EQ(find_hardware("a100-80gb").peak_flops(Precision::kFP8), 0);
  EXPECT_EQ(find_hardware("gb200").nvlink_domain, 72);
  EXPECT_EQ(find_hardware("h100-pcie").nvlink_domain, 2);
  ASSERT_NE(find_hardware_by_device_name("NVIDIA H100 80GB HBM3"), nullptr);
  EXPECT_EQ(find_hardware_by_device_name("NVIDIA H100 80GB HBM3")->name, "h100-sxm");
  EXPECT_EQ(find_hardware_by_device_name("a toaster"), nullptr);
}

TEST(Hardware, UnknownNamesListTheKnownOnes) {
  const std::string e = error_of([] { find_hardware("h1000"); });
  EXPECT_NE(e.find("unknown hardware 'h1000'"), std::string::npos) << e;
  EXPECT_NE(e.find("h100-sxm"), std::string::npos) << e;
  EXPECT_NE(e.find("local-cpu"), std::string::npos) << e;
  const std::string n = error_of([] { find_network("token-ring"); });
  EXPECT_NE(n.find("ib-ndr400"), std::string::npos) << n;
  EXPECT_NE(error_of([] { parse_precision("fp4"); }).find("bf16"), std::string::npos);
}

TEST(Hardware, LocalCpuIsDetected) {
  const Hardware c = detect_local_cpu();
  EXPECT_TRUE(c.is_cpu);
  EXPECT_GE(c.gpus_per_node, 1);
  EXPECT_GT(c.memory_bytes, 0);
  EXPECT_GT(c.peak_flops(Precision::kFP32), 0);
  // On the measured development CPU (reference/cpu.md) the peaks are the measured ones.
  std::ifstream in("/proc/cpuinfo");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (all.find("model\t\t: 207") != std::string::npos && all.find("avx512f") != std::string::npos) {
    EXPECT_DOUBLE_EQ(c.peak_flops(Precision::kFP32), 145e9);
    EXPECT_DOUBLE_EQ(c.peak_flops(Precision::kBF16), 900e9);
    EXPECT_NE(c.description.find("xeon-emerald-rapids"), std::string::npos);
  }
}

Hardware cpu_from(const std::string& file, double measured_mhz = 0) {
  std::ifstream in(std::string(MTRON_TEST_DATA) + "/cpuinfo/" + file);
  EXPECT_TRUE(in.good()) << file;
  return detect_cpu(in, measured_mhz);
}

TEST(Hardware, CpuProfilesFromRealCpuinfo) {
  // aarch64: the profile comes from "CPU implementer"/"CPU part"/"Features" (no vendor_id,
  // model name or flags lines).
  const Hardware grace = cpu_from("grace.txt");
  EXPECT_NE(grace.description.find("arm-neoverse-v2"), std::string::npos) << grace.description;
  EXPECT_NE(grace.description.find("part 0xd4f"), std::string::npos) << grace.description;
  EXPECT_GT(grace.peak_flops(Precision::kFP32), 0);
  const Hardware zen3 = cpu_from("epyc_zen3.txt");
  EXPECT_NE(zen3.description.find("x86-avx2 (AMD EPYC)"), std::string::npos) << zen3.description;
  EXPECT_DOUBLE_EQ(zen3.peak_flops(Precision::kFP32), 32 * 2445.428e6);
  // Zen 5: 512-bit datapaths, vdpbf16ps at twice the fp32 FMA rate (not the generic AVX-512
  // profile, whose bf16 peak is its fp32 one: MFU read 130% in a bf16 run there).
  const Hardware zen5 = cpu_from("epyc_zen5.txt");
  EXPECT_NE(zen5.description.find("amd-zen5 (AMD EPYC)"), std::string::npos) << zen5.description;
  EXPECT_DOUBLE_EQ(zen5.peak_flops(Precision::kFP32), 64 * 2096.025e6);
  EXPECT_DOUBLE_EQ(zen5.peak_flops(Precision::kBF16), 128 * 2096.025e6);
}

TEST(Hardware, MeasuredClockAboveCpuinfosIsTheClock) {
  // That VM's /proc/cpuinfo says 2096 MHz; its cores ran dependent adds at 3.44 GHz.
  const Hardware boosted = cpu_from("epyc_zen5.txt", 3440);
  EXPECT_DOUBLE_EQ(boosted.peak_flops(Precision::kBF16), 128 * 3440e6);
  EXPECT_NE(boosted.description.find("at 3.44 GHz (measured)"), std::string::npos)
      << boosted.description;
  // A measurement below /proc/cpuinfo's (cores shared with other work) changes nothing.
  const Hardware slowed = cpu_from("epyc_zen5.txt", 1000);
  EXPECT_DOUBLE_EQ(slowed.peak_flops(Precision::kBF16), 128 * 2096.025e6);
  EXPECT_NE(slowed.description.find("at 2.10 GHz"), std::string::npos) << slowed.description;
  EXPECT_EQ(slowed.description.find("measured"), std::string::npos) << slowed.description;
}

TEST(Hardware, RankViewSharesTheNode) {
  Hardware node = detect_local_cpu();
  node.gpus_per_node = 2;  // a 2-core node
  node.peak_fp32 = 100e9;
  node.memory_bytes = 8e9;
  const Hardware one = rank_device(node, 1), four = rank_device(node, 4);
  EXPECT_DOUBLE_EQ(one.peak_flops(Precision::kFP32), 200e9);  // 2 cores, 2 threads
  EXPECT_DOUBLE_EQ(four.peak_flops(Precision::kFP32), 50e9);  // time-shared
  EXPECT_DOUBLE_EQ(four.memory_bytes, 2e9);
  EXPECT_EQ(four.gpus_per_node, 4);
  EXPECT_NE(four.peak_description(Precision::kFP32).find("per rank"), std::string::npos);
  const Hardware gpu = find_hardware("h100-sxm");
  EXPECT_DOUBLE_EQ(rank_device(gpu, 8).peak_flops(Precision::kBF16), 989.4e12);
}

}  // namespace
}  // namespace mtron
