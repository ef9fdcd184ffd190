// `mtron plan --calibrate --device cuda` on the CUDA emulation (mtron_kernels_cudasim registers
// it as Device::kCUDA): the measurement runs through the kernel layer, writes a GPU entry for
// the emulated device, and the entry's fits are usable (positive, finite rates).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "mtron/kernels/device.h"
#include "mtron/plan/calibrate.h"
#include "mtron/plan/calibration.h"

namespace mtron::plan {
namespace {

TEST(GpuCalibration, MeasuresTheEmulatedDeviceThroughTheKernelLayer) {
  ASSERT_GT(kernels::device_count(Device::kCUDA), 0);
  const auto path = std::filesystem::temp_directory_path() / "mtron_gpu_calibration_sim.json";
  std::filesystem::remove(path);
  CalibrateOptions o;
  o.path = path.string();
  o.quick = true;
  o.cuda = true;
  ASSERT_EQ(run_calibration(o), 0);
  const Calibration cal = load_calibration(o.path);
  std::filesystem::remove(path);
  EXPECT_TRUE(cal.by_ranks.empty());
  ASSERT_EQ(cal.gpus.size(), 1u);
  const RankCalibration& r = cal.gpus.begin()->second;
  EXPECT_EQ(r.device, kernels::device_properties(Device::kCUDA).name);
  EXPECT_EQ(r.gemm.at("bf16").size(), 12u);  // 2 token counts x 2 linears x fwd/dgrad/wgrad
  for (const GemmSample& s : r.gemm.at("bf16")) EXPECT_GT(s.seconds, 0) << s.M << "x" << s.N;
  const GemmFit& g = r.gemm_fit.at("bf16");
  EXPECT_TRUE(g.flops > 0 && std::isfinite(g.flops)) << g.flops;
  EXPECT_EQ(r.attention.size(), 2u);
  EXPECT_TRUE(r.attention_fit.flops > 0 && std::isfinite(r.attention_fit.flops));
  EXPECT_GT(r.memory_bandwidth, 0);
  EXPECT_TRUE(r.collectives.empty());  // one process: no NCCL group
}

}  // namespace
}  // namespace mtron::plan
