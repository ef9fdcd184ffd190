#include "mtron/optim/muon.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "mtron/core/error.h"
#include "mtron/kernels/device.h"
#include "mtron/kernels/elementwise.h"
#include "mtron/kernels/gemm.h"
#include "mtron/kernels/gemm_operand.h"
#include "mtron/kernels/muon.h"

namespace mtron::optim {
namespace {

using Coeffs = std::vector<std::array<float, 3>>;

struct CoefficientSet {
  const char* name;
  bool repeat_last;  // after the list its last entry, else the list again
  Coeffs list;
};

// The published Newton-Schulz coefficient sets (Keller Jordan's quintic, Polar Express, CANS,
// AOL, DeepSeek-V4's), as the emerging_optimizers package names them.
const std::vector<CoefficientSet>& sets() {
  static const std::vector<CoefficientSet> s = {
      {"simple", false, {{3.4445f, -4.7750f, 2.0315f}}},
      {"quintic",
       false,
       {{4.0848f, -6.8946f, 2.9270f},
        {3.9505f, -6.3029f, 2.6377f},
        {3.7418f, -5.5913f, 2.3037f},
        {2.8769f, -3.1427f, 1.2046f},
        {2.8366f, -3.0525f, 1.2012f}}},
      {"polar_express",
       true,
       {{8.2051f, -22.9019f, 16.4607f},
        {4.0664f, -2.8612f, 0.5184f},
        {3.9096f, -2.8234f, 0.5250f},
        {3.2856f, -2.4153f, 0.4853f},
        {2.2779f, -1.6198f, 0.3985f},
        {1.8726f, -1.2307f, 0.3585f},
        {1.8564f, -1.2132f, 0.3568f},
        {1.8750f, -1.2500f, 0.3750f}}},
      {"cans",
       true,
       {{8.4703f, -25.1081f, 18.6293f},
        {4.1828f, -3.1087f, 0.5806f},
        {3.9619f, -2.9541f, 0.5630f},
        {3.2866f, -2.4647f, 0.5074f},
        {2.2737f, -1.6447f, 0.4162f}}},
      {"aol",
       false,
       {{4.0098f, -7.0585f, 2.4635f},
        {3.4585f, -5.5479f, 2.5959f},
        {2.7573f, -3.2939f, 1.4254f},
        {2.7215f, -3.0494f, 1.3169f}}},
      {"deepseekv4",
       true,
       {{3.4445f, -4.7750f, 2.0315f},
        {3.4445f, -4.7750f, 2.0315f},
        {3.4445f, -4.7750f, 2.0315f},
        {3.4445f, -4.7750f, 2.0315f},
        {3.4445f, -4.7750f, 2.0315f},
        {3.4445f, -4.7750f, 2.0315f},
        {3.4445f, -4.7750f, 2.0315f},
        {3.4445f, -4.7750f, 2.0315f},
        {2.0f, -1.5f, 0.5f},
        {2.0f, -1.5f, 0.5f}}},
      {"cubic5",
       false,
       {{3.3656576f, -3.3420992f, 0.0f},
        {2.5744352f, -1.4957376f, 0.0f},
        {2.5368962f, -1.4312570f, 0.0f},
        {2.4418906f, -1.2764040f, 0.0f},
        {2.2230472f, -0.9630650f, 0.0f}}},
  };
  return s;
}

double scale_factor(MuonScale mode, double rows, double cols) {
  switch (mode) {
    case MuonScale::kSpectral:
      return std::sqrt(std::max(rows, cols));
    case MuonScale::kUnitRmsNorm:
      return std::sqrt(rows / cols);
    case MuonScale::kShapeScaling:
      return std::sqrt(std::max(1.0, rows / cols));
  }
  return 1.0;
}

int64_t product(const Shape& s, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t d = from; d < to; ++d) n *= s[d];
  return n;
}

}  // namespace

Coeffs ns_coefficients(const std::string& type, int steps) {
  for (const CoefficientSet& s : sets()) {
    if (type != s.name) continue;
    if (type == "cubic5" && size_t(steps) != s.list.size()) return {};
    Coeffs out;
    for (int i = 0; i < steps; ++i) {
      const size_t n = s.list.size(), j = size_t(i);
      out.push_back(s.list[s.repeat_last ? std::min(j, n - 1) : j % n]);
    }
    return out;
  }
  return {};
}

std::string ns_coefficient_names() {
  std::string names;
  for (const CoefficientSet& s : sets()) names += std::string(names.empty() ? "" : ", ") + s.name;
  return names;
}

std::string MuonConfig::describe() const {
  return fmt::format(
      "Muon (momentum {:g}{}, {} scale{}, {} Newton-Schulz x {} in {}{}) for the weight "
      "matrices, AdamW for the rest",
      momentum, nesterov ? " Nesterov" : "", name_of(kMuonScaleNames, scale),
      extra_scale != 1.0f ? fmt::format(" x {:g}", extra_scale) : "", coefficients, ns_steps,
      bf16 ? "bf16" : "fp32", split_qkv ? ", QKV split" : "");
}

Muon::Muon(const MuonConfig& cfg, const kernels::Ctx& k)
    : cfg_(cfg), coeffs_(ns_coefficients(cfg.coefficients, cfg.ns_steps)), k_(k) {
  MT_CHECK(!coeffs_.empty(), "--muon-coefficient-type ", cfg.coefficients, " with ", cfg.ns_steps,
           " steps: not one of ", ns_coefficient_names(), " (cubic5 takes exactly 5 steps)");
  norm_ = Tensor::empty({1}, DType::kF64, k.device);
}

float* Muon::buffer(Tensor& t, int64_t n, DType dtype) {
  if (!t.defined() || t.numel() < n) t = Tensor::empty({n}, dtype, k_.device);
  return static_cast<float*>(t.raw());
}

void Muon::orthogonalize(int64_t r, int64_t c, float scale) {
  using kernels::Trans;
  const bool t = r > c;  // iterate on X^T: the Gram matrix is c x c
  const int64_t m = t ? c : r, n = r * c;
  float* x = buffer(x_, n);
  // X / max(|X|_F, 1e-15), the norm left on the device.
  double* total = static_cast<double*>(norm_.raw());
  kernels::fill_zero(k_, total, sizeof(double));
  kernels::sum_squares(k_, total, x, n);
  kernels::scale_by_inverse_norm(k_, x, total, 1e-15, n);
  float* y = buffer(y_, n);
  float* a = buffer(a_, m * m);
  float* b = buffer(b_, m * m);
  // A = X X^T, or X^T X for the transposed iteration.
  const Trans ta = t ? Trans::kT : Trans::kN, tb = t ? Trans::kN : Trans::kT;
  if (!cfg_.bf16) {
    for (const auto& [ca, cb, cc] : coeffs_) {
      kernels::gemm(k_, ta, tb, m, m, t ? r : c, 1.0f, x, c, x, c, 0.0f, a, m);
      float* g = a;  // the polynomial in A that multiplies X
      float alpha = cb;
      if (cc != 0.0f) {  // B = b A + c A A
        kernels::copy(k_, b, a, int64_t(sizeof(float)) * m * m);
        kernels::gemm(k_, Trans::kN, Trans::kN, m, m, m, cc, a, m, a, m, cb, b, m);
        g = b;
        alpha = 1.0f;
      }
      kernels::copy(k_, y, x, int64_t(sizeof(float)) * n);  // Y = a X + alpha (G X or X G^T)
      if (t) {
        kernels::gemm(k_, Trans::kN, Trans::kT, r, c, c, alpha, x, c, g, m, ca, y, c);
      } else {
        kernels::gemm(k_, Trans::kN, Trans::kN, r, c, r, alpha, g, m, x, c, ca, y, c);
      }
      std::swap(x, y);
    }
  } else {
    bf16* xb = reinterpret_cast<bf16*>(buffer(xb_, n, DType::kBF16));
    bf16* ab = reinterpret_cast<bf16*>(buffer(ab_, m * m, DType::kBF16));
    bf16* bb = reinterpret_cast<bf16*>(buffer(bb_, m * m, DType::kBF16));
    kernels::convert(k_, xb, x, n);
    for (const auto& [ca, cb, cc] : coeffs_) {
      kernels::gemm(k_, ta, tb, m, m, t ? r : c, 1.0f, xb, c, xb, c, 0.0f, a, m);
      kernels::convert(k_, ab, a, m * m);
      const bf16* g = ab;
      float alpha = cb;
      if (cc != 0.0f) {
        kernels::convert(k_, b, ab, m * m);
        kernels::gemm(k_, Trans::kN, Trans::kN, m, m, m, cc, ab, m, ab, m, cb, b, m);
        kernels::convert(k_, bb, b, m * m);
        g = bb;
        alpha = 1.0f;
      }
      kernels::convert(k_, y, xb, n);
      if (t) {
        kernels::gemm(k_, Trans::kN, Trans::kT, r, c, c, alpha, xb, c, g, m, ca, y, c);
      } else {
        kernels::gemm(k_, Trans::kN, Trans::kN, r, c, r, alpha, g, m, xb, c, ca, y, c);
      }
      kernels::convert(k_, xb, y, n);
    }
    kernels::convert(k_, x, xb, n);
  }
  if (x != x_.raw()) kernels::copy(k_, x_.raw(), x, int64_t(sizeof(float)) * n);
  kernels::scale_inplace(k_, static_cast<float*>(x_.raw()), scale, n);
}

void Muon::step(const MuonMatrix& mm,
                float* master,
                const float* grad,
                void* compute,
                DType compute_dtype,
                float* momentum,
                double lr,
                float weight_decay,
                float grad_scale) {
  const int64_t n = numel(mm.local), total = numel(mm.global);
  const int64_t cols = mm.global.back(), rows = total / cols;
  float* w = master + mm.begin;
  // t = (1 - mu) g;  M = mu M + t;  U = nesterov ? mu M + t : M
  float* u = buffer(u_, n);
  kernels::muon_momentum(k_, momentum, u, grad + mm.begin, grad_scale, cfg_.momentum, cfg_.nesterov,
                         n);
  if (mm.weight_decay && weight_decay != 0.0f)
    kernels::scale_inplace(k_, w, float(1.0 - lr * double(weight_decay)), n);

  // The whole matrix in its global order: each rank's slice along shard_dim is `outer` blocks of
  // `inner` elements, at a stride of `stride` in the whole.
  const bool sliced = mm.group && mm.group->size() > 1 && mm.shard_dim >= 0;
  float* full = u;
  int64_t outer = 1, inner = n, stride = n;
  if (sliced) {
    const size_t s = size_t(mm.shard_dim);
    const int64_t tail = product(mm.global, s + 1, mm.global.size());
    outer = product(mm.global, 0, s);
    inner = mm.local[s] * tail;
    stride = mm.global[s] * tail;
    full = buffer(full_, total);
    if (outer == 1) {  // sliced along the first dim: the ranks' slices in order are the whole
      mm.group->all_gather(u, full, n, DType::kF32);
    } else {
      float* stage = buffer(stage_, total);
      mm.group->all_gather(u, stage, n, DType::kF32);
      for (int r = 0; r < mm.group->size(); ++r) {
        kernels::copy_rows(k_, full + r * inner, stride * 4, stage + r * n, inner * 4, inner * 4,
                           outer);
      }
    }
  }
  // Each part (the whole, or the QKV weight's q, k and v rows of every group) through x_.
  std::vector<std::pair<int64_t, int64_t>> parts;  // (first row in a group, rows per group)
  int64_t group_rows = rows;
  if (mm.qkv_rows.empty()) {
    parts.emplace_back(0, rows);
  } else {
    group_rows = 0;
    for (int64_t q : mm.qkv_rows) {
      parts.emplace_back(group_rows, q);
      group_rows += q;
    }
  }
  const int64_t groups = rows / group_rows;
  for (const auto& [first, prow] : parts) {
    const int64_t pr = groups * prow, row_bytes = 4 * prow * cols;
    float* x = buffer(x_, pr * cols);
    kernels::copy_rows(k_, x, row_bytes, full + first * cols, 4 * group_rows * cols, row_bytes,
                       groups);
    const double sf = scale_factor(cfg_.scale, double(pr), double(cols)) * cfg_.extra_scale;
    orthogonalize(pr, cols, float(sf));
    kernels::copy_rows(k_, full + first * cols, 4 * group_rows * cols, x_.raw(), row_bytes,
                       row_bytes, groups);
  }
  float* o = full;
  if (sliced) {
    o = u;
    const int64_t at = mm.shard_offset * (inner / mm.local[size_t(mm.shard_dim)]);
    kernels::copy_rows(k_, o, inner * 4, full + at, stride * 4, inner * 4, outer);
  }
  kernels::scale_inplace(k_, o, float(-lr), n);
  kernels::add(k_, w, w, o, n);
  if (compute) {
    kernels::narrow_operand(
        k_, compute_dtype,
        static_cast<char*>(compute) + size_t(mm.begin) * dtype_size(compute_dtype), w, n);
  }
}

}  // namespace mtron::optim
