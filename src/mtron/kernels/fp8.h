// defines: Fp8Format, fp8_max, fp8_quantize (from fp32 and bf16), abs_max (of fp32 and bf16)
//
// FP8 quantisation with Transformer Engine's semantics, emulated exactly: every E4M3 and E5M2
// value is a bf16 value, so a quantised tensor is stored as bf16 holding exact FP8 values, and the
// bf16 GEMM (fp32 accumulation) on them computes what an FP8 GEMM computes.
//
// fp8_quantize: dst[i] = fp8(src[i] * scale), the product rounded to fp32 first and then to the
//                format's nearest value, ties to even (subnormals kept); finite values beyond the
//                format's largest and infinities saturate to +-fp8_max (TE's saturating cast);
//                NaN stays NaN. amax (one float on ctx's device; skipped when null):
//                *amax = max(*amax, max_i |src[i]|) of the unscaled input, NaN elements ignored
//                (fmaxf), so one amax accumulates over several calls.
// abs_max:       the amax update alone.
#pragma once

#include <cstdint>

#include "mtron/kernels/op.h"

namespace mtron::kernels {

// E4M3 (Transformer Engine's e4m3fn: 4 exponent bits, 3 mantissa bits, no infinities, max 448)
// and E5M2 (5 exponent bits, 2 mantissa bits, max 57344).
enum class Fp8Format : int { kE4M3, kE5M2 };

constexpr float fp8_max(Fp8Format f) {
  return f == Fp8Format::kE4M3 ? 448.0f : 57344.0f;
}

#define MTRON_FP8_OPS(OP)                                                                   \
  OP(void, fp8_quantize, fp8_quantize_f32, no_contract,                                     \
     (bf16 * dst, float* amax, const float* src, float scale, Fp8Format format, int64_t n), \
     (dst, amax, src, scale, format, n))                                                    \
  OP(void, fp8_quantize, fp8_quantize_bf16, no_contract,                                    \
     (bf16 * dst, float* amax, const bf16* src, float scale, Fp8Format format, int64_t n),  \
     (dst, amax, src, scale, format, n))                                                    \
  OP(void, abs_max, abs_max_f32, no_contract, (float* amax, const float* src, int64_t n),   \
     (amax, src, n))                                                                        \
  OP(void, abs_max, abs_max_bf16, no_contract, (float* amax, const bf16* src, int64_t n),   \
     (amax, src, n))
MTRON_FP8_OPS(MT_OP_DECLARE)

}  // namespace mtron::kernels
