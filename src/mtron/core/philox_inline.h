// defines: MT_HOST_DEVICE, PhiloxKey, PhiloxBlock, philox4x32, philox_block, dropout_scales
//
// The part of core/philox.h that device code runs too: the Philox4x32-10 block function and the
// dropout multipliers. Header-only and free of the standard library, so that the CPU kernels
// and the CUDA kernels (nvcc, or the CPU emulation of kernels/cuda/sim) compile this one
// implementation and draw bit-identical values.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define MT_HOST_DEVICE __host__ __device__
#else
#define MT_HOST_DEVICE
#endif

namespace mtron {

struct PhiloxKey {
  uint32_t k0, k1;
};

// Four 32-bit words: a counter or a block of random bits.
struct PhiloxBlock {
  uint32_t w[4];
  MT_HOST_DEVICE uint32_t operator[](int i) const { return w[i]; }
};

// Philox4x32 with 10 rounds (Salmon et al., SC'11).
MT_HOST_DEVICE inline PhiloxBlock philox4x32(PhiloxKey key, PhiloxBlock c) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t k0 = key.k0, k1 = key.k1;
  for (int r = 0; r < 10; ++r) {
    const uint64_t p0 = uint64_t(kM0) * c.w[0];
    const uint64_t p1 = uint64_t(kM1) * c.w[2];
    c = {{uint32_t(p1 >> 32) ^ c.w[1] ^ k0, uint32_t(p1), uint32_t(p0 >> 32) ^ c.w[3] ^ k1,
          uint32_t(p0)}};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

// Block #ctr of the stream: counter (ctr as two 32-bit words, then 0, 0).
MT_HOST_DEVICE inline PhiloxBlock philox_block(PhiloxKey key, uint64_t ctr) {
  return philox4x32(key, {{uint32_t(ctr), uint32_t(ctr >> 32), 0u, 0u}});
}

// Dropout multipliers: z[i] for element index0 + i * stride of the stream is 0 (dropped) or
// 1 / (1 - p) (kept, inverted scaling). Element e is kept iff u >= p, u = (w >> 8) / 2^24 with w
// word e % 4 of block e / 4, so a mask depends only on (key, element index): every layout that
// indexes elements by their global coordinates drops the same ones.
MT_HOST_DEVICE inline void dropout_scales(
    float* z, PhiloxKey key, uint64_t index0, uint64_t stride, int64_t n, float p) {
  const float keep = 1.0f / (1.0f - p);
  uint64_t block = ~uint64_t(0);
  PhiloxBlock r{};
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t e = index0 + uint64_t(i) * stride;
    if (e >> 2 != block) block = e >> 2, r = philox_block(key, block);  // 4 elements share one
    const float u = float(r.w[e & 3] >> 8) * (1.0f / 16777216.0f);
    z[i] = u >= p ? keep : 0.0f;
  }
}

}  // namespace mtron
