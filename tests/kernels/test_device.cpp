// kernels/device.h and the device-generic memory ops of elementwise.h (fill_zero, fill, copy) on
// the CPU, and what a build decides about CUDA: with MTRON_CUDA=OFF every CUDA entry point fails
// with one clear mtron::Error and no GPU is reported. (The CUDA implementations are compared
// with these on the CPU emulation by kernels.cuda_sim_op_check, and on a GPU by bench/gpu.)
#include <cstring>
#include <vector>

#include "kernel_test_util.h"
#include "mtron/core/memory.h"
#include "mtron/core/tensor.h"
#include "mtron/kernels/device.h"
#include "mtron/kernels/elementwise.h"

namespace mtron::kernels::test {
namespace {

TEST(Device, CpuIsOneDeviceWithoutStreams) {
  EXPECT_EQ(device_count(Device::kCPU), 1);
  EXPECT_NO_THROW(init_device(Device::kCPU, 0));
  EXPECT_THROW(init_device(Device::kCPU, 1), Error);
  EXPECT_EQ(device_properties(Device::kCPU).name, "cpu");
  EXPECT_EQ(create_stream(Device::kCPU), nullptr);
  EXPECT_NO_THROW(destroy_stream(Device::kCPU, nullptr));
  EXPECT_NO_THROW(synchronize(kCpu));
}

TEST(Device, CpuMemoryReportFollowsCoreCounters) {
  const DeviceMemory before = device_memory(Device::kCPU);
  {
    Tensor t = Tensor::empty({1 << 20}, DType::kF32);
    const DeviceMemory now = device_memory(Device::kCPU);
    EXPECT_EQ(now.allocated, before.allocated + (4 << 20));
    EXPECT_EQ(now.reserved, now.allocated);  // no caching on the CPU
    EXPECT_GE(now.max_allocated, now.allocated);
  }
  EXPECT_EQ(device_memory(Device::kCPU).allocated, before.allocated);
}

TEST(Device, FillZeroFillAndCopyOnTheCpu) {
  for (int64_t n : {0, 1, 33, 1000}) {
    auto x = randn(n, 1);
    fill(kCpu, x.data(), -2.5f, n);
    for (float v : x) EXPECT_EQ(v, -2.5f);
    auto y = randn(n, 2);
    copy(kCpu, x.data(), y.data(), n * 4);
    EXPECT_EQ(0, n ? std::memcmp(x.data(), y.data(), size_t(n) * 4) : 0);
    fill_zero(kCpu, x.data(), n * 4);
    for (float v : x) EXPECT_EQ(v, 0.0f);
    std::vector<float> host(static_cast<size_t>(n), 7.0f);
    copy_from_host(kCpu, x.data(), y.data(), n * 4);
    copy_to_host(kCpu, host.data(), x.data(), n * 4);
    EXPECT_EQ(host, y);
    fill_zero(kCpu, x.data(), n * 4);
    copy_from_host_async(kCpu, x.data(), y.data(), n * 4);
    EXPECT_EQ(0, n ? std::memcmp(x.data(), y.data(), size_t(n) * 4) : 0);
  }
}

TEST(Device, CopyRowsCopiesEachRowBetweenPitches) {
  const std::vector<float> src = randn(4 * 7, 3);
  std::vector<float> dst(3 * 5, -1.0f);
  copy_rows(kCpu, dst.data(), 5 * 4, src.data(), 7 * 4, 2 * 4, 3);  // 2 floats of 3 rows
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t c = 0; c < 5; ++c) {
      EXPECT_EQ(dst[size_t(5 * r + c)], c < 2 ? src[size_t(7 * r + c)] : -1.0f) << r << " " << c;
    }
  }
  copy_rows(kCpu, nullptr, 0, nullptr, 0, 0, 5);  // nothing to copy
  EXPECT_THROW(copy_rows(kCpu, dst.data(), 4, src.data(), 8, 8, 1), InternalError);  // pitch < row
}

TEST(Device, FillZeroTouchesExactlyTheGivenBytes) {
  std::vector<float> x(10, 1.0f);
  fill_zero(kCpu, x.data() + 2, 3 * 4);
  const std::vector<float> want = {1, 1, 0, 0, 0, 1, 1, 1, 1, 1};
  EXPECT_EQ(x, want);
}

TEST(Device, CpuBuildHasNoCudaAndSaysSo) {
  if (device_count(Device::kCUDA) > 0) GTEST_SKIP() << "this build has CUDA and a GPU";
  if (device_unavailable(Device::kCUDA).find("built without CUDA") == std::string::npos) {
    GTEST_SKIP() << "this build has CUDA: " << device_unavailable(Device::kCUDA);
  }
  EXPECT_EQ(device_unavailable(Device::kCPU), "");
  EXPECT_THROW(init_device(Device::kCUDA, 0), Error);
  const Ctx gpu{Device::kCUDA, nullptr};
  float x = 1;
  try {
    fill(gpu, &x, 0.0f, 1);
    ADD_FAILURE() << "fill on CUDA in a build without CUDA did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("without CUDA"), std::string::npos) << e.what();
  }
  EXPECT_EQ(x, 1.0f);
}

}  // namespace
}  // namespace mtron::kernels::test
