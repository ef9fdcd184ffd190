// The reference kernels of kernels/rope.h (ref_ops.h).
#pragma once

#include <cmath>

#include "mtron/kernels/ref/common.h"
#include "mtron/kernels/rope.h"

namespace mtron::kernels::ref {

template <typename T>
void qkv_split(T* q, T* k, T* v, const T* qkv, int64_t N, int64_t G, int64_t hpg, int64_t D) {
  const int64_t H = G * hpg;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g)
      for (int64_t j = 0; j < hpg + 2; ++j)
        for (int64_t d = 0; d < D; ++d) {
          const T x = qkv[((n * G + g) * (hpg + 2) + j) * D + d];
          if (j < hpg)
            q[(n * H + g * hpg + j) * D + d] = x;
          else if (j == hpg)
            k[(n * G + g) * D + d] = x;
          else
            v[(n * G + g) * D + d] = x;
        }
}

template <typename T>
void qkv_merge_grad(
    T* dqkv, const T* dq, const T* dk, const T* dv, int64_t N, int64_t G, int64_t hpg, int64_t D) {
  const int64_t H = G * hpg;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g)
      for (int64_t j = 0; j < hpg + 2; ++j)
        for (int64_t d = 0; d < D; ++d)
          dqkv[((n * G + g) * (hpg + 2) + j) * D + d] = j < hpg ? dq[(n * H + g * hpg + j) * D + d]
                                                        : j == hpg ? dk[(n * G + g) * D + d]
                                                                   : dv[(n * G + g) * D + d];
}

template <typename T>
void mla_kv_split(T* k,
                  T* v,
                  const T* kv,
                  const T* kpe,
                  int64_t N,
                  int64_t H,
                  int64_t Dn,
                  int64_t Dr,
                  int64_t Dv) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h) {
      const T* src = kv + (n * H + h) * (Dn + Dv);
      for (int64_t d = 0; d < Dn; ++d) k[(n * H + h) * (Dn + Dr) + d] = src[d];
      for (int64_t d = 0; d < Dr; ++d) k[(n * H + h) * (Dn + Dr) + Dn + d] = kpe[n * Dr + d];
      for (int64_t d = 0; d < Dv; ++d) v[(n * H + h) * Dv + d] = src[Dn + d];
    }
}

template <typename T>
void mla_kv_merge_grad(T* dkv,
                       T* dkpe,
                       const T* dk,
                       const T* dv,
                       int64_t N,
                       int64_t H,
                       int64_t Dn,
                       int64_t Dr,
                       int64_t Dv) {
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t d = 0; d < Dr; ++d) {
      Acc<T> sum = 0;
      for (int64_t h = 0; h < H; ++h) sum += dk[(n * H + h) * (Dn + Dr) + Dn + d];
      dkpe[n * Dr + d] = T(sum);
    }
    for (int64_t h = 0; h < H; ++h) {
      T* dst = dkv + (n * H + h) * (Dn + Dv);
      for (int64_t d = 0; d < Dn; ++d) dst[d] = dk[(n * H + h) * (Dn + Dr) + d];
      for (int64_t d = 0; d < Dv; ++d) dst[Dn + d] = dv[(n * H + h) * Dv + d];
    }
  }
}

template <typename T>
void rotate(T* x,
            const int32_t* pos,
            int64_t N,
            int64_t nh,
            int64_t D,
            int64_t R,
            const RopeFreq& f,
            int64_t group,
            int sign) {
  const int64_t half = R / 2;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < half; ++i) {
      // Megatron: freqs = pos * inv_freq (fp32), cos/sin (times YaRN's mscale)
      const float angle = float(pos[n]) * f.inv_freq(i, R);
      const Acc<T> c = std::cos(double(angle)) * f.mscale,
                   s = sign * std::sin(double(angle)) * f.mscale;
      for (int64_t h = 0; h < nh; ++h) {
        if (!rope_rotates(h, group)) continue;
        T* row = x + (n * nh + h) * D + f.pair_first(i);
        const int64_t step = f.pair_step(R);
        const Acc<T> a = row[0], b = row[step];
        row[0] = T(a * c - b * s);
        row[step] = T(b * c + a * s);
      }
    }
}

template <typename T>
void rope_forward(T* x,
                  const int32_t* pos,
                  int64_t N,
                  int64_t nh,
                  int64_t D,
                  int64_t rot_dim,
                  const RopeFreq& f,
                  int64_t group) {
  rotate(x, pos, N, nh, D, rot_dim, f, group, 1);
}

template <typename T>
void rope_backward(T* dx,
                   const int32_t* pos,
                   int64_t N,
                   int64_t nh,
                   int64_t D,
                   int64_t rot_dim,
                   const RopeFreq& f,
                   int64_t group) {
  rotate(dx, pos, N, nh, D, rot_dim, f, group, -1);
}

}  // namespace mtron::kernels::ref
