// defines: DType, Device, bf16, dtype_size, dtype_name, device_name, float<->bf16 conversion
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace mtron {

enum class DType : uint8_t { kF32, kBF16, kI32, kI64, kU16, kU8, kF64 };
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

}  // namespace mtron
