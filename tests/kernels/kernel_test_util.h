// defines: test helpers for the kernel tests: random data, closeness checks with per-dtype
//          tolerances, central finite differences on the float64 reference.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "mtron/core/error.h"
#include "mtron/kernels/ctx.h"

namespace mtron::kernels::test {

inline const Ctx kCpu{};

// N(0, scale^2) values from a fixed seed.
inline std::vector<float> randn(int64_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// |got - ref| <= atol + rtol |ref| elementwise (NaN never passes); reports the first failures.
inline void expect_close(const float* got,
                         const float* ref,
                         int64_t n,
                         double atol,
                         double rtol,
                         const std::string& what) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double g = got[i], r = ref[i];
    const bool same_inf = std::isinf(r) && g == r;
    if (same_inf || std::abs(g - r) <= atol + rtol * std::abs(r)) continue;
    if (++bad <= 5) ADD_FAILURE() << what << ": index " << i << " got " << g << " want " << r;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << n << " elements differ";
}

inline void expect_close(const std::vector<float>& got,
                         const std::vector<float>& ref,
                         double atol,
                         double rtol,
                         const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  expect_close(got.data(), ref.data(), int64_t(got.size()), atol, rtol, what);
}

// Checks the analytic gradient `grad` of loss() with respect to x against central differences,
// perturbing at most `max_checks` evenly spread entries of x in place (restored afterwards).
inline void expect_fd(std::vector<double>& x,
                      const std::vector<double>& grad,
                      const std::function<double()>& loss,
                      const std::string& what,
                      int64_t max_checks = 64,
                      double h = 1e-6,
                      double tol = 1e-6) {
  ASSERT_EQ(x.size(), grad.size()) << what;
  const int64_t n = int64_t(x.size());
  const int64_t step = std::max<int64_t>(1, n / max_checks);
  for (int64_t i = 0; i < n; i += step) {
    const double x0 = x[size_t(i)];
    x[size_t(i)] = x0 + h;
    const double lp = loss();
    x[size_t(i)] = x0 - h;
    const double lm = loss();
    x[size_t(i)] = x0;
    const double fd = (lp - lm) / (2 * h);
    EXPECT_NEAR(grad[size_t(i)], fd, tol * std::max(1.0, std::abs(fd)))
        << what << ": d loss / d x[" << i << "]";
  }
}

// sum_i out[i] * R[i]: the random projection whose gradient with respect to out is R.
inline double project(const std::vector<double>& out, const std::vector<double>& R) {
  double s = 0;
  for (size_t i = 0; i < out.size(); ++i) s += out[i] * R[i];
  return s;
}

}  // namespace mtron::kernels::test
