// defines: DType, Device, bf16, f16, dtype_size, dtype_name, device_name, float<->bf16 and
//          float<->f16 conversion
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace mtron {

enum class DType : uint8_t { kF32, kBF16, kI32, kI64, kU16, kU8, kF64, kF16 };
enum class Device : uint8_t { kCPU, kCUDA };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);
std::string_view device_name(Device d);

// bfloat16 storage type: the upper 16 bits of an IEEE float32.
struct bf16 {
  uint16_t bits;
};

inline float bf16_to_float(bf16 x) {
  uint32_t u = uint32_t(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even; NaN stays NaN (quiet).
inline bf16 float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{uint16_t(u >> 16)};
}

// IEEE binary16 storage type (1 sign, 5 exponent, 10 mantissa bits).
struct f16 {
  uint16_t bits;
};

// Exact: every binary16 value (subnormals, infinities) is a float; NaN stays NaN.
inline float f16_to_float(f16 x) {
  const uint32_t h = x.bits, s = (h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 1023u;
  uint32_t u;
  if (e == 31) {
    u = s | 0x7f800000u | m << 13;
  } else if (e != 0) {
    u = s | (e + 112u) << 23 | m << 13;
  } else {
    // subnormal (or zero): m * 2^-24, exact in float
    float f = float(m) * 0x1p-24f;
    std::memcpy(&u, &f, 4);
    u |= s;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even as a GPU's __float2half_rn: magnitudes from 65520 up become infinity,
// below 2^-14 the result is subnormal (or zero), NaN becomes the quiet NaN 0x7e00 (signed).
inline f16 float_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  if (u >= 0x47800000u) return f16{uint16_t(sign | (u > 0x7f800000u ? 0x7e00u : 0x7c00u))};
  if (u < 0x38800000u) {
    // Adding 0.5 aligns the value's bits so that the float adder rounds it to the binary16
    // subnormal quantum 2^-24 (round to nearest even); the mantissa's low bits are the result.
    float a;
    std::memcpy(&a, &u, 4);
    a += 0.5f;
    uint32_t r;
    std::memcpy(&r, &a, 4);
    return f16{uint16_t(sign | (r - 0x3f000000u))};
  }
  const uint32_t odd = (u >> 13) & 1u;
  u += 0xc8000fffu + odd;  // rebias the exponent (-112 << 23) and round to nearest even
  return f16{uint16_t(sign | (u >> 13))};
}

}  // namespace mtron
