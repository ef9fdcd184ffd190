#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "mtron/core/arena.h"
#include "mtron/core/memory.h"
#include "mtron/core/tensor.h"

namespace mtron {
namespace {

TEST(Tensor, ViewSharesStorageAndCountsMemory) {
  int64_t before = memory_stats(Device::kCPU).allocated;
  {
    Tensor t = Tensor::zeros({4, 8}, DType::kF32);
    EXPECT_EQ(memory_stats(Device::kCPU).allocated - before, 4 * 8 * 4);
    Tensor v = t.view(8, {2, 8});
    v.f32()[0] = 3.0f;
    EXPECT_EQ(t.f32()[8], 3.0f);
    EXPECT_EQ(v.numel(), 16);
    EXPECT_THROW(t.view(30, {1, 8}), InternalError);
    EXPECT_THROW(t.bf(), InternalError);  // dtype mix-up fails loudly
  }
  EXPECT_EQ(memory_stats(Device::kCPU).allocated, before);
}

TEST(Tensor, NoCudaBackendIsAUserError) {
  EXPECT_THROW(Tensor::empty({4}, DType::kF32, Device::kCUDA), Error);
}

TEST(BF16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f).bits, 0x3f80);
  // 1 + 2^-8 is exactly half-way between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 1.0f / 256)), 1.0f);
  // 1 + 3 * 2^-8 is half-way between 1 + 2^-7 and 1 + 2^-6: ties to even (1 + 2^-6).
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 3.0f / 256)), 1.0f + 1.0f / 64);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(bf16_to_float(float_to_bf16(std::numeric_limits<float>::infinity()))));
  for (float x : {0.1f, -3.7f, 1e-20f, 65504.0f}) {
    EXPECT_NEAR(bf16_to_float(float_to_bf16(x)), x, std::fabs(x) / 256);
  }
}

TEST(Arena, BumpsAlignsAndCoalesces) {
  Arena a(Device::kCPU, 1024);
  float* p = a.alloc<float>(10);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  a.alloc<float>(1000);  // spills into a second block
  size_t hw = a.high_water();
  EXPECT_GE(hw, 4000u);
  a.reset();
  EXPECT_EQ(a.used(), 0u);
  EXPECT_GE(a.capacity(), hw);  // one block now holds the whole step
  size_t cap = a.capacity();
  a.alloc<float>(10);
  a.alloc<float>(1000);
  EXPECT_EQ(a.capacity(), cap);  // no new allocation in steady state
}

}  // namespace
}  // namespace mtron
