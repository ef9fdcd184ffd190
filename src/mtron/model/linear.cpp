#include "mtron/model/linear.h"

#include "mtron/kernels/elementwise.h"
#include "mtron/kernels/gemm.h"

namespace mtron::model {

using kernels::Trans;

Act as_gemm_input(const RunCtx& rc, Arena& arena, const float* x, int64_t n) {
  if (rc.precision == Precision::kFP32) return {x, nullptr};
  bf16* xb = arena.alloc<bf16>(n);
  kernels::convert(rc.k, xb, x, n);
  return {nullptr, xb};
}

void linear_forward(const RunCtx& rc,
                    float* y,
                    Act x,
                    Weight w,
                    const float* bias,
                    int64_t N,
                    int64_t in,
                    int64_t out) {
  if (rc.precision == Precision::kFP32) {
    kernels::gemm(rc.k, Trans::kN, Trans::kT, N, out, in, 1.0f, x.f32, in, w.f32, in, 0.0f, y, out);
  } else {
    kernels::gemm(rc.k, Trans::kN, Trans::kT, N, out, in, 1.0f, x.b16, in, w.b16, in, 0.0f, y, out);
  }
  if (bias) kernels::bias_add(rc.k, y, bias, N, out);
}

void linear_backward(const RunCtx& rc,
                     Arena& scratch,
                     float* dx,
                     float* dw,
                     float* db,
                     const float* dy,
                     Act x,
                     Weight w,
                     int64_t N,
                     int64_t in,
                     int64_t out) {
  if (db) kernels::bias_backward(rc.k, db, dy, N, out);
  if (rc.precision == Precision::kFP32) {
    if (dx)
      kernels::gemm(rc.k, Trans::kN, Trans::kN, N, in, out, 1.0f, dy, out, w.f32, in, 0.0f, dx, in);
    kernels::gemm(rc.k, Trans::kT, Trans::kN, out, in, N, 1.0f, dy, out, x.f32, in, 1.0f, dw, in);
  } else {
    bf16* dyb = scratch.alloc<bf16>(N * out);
    kernels::convert(rc.k, dyb, dy, N * out);
    if (dx)
      kernels::gemm(rc.k, Trans::kN, Trans::kN, N, in, out, 1.0f, dyb, out, w.b16, in, 0.0f, dx,
                    in);
    kernels::gemm(rc.k, Trans::kT, Trans::kN, out, in, N, 1.0f, dyb, out, x.b16, in, 1.0f, dw, in);
  }
}

}  // namespace mtron::model
