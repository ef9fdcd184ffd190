// defines: add, scale_inplace, convert (f32<->bf16, f32<->f16), bias_add, bias_backward,
//          sum_squares, fill_zero, fill, copy, copy_rows, DropoutRows, dropout
//
// fill_zero, fill, copy and copy_rows are the device-generic forms of memset, std::fill, memcpy
// and cudaMemcpy2D: code above kernels uses them on memory that may live on a GPU.
#pragma once

#include <cstdint>

#include "mtron/core/philox.h"
#include "mtron/kernels/op.h"

namespace mtron::kernels {

// Hidden dropout of token rows (sequence-major, n = s*B + b): row r of the call is row
// row0 + r of the micro-batch, sequence b = (row0 + r) % B, global sample sample0 + b, global
// position pos[r]; its element f is element ((sample0 + b) * S + pos[r]) * width + f of the key's
// stream (core/philox.h dropout_scales), so every layout drops what the 1-process run drops.
struct DropoutRows {
  float p = 0.0f;
  PhiloxKey key{0, 0};
  int64_t width = 0, B = 1, row0 = 0, sample0 = 0, S = 0;
};

// add:           out[i] = a[i] + b[i]  (out may alias a or b)
// scale_inplace: x[i] *= s
// convert:       dst[i] = round_to_nearest_even(src[i]) (to bf16 or f16), and back (to fp32,
//                exact); to f16, magnitudes from 65520 up become infinity (as on a GPU)
// bias_add:      out[N,C] += bias[C] broadcast over rows
// bias_backward: dbias[C] += sum over rows of dout[N,C] (fp32 or bf16 dout; sums in fp32)
// bias_backward_narrow: bias_backward of an fp32 dout, bit for bit, and dout16 = convert(dout)
//                (the GEMMs' bf16 input), in one pass
// sum_squares:   *total += sum of x[i]^2 accumulated in double, total on ctx's device (the global
//                gradient norm adds its runs there and reads the total once)
// fill_zero:     x[0, bytes) = 0
// fill:          x[i] = value
// copy:          dst[0, bytes) = src[0, bytes), both on ctx's device; the ranges must not overlap
// copy_rows:     for r < rows: dst + r * dst_pitch [0, row_bytes) = src + r * src_pitch
//                [0, row_bytes) (pitches in bytes, each >= row_bytes); no row may overlap another
// dropout:       x[r, f] *= z (0 or 1/(1-p)) for rows r < rows of width d.width (DropoutRows);
//                pos [rows] on ctx's device. Forward and backward alike (the same mask).
#define MTRON_ELEMENTWISE_OPS(OP)                                                                 \
  OP(void, add, add, add_contract, (float* out, const float* a, const float* b, int64_t n),       \
     (out, a, b, n))                                                                              \
  OP(void, scale_inplace, scale_inplace, scale_inplace_contract, (float* x, float s, int64_t n),  \
     (x, s, n))                                                                                   \
  OP(void, convert, convert_to_bf16, convert_contract, (bf16 * dst, const float* src, int64_t n), \
     (dst, src, n))                                                                               \
  OP(void, convert, convert_to_fp32, convert_contract, (float* dst, const bf16* src, int64_t n),  \
     (dst, src, n))                                                                               \
  OP(void, convert, convert_to_fp16, convert_contract, (f16 * dst, const float* src, int64_t n),  \
     (dst, src, n))                                                                               \
  OP(void, convert, convert_fp16_to_fp32, convert_contract,                                       \
     (float* dst, const f16* src, int64_t n), (dst, src, n))                                      \
  OP(void, bias_add, bias_add, bias_add_contract,                                                 \
     (float* out, const float* bias, int64_t N, int64_t C), (out, bias, N, C))                    \
  OP(void, bias_backward, bias_backward, bias_backward_contract,                                  \
     (float* dbias, const float* dout, int64_t N, int64_t C), (dbias, dout, N, C))                \
  OP(void, bias_backward, bias_backward_bf16, bias_backward_contract,                             \
     (float* dbias, const bf16* dout, int64_t N, int64_t C), (dbias, dout, N, C))                 \
  OP(void, bias_backward_narrow, bias_backward_narrow, bias_backward_narrow_contract,             \
     (float* dbias, bf16* dout16, const float* dout, int64_t N, int64_t C),                       \
     (dbias, dout16, dout, N, C))                                                                 \
  OP(void, sum_squares, sum_squares, sum_squares_contract,                                        \
     (double* total, const float* x, int64_t n), (total, x, n))                                   \
  OP(void, fill_zero, fill_zero, bytes_contract, (void* x, int64_t bytes), (x, bytes))            \
  OP(void, fill, fill, fill_contract, (float* x, float value, int64_t n), (x, value, n))          \
  OP(void, copy, copy, bytes_contract, (void* dst, const void* src, int64_t bytes),               \
     (dst, src, bytes))                                                                           \
  OP(void, copy_rows, copy_rows, copy_rows_contract,                                              \
     (void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t row_bytes,        \
      int64_t rows),                                                                              \
     (dst, dst_pitch, src, src_pitch, row_bytes, rows))                                           \
  OP(void, dropout, dropout, dropout_contract,                                                    \
     (float* x, const int32_t* pos, int64_t rows, const DropoutRows& d), (x, pos, rows, d))
MTRON_ELEMENTWISE_OPS(MT_OP_DECLARE)

}  // namespace mtron::kernels
