// Discardable device memory (core/memory.h: device_discard, device_commit) on the emulated GPU,
// whose blocks are mapped in granules of 2 MiB as a GPU's (kernels/cuda/vmm.cpp on one): the
// granules wholly inside a discarded range are returned and the counters drop by their bytes; a
// commit backs them again, zeroed; device work that touches a granule not backed faults, as it
// would on a GPU; blocks that are not discardable keep their memory. FSDP's sharded buffers
// (ParamBuffer::allocate) are such blocks: train.cudasim_fsdp_shards trains with them.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "mtron/core/memory.h"
#include "mtron/core/tensor.h"
#include "mtron/kernels/device.h"
#include "mtron/kernels/elementwise.h"

namespace mtron {
namespace {

constexpr int64_t kMiB = int64_t(1) << 20;
const kernels::Ctx kGpu{Device::kCUDA, nullptr};

int64_t allocated() {
  return memory_stats(Device::kCUDA).allocated;
}

// The block's floats from byte `from` to byte `to`, read back to the host.
std::vector<float> read(const Tensor& t, int64_t from, int64_t to) {
  std::vector<float> h(size_t((to - from) / 4));
  kernels::copy_to_host(kGpu, h.data(), static_cast<char*>(t.raw()) + from, to - from);
  return h;
}

// Whether every float of bytes [from, to) of h (read from byte `base`) equals v.
bool all_equal(const std::vector<float>& h, int64_t base, int64_t from, int64_t to, float v) {
  for (int64_t i = (from - base) / 4; i < (to - base) / 4; ++i)
    if (h[size_t(i)] != v) return false;
  return true;
}

class DiscardableCudaSim : public ::testing::Test {
 protected:
  void SetUp() override { kernels::init_device(Device::kCUDA, 0); }
};

TEST_F(DiscardableCudaSim, GranulesAreReturnedAndBackedAgainZeroed) {
  const int64_t before = allocated(), bytes = 10 * kMiB + 64;
  {
    const Tensor t = Tensor::empty_discardable({bytes / 4}, DType::kF32, Device::kCUDA);
    char* p = static_cast<char*>(t.raw());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % uintptr_t(2 * kMiB), 0u);
    EXPECT_EQ(allocated(), before + bytes);
    kernels::fill(kGpu, t.f32(), 1.5f, t.numel());

    // Bytes [1, 9) MiB hold the granules [2, 4), [4, 6), [6, 8) MiB whole.
    const auto [first, last] = device_discard(Device::kCUDA, p + kMiB, size_t(8 * kMiB));
    EXPECT_EQ(first, size_t(kMiB));
    EXPECT_EQ(last, size_t(7 * kMiB));
    EXPECT_EQ(allocated(), before + bytes - 6 * kMiB);
    device_discard(Device::kCUDA, p + kMiB, size_t(8 * kMiB));  // already returned
    EXPECT_EQ(allocated(), before + bytes - 6 * kMiB);

    device_commit(Device::kCUDA, p + 3 * kMiB, size_t(kMiB));  // the granule [2, 4) MiB
    EXPECT_EQ(allocated(), before + bytes - 4 * kMiB);
    const std::vector<float> head = read(t, 0, 4 * kMiB);
    EXPECT_TRUE(all_equal(head, 0, 0, 2 * kMiB, 1.5f));
    EXPECT_TRUE(all_equal(head, 0, 2 * kMiB, 4 * kMiB, 0.0f));

    device_commit(Device::kCUDA, p, size_t(bytes));
    EXPECT_EQ(allocated(), before + bytes);
    const std::vector<float> all = read(t, 0, bytes);
    EXPECT_TRUE(all_equal(all, 0, 0, 2 * kMiB, 1.5f));
    EXPECT_TRUE(all_equal(all, 0, 2 * kMiB, 8 * kMiB, 0.0f));
    EXPECT_TRUE(all_equal(all, 0, 8 * kMiB, bytes, 1.5f));
    device_discard(Device::kCUDA, p + 4 * kMiB, size_t(2 * kMiB));
    EXPECT_EQ(allocated(), before + bytes - 2 * kMiB);
  }
  EXPECT_EQ(allocated(), before);  // freed: the bytes still backed
}

TEST_F(DiscardableCudaSim, ZeroReleaseReturnsWholeGranulesAndZeroesTheRest) {
  const int64_t before = allocated(), bytes = 8 * kMiB;
  const Tensor t = Tensor::empty_discardable({bytes / 4}, DType::kF32, Device::kCUDA);
  char* p = static_cast<char*>(t.raw());
  kernels::fill(kGpu, t.f32(), -2.0f, t.numel());
  kernels::zero_release(kGpu, p + 64, 6 * kMiB);  // bytes [64, 6 MiB + 64): granules [2, 6) MiB
  EXPECT_EQ(allocated(), before + bytes - 4 * kMiB);
  device_commit(Device::kCUDA, p, size_t(bytes));
  const std::vector<float> all = read(t, 0, bytes);
  EXPECT_TRUE(all_equal(all, 0, 0, 64, -2.0f));
  EXPECT_TRUE(all_equal(all, 0, 64, 6 * kMiB + 64, 0.0f));
  EXPECT_TRUE(all_equal(all, 0, 6 * kMiB + 64, bytes, -2.0f));
}

TEST_F(DiscardableCudaSim, OrdinaryBlocksKeepTheirMemory) {
  const int64_t before = allocated();
  const Tensor t = Tensor::empty({2 * kMiB}, DType::kF32, Device::kCUDA);
  const auto [first, last] = device_discard(Device::kCUDA, t.raw(), size_t(8 * kMiB));
  EXPECT_EQ(first, last);
  device_commit(Device::kCUDA, t.raw(), size_t(8 * kMiB));
  EXPECT_EQ(allocated(), before + 8 * kMiB);
}

using DiscardableCudaSimDeathTest = DiscardableCudaSim;

TEST_F(DiscardableCudaSimDeathTest, DeviceWorkOnADiscardedGranuleFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        const Tensor t = Tensor::empty_discardable({2 * kMiB}, DType::kF32, Device::kCUDA);
        device_discard(Device::kCUDA, t.raw(), size_t(8 * kMiB));
        kernels::fill(kGpu, t.f32() + kMiB, 1.0f, 16);  // byte 4 MiB: discarded
      },
      "discarded granule of a discardable block was accessed");
}

}  // namespace
}  // namespace mtron
