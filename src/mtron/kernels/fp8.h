// defines: Fp8Format, fp8_max, fp8_encode, fp8_decode, fp8_quantize (from fp32 and bf16), abs_max
//          (of fp32 and bf16)
//
// FP8 quantisation with Transformer Engine's semantics, emulated exactly: every E4M3 and E5M2
// value is a bf16 value, so a quantised tensor is stored as bf16 holding exact FP8 values, and the
// bf16 GEMM (fp32 accumulation) on them computes what an FP8 GEMM computes.
//
// fp8_quantize: dst[i] = fp8(src[i] * scale), the product rounded to fp32 first and then to the
//                format's nearest value, ties to even (subnormals kept); finite values beyond the
//                format's largest and infinities saturate to +-fp8_max (TE's saturating cast);
//                NaN becomes the quiet NaN (0x7fc00000: the same bits on every device). amax (one
//                float on ctx's device; skipped when null): *amax = max(*amax, max_i |src[i]|) of
//                the unscaled input, NaN elements ignored (fmaxf), so one amax accumulates over
//                several calls.
// abs_max:       the amax update alone.
// fp8_encode / fp8_decode: an exact value of the format and its byte (sign, exponent with bias 7
//                (E4M3) or 15 (E5M2), mantissa), for the FP8 GEMMs of devices that take bytes
//                (kernels/gemm.h gemm_fp8). NaN encodes as the format's NaN; +-0 keep their sign.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "mtron/core/philox_inline.h"  // MT_HOST_DEVICE
#include "mtron/kernels/op.h"

namespace mtron::kernels {

// E4M3 (Transformer Engine's e4m3fn: 4 exponent bits, 3 mantissa bits, no infinities, max 448)
// and E5M2 (5 exponent bits, 2 mantissa bits, max 57344).
enum class Fp8Format : int { kE4M3, kE5M2 };

constexpr float fp8_max(Fp8Format f) {
  return f == Fp8Format::kE4M3 ? 448.0f : 57344.0f;
}

// v must be a value of the format (fp8_quantize's output), NaN, or +-0.
MT_HOST_DEVICE inline uint8_t fp8_encode(float v, Fp8Format f) {
  const bool e4m3 = f == Fp8Format::kE4M3;
  const int m = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const int sign = copysignf(1.0f, v) < 0.0f ? 0x80 : 0;
  if (v != v) return uint8_t(sign | (e4m3 ? 0x7F : 0x7E));
  const float a = fabsf(v);
  if (a == 0.0f) return uint8_t(sign);
  int e = 0;
  frexpf(a, &e);  // a = fr 2^e, fr in [0.5, 1): the leading bit is 2^(e - 1)
  if (e - 1 < 1 - bias) return uint8_t(sign | int(ldexpf(a, bias - 1 + m)));  // subnormal
  const int mantissa = int(ldexpf(a, m - (e - 1))) - (1 << m);
  return uint8_t(sign | ((e - 1 + bias) << m) | mantissa);
}

inline float fp8_decode(uint8_t byte, Fp8Format f) {
  const bool e4m3 = f == Fp8Format::kE4M3;
  const int m = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const int e = (byte & 0x7F) >> m, mantissa = byte & ((1 << m) - 1);
  float v;
  if (e4m3 && e == 15 && mantissa == 7) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (!e4m3 && e == 31) {
    v = mantissa ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else if (e == 0) {
    v = std::ldexp(float(mantissa), 1 - bias - m);
  } else {
    v = std::ldexp(float((1 << m) | mantissa), e - bias - m);
  }
  return (byte & 0x80) ? -v : v;
}

#define MTRON_FP8_OPS(OP)                                                                      \
  OP(void, fp8_quantize, fp8_quantize_f32, fp8_quantize_contract,                              \
     (bf16 * dst, float* amax, const float* src, float scale, Fp8Format format, int64_t n),    \
     (dst, amax, src, scale, format, n))                                                       \
  OP(void, fp8_quantize, fp8_quantize_bf16, fp8_quantize_contract,                             \
     (bf16 * dst, float* amax, const bf16* src, float scale, Fp8Format format, int64_t n),     \
     (dst, amax, src, scale, format, n))                                                       \
  OP(void, abs_max, abs_max_f32, abs_max_contract, (float* amax, const float* src, int64_t n), \
     (amax, src, n))                                                                           \
  OP(void, abs_max, abs_max_bf16, abs_max_contract, (float* amax, const bf16* src, int64_t n), \
     (amax, src, n))
MTRON_FP8_OPS(MT_OP_DECLARE)

}  // namespace mtron::kernels
