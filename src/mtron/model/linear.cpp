#include "mtron/model/linear.h"

#include "mtron/kernels/elementwise.h"

namespace mtron::model {

using kernels::Trans;

GemmInputRoom gemm_input_room(const RunCtx& rc, Arena& arena, int64_t n) {
  return {rc.precision == Precision::kFP32 ? nullptr : arena.alloc<uint16_t>(n)};
}

Act as_gemm_input(const RunCtx& rc, const GemmInputRoom& room, const float* x, int64_t n) {
  if (rc.precision == Precision::kFP32) return Act::of(x);
  return kernels::narrow_operand(rc.k, compute_dtype(rc.precision), room.data, x, n);
}

Act as_gemm_input(const RunCtx& rc, Arena& arena, const float* x, int64_t n) {
  return as_gemm_input(rc, gemm_input_room(rc, arena, n), x, n);
}

float* gemm_input_buffer(const RunCtx& rc, Arena& keep, Arena& scratch, int64_t n) {
  return (rc.precision == Precision::kFP32 ? keep : scratch).alloc<float>(n);
}

void linear_forward(const RunCtx& rc,
                    float* y,
                    Act x,
                    Act w,
                    const float* bias,
                    int64_t N,
                    int64_t in,
                    int64_t out) {
  kernels::gemm(rc.k, Trans::kN, Trans::kT, N, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
  if (bias) kernels::bias_add(rc.k, y, bias, N, out);
}

void linear_backward(const RunCtx& rc,
                     Arena& scratch,
                     float* dx,
                     float* dw,
                     float* db,
                     const float* dy,
                     Act x,
                     Act w,
                     int64_t N,
                     int64_t in,
                     int64_t out) {
  if (db) kernels::bias_backward(rc.k, db, dy, N, out);
  const Act g = as_gemm_input(rc, scratch, dy, N * out);
  if (dx) kernels::gemm(rc.k, Trans::kN, Trans::kN, N, in, out, 1.0f, g, out, w, in, 0.0f, dx, in);
  kernels::gemm(rc.k, Trans::kT, Trans::kN, out, in, N, 1.0f, g, out, x, in, 1.0f, dw, in);
}

}  // namespace mtron::model
