// defines: the op table's checking tools: Pair (a host array and its device copy), Checker (runs
//          a case and compares outputs), the inputs' generators, tolerances
//
// Shared by the op table's case files (op_table.cpp, op_table_model.cpp).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>
#include "mtron/core/error.h"
#include "mtron/core/tensor.h"
#include "mtron/kernels/device.h"
#include "mtron/kernels/ops.h"
#include "mtron/kernels/ref/ref_ops.h"
#include "op_table.h"

namespace mtron::kernels::test {

constexpr double kTolF32 = 1e-5;
constexpr double kTolBf16 = 1e-2;
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// The device under test (run_op_table's argument) and the inputs' generator.
inline Ctx g_dev;
inline std::mt19937_64 g_rng;

inline std::vector<float> randn(int64_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(g_rng);
  return v;
}
inline std::vector<float> poison(int64_t n) {
  return std::vector<float>(static_cast<size_t>(n), kNaN);
}
inline std::vector<int32_t> randint(int64_t n, int32_t lo, int32_t hi) {
  std::uniform_int_distribution<int32_t> d(lo, hi - 1);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(g_rng);
  return v;
}
// x rounded to bf16 or f16 (core/dtype.h), and back (exact)
template <typename H>
std::vector<H> narrow(const std::vector<float>& x) {
  std::vector<H> v(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    if constexpr (std::is_same_v<H, bf16>) {
      v[i] = float_to_bf16(x[i]);
    } else {
      v[i] = float_to_f16(x[i]);
    }
  }
  return v;
}
// doubles rounded to float
inline std::vector<float> narrow(const std::vector<double>& x) {
  return std::vector<float>(x.begin(), x.end());
}
template <typename H>
std::vector<float> widen(const std::vector<H>& x) {
  std::vector<float> v(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    if constexpr (std::is_same_v<H, bf16>) {
      v[i] = bf16_to_float(x[i]);
    } else {
      v[i] = f16_to_float(x[i]);
    }
  }
  return v;
}

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::kF32;
}
template <>
constexpr DType dtype_of<bf16>() {
  return DType::kBF16;
}
template <>
constexpr DType dtype_of<f16>() {
  return DType::kF16;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::kI32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::kI64;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::kF64;
}

// One operand: a host array the reference works on, and a copy of the same initial values on the
// device under test, which its kernel works on.
template <typename T>
class Pair {
 public:
  explicit Pair(std::vector<T> init) : host_(std::move(init)) {
    dev_ = Tensor::empty({int64_t(host_.size())}, dtype_of<T>(), g_dev.device);
    copy_from_host(g_dev, dev_.raw(), host_.data(), int64_t(host_.size() * sizeof(T)));
  }
  T* host() { return host_.data(); }
  T* dev() const { return static_cast<T*>(dev_.raw()); }
  const std::vector<T>& host_result() const { return host_; }
  std::vector<T> dev_result() const {
    std::vector<T> out(host_.size());
    copy_to_host(g_dev, out.data(), dev_.raw(), int64_t(out.size() * sizeof(T)));
    return out;
  }

 private:
  std::vector<T> host_;
  Tensor dev_;
};

struct Error2 {
  double rel = 0, max_abs = 0;
  bool nan = false;
};

inline Error2 compare(const std::vector<float>& got, const std::vector<float>& want) {
  Error2 e;
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got[i], r = want[i];
    if (std::isnan(g) || std::isnan(r)) {
      e.nan = true;
      continue;
    }
    if (std::isinf(r) || std::isinf(g)) {
      if (g != r) e.nan = true;  // a mismatched infinity fails like a NaN
      continue;
    }
    num += (g - r) * (g - r);
    den += r * r;
    e.max_abs = std::max(e.max_abs, std::abs(g - r));
  }
  e.rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return e;
}

class Checker {
 public:
  explicit Checker(const OpTableOptions& o) : o_(o) {}

  // Runs one case; an exception (a CUDA error, a failed check) fails it and the run goes on.
  void run(const std::string& op, const std::string& shape, const std::function<void()>& body) {
    if (!o_.filter.empty() && op.find(o_.filter) == std::string::npos) return;
    op_ = op;
    shape_ = shape;
    try {
      body();
    } catch (const std::exception& ex) {
      row(op, "(exception)", kNaN, kNaN, 0, false);
      std::printf("    %s\n", ex.what());
      ++failed_;
    }
  }

  void check(const std::string& what,
             const std::vector<float>& got,
             const std::vector<float>& want,
             double tol) {
    const Error2 e = compare(got, want);
    const bool ok = !e.nan && e.rel <= tol;
    row(op_ + " " + what, shape_, e.nan ? kNaN : e.rel, e.max_abs, tol, ok);
    if (!ok) ++failed_;
  }
  void check(const std::string& what, const Pair<float>& p, double tol) {
    check(what, p.dev_result(), p.host_result(), tol);
  }
  // bf16 or f16 outputs bit for bit, against the host side or against `want`
  template <typename H>
  void check_bits(const std::string& what, const Pair<H>& p) {
    check_bits(what, p, p.host_result());
  }
  template <typename H>
  void check_bits(const std::string& what, const Pair<H>& p, const std::vector<H>& want) {
    const std::vector<H> got = p.dev_result();
    int64_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i) bad += got[i].bits != want[i].bits;
    row(op_ + " " + what, shape_, double(bad), 0, 0, bad == 0);
    if (bad) ++failed_;
  }

  // integer outputs exactly; fp32 ones bit for bit (NaN payloads and signed zeros included)
  template <typename T>
  void check_exact(const std::string& what, const Pair<T>& p) {
    const std::vector<T> got = p.dev_result(), want = p.host_result();
    int64_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i) bad += std::memcmp(&got[i], &want[i], sizeof(T)) != 0;
    row(op_ + " " + what, shape_, double(bad), 0, 0, bad == 0);
    if (bad) ++failed_;
  }

  int failed() const { return failed_; }
  int rows() const { return rows_; }

 private:
  void row(const std::string& what,
           const std::string& shape,
           double rel,
           double max_abs,
           double tol,
           bool ok) {
    ++rows_;
    if (!ok || o_.print_all)
      std::printf("%-28s %-34s %11.3e %11.3e %8.0e  %s\n", what.c_str(), shape.c_str(), rel,
                  max_abs, tol, ok ? "ok" : "FAIL");
    std::fflush(stdout);
  }

  OpTableOptions o_;
  std::string op_, shape_;
  int failed_ = 0, rows_ = 0;
};

}  // namespace mtron::kernels::test
