// CPU fused-QKV split/merge, multi-latent attention's K/V split/merge and rotary position
// embedding (rotate-half).
//
// RoPE angles follow Megatron-Core exactly in fp32: inv_freq_i = 1 / base^(float(2i)/R),
// angle = float(pos) * inv_freq_i, cos/sin of the fp32 angle. They are computed once per token
// (shared by its nh heads) into a small per-thread table.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "mtron/kernels/cpu/rope.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// clang-format off
#include <hwy/highway.h>
#include "mtron/kernels/cpu/simd-inl.h"
// clang-format on

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "mtron/core/dtype.h"
#include "mtron/kernels/cpu/cpu_ops.h"
#include "mtron/kernels/cpu/parallel.h"

HWY_BEFORE_NAMESPACE();
namespace mtron::kernels::cpu::HWY_NAMESPACE {
namespace {

void copy_rows(float* dst, const float* src, int64_t n) {
  std::memcpy(dst, src, size_t(n) * sizeof(float));
}
void copy_rows(bf16* dst, const float* src, int64_t n) {
  narrow_into(DF(), dst, src, n);
}

// qkv_merge_grad to a float or bf16 dqkv.
template <typename T>
void merge_qkv(MT_PARAMS_OF(qkv_merge_grad, T)) {
  const int64_t H = G * hpg;
  parallel_rows(N, threads_for(N * (H + 2 * G) * D * int64_t(4 + sizeof(T))), [&](int64_t n) {
    for (int64_t g = 0; g < G; ++g) {
      T* dst = dqkv + ((n * G + g) * (hpg + 2)) * D;
      copy_rows(dst, dq + (n * H + g * hpg) * D, hpg * D);
      copy_rows(dst + hpg * D, dk + (n * G + g) * D, D);
      copy_rows(dst + (hpg + 1) * D, dv + (n * G + g) * D, D);
    }
  });
}

// x[0, k) = v, rounded to bf16 where x is bf16 (narrow_into's rounding).
HWY_INLINE void store_f32(DF d, VF v, float* HWY_RESTRICT x, size_t k) {
  store(d, v, x, k);
}
HWY_INLINE void store_f32(DF d, VF v, bf16* HWY_RESTRICT x, size_t k) {
  store(DU16(), to_bf16(d, v), bits(x), k);
}

HWY_INLINE float to_f32(float v) {
  return v;
}
HWY_INLINE float to_f32(bf16 v) {
  return bf16_to_float(v);
}
template <typename T>
HWY_INLINE T from_f32(float v) {
  if constexpr (std::is_same_v<T, bf16>) {
    return float_to_bf16(v);
  } else {
    return v;
  }
}

// R = rot_dim. sign = +1: forward rotation by +angle; -1: the adjoint (rotation by -angle). bf16
// x: each value widened, rotated in fp32 and rounded once.
template <typename T>
void rope_apply(MT_PARAMS_OF(rope_forward, T), float sign) {
  const DF d;
  const int64_t R = rot_dim, half = R / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) inv_freq[size_t(i)] = f.inv_freq(i, R);
  parallel_ranges(N, threads_for(N * nh * D * 8), 1, [&](int64_t n0, int64_t n1) {
    std::vector<float> cs(size_t(2 * half));
    float* cosv = cs.data();
    float* sinv = cs.data() + half;
    for (int64_t n = n0; n < n1; ++n) {
      for (int64_t i = 0; i < half; ++i) {
        const float a = float(pos[n]) * inv_freq[size_t(i)];
        cosv[i] = std::cos(a) * f.mscale;
        sinv[i] = sign * std::sin(a) * f.mscale;
      }
      for (int64_t h = 0; h < nh; ++h) {
        if (!rope_rotates(h, group)) continue;
        T* x1 = x + (n * nh + h) * D;
        if (f.interleaved) {  // pairs (2i, 2i + 1): scalar, as the vector body's arithmetic
          for (int64_t i = 0; i < half; ++i) {
            const float a = to_f32(x1[2 * i]), b = to_f32(x1[2 * i + 1]);
            x1[2 * i] = from_f32<T>(std::fma(-b, sinv[i], a * cosv[i]));
            x1[2 * i + 1] = from_f32<T>(std::fma(a, sinv[i], b * cosv[i]));
          }
          continue;
        }
        T* x2 = x1 + half;
        for_lanes(d, 0, half, [&](int64_t i, size_t k) {
          const VF a = load_f32(d, x1 + i, k), b = load_f32(d, x2 + i, k);
          const VF c = load(d, cosv + i, k), s = load(d, sinv + i, k);
          store_f32(d, hn::NegMulAdd(b, s, hn::Mul(a, c)), x1 + i, k);
          store_f32(d, hn::MulAdd(a, s, hn::Mul(b, c)), x2 + i, k);
        });
      }
    }
  });
}

}  // namespace

void qkv_split(MT_PARAMS(qkv_split)) {
  const int64_t H = G * hpg;
  parallel_rows(N, threads_for(N * (H + 2 * G) * D * 8), [&](int64_t n) {
    for (int64_t g = 0; g < G; ++g) {
      const float* src = qkv + ((n * G + g) * (hpg + 2)) * D;
      copy_rows(q + (n * H + g * hpg) * D, src, hpg * D);
      copy_rows(k + (n * G + g) * D, src + hpg * D, D);
      copy_rows(v + (n * G + g) * D, src + (hpg + 1) * D, D);
    }
  });
}

void qkv_merge_grad(MT_PARAMS(qkv_merge_grad)) {
  merge_qkv(dqkv, dq, dk, dv, N, G, hpg, D);
}

void qkv_merge_grad_bf16(MT_PARAMS(qkv_merge_grad_bf16)) {
  merge_qkv(dqkv, dq, dk, dv, N, G, hpg, D);
}

void mla_kv_split(MT_PARAMS(mla_kv_split)) {
  const int64_t Dk = Dn + Dr;
  parallel_rows(N, threads_for(N * H * (Dk + Dv) * 8), [&](int64_t n) {
    for (int64_t h = 0; h < H; ++h) {
      const float* src = kv + (n * H + h) * (Dn + Dv);
      copy_rows(k + (n * H + h) * Dk, src, Dn);
      copy_rows(k + (n * H + h) * Dk + Dn, kpe + n * Dr, Dr);
      copy_rows(v + (n * H + h) * Dv, src + Dn, Dv);
    }
  });
}

void mla_kv_merge_grad(MT_PARAMS(mla_kv_merge_grad)) {
  const int64_t Dk = Dn + Dr;
  parallel_rows(N, threads_for(N * H * (Dk + Dv) * 8), [&](int64_t n) {
    float* sum = dkpe + n * Dr;
    std::fill(sum, sum + Dr, 0.0f);
    for (int64_t h = 0; h < H; ++h) {
      float* dst = dkv + (n * H + h) * (Dn + Dv);
      copy_rows(dst, dk + (n * H + h) * Dk, Dn);
      copy_rows(dst + Dn, dv + (n * H + h) * Dv, Dv);
      const float* dr = dk + (n * H + h) * Dk + Dn;
      for (int64_t d = 0; d < Dr; ++d) sum[d] += dr[d];
    }
  });
}

void rope_forward(MT_PARAMS(rope_forward)) {
  rope_apply(x, pos, N, nh, D, rot_dim, f, group, 1.0f);
}
void rope_forward_bf16(MT_PARAMS(rope_forward_bf16)) {
  rope_apply(x, pos, N, nh, D, rot_dim, f, group, 1.0f);
}
void rope_backward(MT_PARAMS(rope_backward)) {
  rope_apply(dx, pos, N, nh, D, rot_dim, f, group, -1.0f);
}
void rope_backward_bf16(MT_PARAMS(rope_backward_bf16)) {
  rope_apply(dx, pos, N, nh, D, rot_dim, f, group, -1.0f);
}

}  // namespace mtron::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mtron::kernels::cpu {
MTRON_ROPE_OPS(MT_CPU_EXPORT)
}  // namespace mtron::kernels::cpu
#endif  // HWY_ONCE
