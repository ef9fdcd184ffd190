// op_check: every kernel of kernels/*.h on the CUDA device against the same kernel on the CPU,
// over several shapes including awkward ones, printing one table row per output compared.
//
//   op_check [--small] [--filter SUBSTRING]
//
// Error measure: the normwise relative error |got - ref| / |ref| (2-norms over the output;
// equal infinities count as equal, any NaN fails). Bounds: 1e-5 for fp32 ops, 1e-2 where the
// op reads or writes bf16 (the issue's acceptance bounds); bf16 outputs of a conversion must
// match bit for bit. Outputs that an op writes (=) are poisoned with NaN beforehand, so an
// element the device forgets to write fails; outputs an op accumulates into (+=) start from the
// same random values on both sides. Exit status 1 if any comparison fails.
//
// --small runs only tiny shapes: that is how CI runs it against the CPU emulation of the CUDA
// kernels (tests: kernels.cuda_sim_op_check). bench/gpu/run.sh runs the full set on a GPU with
// MTRON_CUDA_SYNC=1, so a kernel fault is reported against the kernel that caused it.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "mtron/core/error.h"
#include "mtron/core/tensor.h"
#include "mtron/kernels/activation.h"
#include "mtron/kernels/adamw.h"
#include "mtron/kernels/attention.h"
#include "mtron/kernels/device.h"
#include "mtron/kernels/elementwise.h"
#include "mtron/kernels/embedding.h"
#include "mtron/kernels/gemm.h"
#include "mtron/kernels/norm.h"
#include "mtron/kernels/rope.h"
#include "mtron/kernels/xent.h"

namespace {

using namespace mtron;
using namespace mtron::kernels;

const Ctx kHost{Device::kCPU, nullptr};
const Ctx kDev{Device::kCUDA, nullptr};
constexpr double kTolF32 = 1e-5;
constexpr double kTolBf16 = 1e-2;
const float kNaN = std::numeric_limits<float>::quiet_NaN();

std::mt19937_64 g_rng(20240601);

std::vector<float> randn(int64_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(g_rng);
  return v;
}
std::vector<float> poison(int64_t n) {
  return std::vector<float>(static_cast<size_t>(n), kNaN);
}
std::vector<int32_t> randint(int64_t n, int32_t lo, int32_t hi) {
  std::uniform_int_distribution<int32_t> d(lo, hi - 1);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(g_rng);
  return v;
}
std::vector<bf16> to_bf16(const std::vector<float>& x) {
  std::vector<bf16> v(x.size());
  for (size_t i = 0; i < x.size(); ++i) v[i] = float_to_bf16(x[i]);
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
constexpr DType dtype_of<int32_t>() {
  return DType::kI32;
}

// One operand: a host array the CPU kernel works on, and a device copy of the same initial
// values the CUDA kernel works on.
template <typename T>
class Pair {
 public:
  explicit Pair(std::vector<T> init) : cpu_(std::move(init)) {
    dev_ = Tensor::empty({int64_t(cpu_.size())}, dtype_of<T>(), Device::kCUDA);
    copy_from_host(kDev, dev_.raw(), cpu_.data(), int64_t(cpu_.size() * sizeof(T)));
  }
  T* cpu() { return cpu_.data(); }
  T* dev() const { return static_cast<T*>(dev_.raw()); }
  const std::vector<T>& cpu_result() const { return cpu_; }
  std::vector<T> dev_result() const {
    std::vector<T> out(cpu_.size());
    copy_to_host(kDev, out.data(), dev_.raw(), int64_t(out.size() * sizeof(T)));
    return out;
  }
  int64_t size() const { return int64_t(cpu_.size()); }

 private:
  std::vector<T> cpu_;
  Tensor dev_;
};

struct Error2 {
  double rel = 0, max_abs = 0;
  bool nan = false;
};

Error2 compare(const std::vector<float>& got, const std::vector<float>& ref) {
  Error2 e;
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = got[i], r = ref[i];
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
  explicit Checker(std::string filter) : filter_(std::move(filter)) {}

  bool wanted(const std::string& op) const {
    return filter_.empty() || op.find(filter_) != std::string::npos;
  }

  // Runs one case; an exception (a CUDA error, a failed check) fails it and the run goes on.
  void run(const std::string& op, const std::string& shape, const std::function<void()>& body) {
    if (!wanted(op)) return;
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
             const std::vector<float>& ref,
             double tol) {
    const Error2 e = compare(got, ref);
    const bool ok = !e.nan && e.rel <= tol;
    row(op_ + " " + what, shape_, e.nan ? kNaN : e.rel, e.max_abs, tol, ok);
    if (!ok) ++failed_;
  }
  void check(const std::string& what, const Pair<float>& p, double tol) {
    check(what, p.dev_result(), p.cpu_result(), tol);
  }
  void check_bits(const std::string& what, const Pair<bf16>& p) {
    const std::vector<bf16> got = p.dev_result(), &ref = p.cpu_result();
    int64_t bad = 0;
    for (size_t i = 0; i < ref.size(); ++i) bad += got[i].bits != ref[i].bits;
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
    std::printf("%-28s %-34s %11.3e %11.3e %8.0e  %s\n", what.c_str(), shape.c_str(), rel, max_abs,
                tol, ok ? "ok" : "FAIL");
    std::fflush(stdout);
  }

  std::string filter_, op_, shape_;
  int failed_ = 0, rows_ = 0;
};

// ---- cases ---------------------------------------------------------------------------------

struct GemmCase {
  int64_t M, N, K, pad;  // pad: extra elements per row of every operand (lda > minimum)
};

void check_gemm(Checker& ck, const GemmCase& g, Trans ta, Trans tb, float beta, bool bf) {
  const int64_t lda = (ta == Trans::kN ? g.K : g.M) + g.pad;
  const int64_t ldb = (tb == Trans::kN ? g.N : g.K) + g.pad;
  const int64_t ldc = g.N + g.pad;
  const int64_t a_rows = ta == Trans::kN ? g.M : g.K, b_rows = tb == Trans::kN ? g.K : g.N;
  // padded cases also start one element into their buffers: views into flat buffers are not
  // 256-byte aligned (cuBLASLt's default assumption), bf16 ones not even 4-byte aligned
  const int64_t off = g.pad ? 1 : 0;
  const std::string shape =
      str("M", g.M, " N", g.N, " K", g.K, ta == Trans::kT ? " At" : "",
          tb == Trans::kT ? " Bt" : "", g.pad ? " pad+off" : "", " beta", beta);
  ck.run(bf ? "gemm.bf16" : "gemm.fp32", shape, [&] {
    auto a = randn(a_rows * lda + off), b = randn(b_rows * ldb + off);
    // beta == 0 must ignore C entirely, NaN included
    Pair<float> c(beta == 0.0f ? poison(g.M * ldc + off) : randn(g.M * ldc + off));
    if (bf) {
      Pair<bf16> A(to_bf16(a)), B(to_bf16(b));
      gemm(kHost, ta, tb, g.M, g.N, g.K, 0.5f, A.cpu() + off, lda, B.cpu() + off, ldb, beta,
           c.cpu() + off, ldc);
      gemm(kDev, ta, tb, g.M, g.N, g.K, 0.5f, A.dev() + off, lda, B.dev() + off, ldb, beta,
           c.dev() + off, ldc);
    } else {
      Pair<float> A(a), B(b);
      gemm(kHost, ta, tb, g.M, g.N, g.K, 0.5f, A.cpu() + off, lda, B.cpu() + off, ldb, beta,
           c.cpu() + off, ldc);
      gemm(kDev, ta, tb, g.M, g.N, g.K, 0.5f, A.dev() + off, lda, B.dev() + off, ldb, beta,
           c.dev() + off, ldc);
    }
    // the padding columns of C are not part of the result: compare the M x N block only
    std::vector<float> got = c.dev_result(), ref = c.cpu_result(), g2, r2;
    for (int64_t r = 0; r < g.M; ++r)
      for (int64_t col = 0; col < g.N; ++col) {
        g2.push_back(got[size_t(off + r * ldc + col)]);
        r2.push_back(ref[size_t(off + r * ldc + col)]);
      }
    ck.check("C", g2, r2, bf ? kTolBf16 : kTolF32);
  });
}

void gemm_cases(Checker& ck, bool small) {
  std::vector<GemmCase> cases = {{1, 1, 1, 0}, {31, 33, 17, 0}, {33, 31, 65, 3}, {16, 24, 0, 1}};
  if (!small) {
    cases.push_back({512, 768, 256, 0});
    cases.push_back({1024, 2304, 768, 0});  // GPT-2 124M qkv, 1024 tokens
    cases.push_back({777, 1001, 515, 5});
  }
  for (const GemmCase& g : cases)
    for (Trans ta : {Trans::kN, Trans::kT})
      for (Trans tb : {Trans::kN, Trans::kT})
        for (float beta : {0.0f, 1.0f})
          for (bool bf : {false, true}) {
            // large shapes: the three forms a linear layer uses (forward, dgrad, wgrad)
            if (g.M >= 512 && ta == Trans::kT && tb == Trans::kT) continue;
            check_gemm(ck, g, ta, tb, beta, bf);
          }
}

void elementwise_cases(Checker& ck, bool small) {
  std::vector<int64_t> sizes = {1, 31, 1000};
  if (!small) sizes.push_back(3 << 20);
  for (int64_t n : sizes) {
    const std::string shape = str("n", n);
    ck.run("add", shape, [&] {
      Pair<float> a(randn(n)), b(randn(n)), out(poison(n));
      add(kHost, out.cpu(), a.cpu(), b.cpu(), n);
      add(kDev, out.dev(), a.dev(), b.dev(), n);
      ck.check("out", out, kTolF32);
      add(kHost, a.cpu(), a.cpu(), b.cpu(), n);  // in place
      add(kDev, a.dev(), a.dev(), b.dev(), n);
      ck.check("in place", a, kTolF32);
    });
    ck.run("scale_inplace", shape, [&] {
      Pair<float> x(randn(n));
      scale_inplace(kHost, x.cpu(), -0.3f, n);
      scale_inplace(kDev, x.dev(), -0.3f, n);
      ck.check("x", x, kTolF32);
    });
    ck.run("convert", shape, [&] {
      auto v = randn(n);
      if (n > 3) {  // specials: NaN, infinities, a denormal, a tie
        v[0] = kNaN;
        v[1] = -std::numeric_limits<float>::infinity();
        v[2] = 1e-40f;
        v[3] = 1.00390625f;
      }
      Pair<float> src(v);
      Pair<bf16> dst(std::vector<bf16>(size_t(n), bf16{0xffff}));
      convert(kHost, dst.cpu(), src.cpu(), n);
      convert(kDev, dst.dev(), src.dev(), n);
      ck.check_bits("to bf16 (bits)", dst);
      Pair<bf16> b(to_bf16(randn(n)));
      Pair<float> back(poison(n));
      convert(kHost, back.cpu(), b.cpu(), n);
      convert(kDev, back.dev(), b.dev(), n);
      ck.check("to fp32", back, 0.0);
    });
    ck.run("sum_squares", shape, [&] {
      Pair<float> x(randn(n));
      const double r = sum_squares(kHost, x.cpu(), n), g = sum_squares(kDev, x.dev(), n);
      ck.check("value", {float(g)}, {float(r)}, kTolF32);
    });
    ck.run("fill/fill_zero/copy", shape, [&] {
      Pair<float> x(poison(n)), y(poison(n)), z(randn(n));
      fill(kHost, x.cpu(), 2.5f, n);
      fill(kDev, x.dev(), 2.5f, n);
      ck.check("fill", x, 0.0);
      fill_zero(kHost, y.cpu(), n * 4);
      fill_zero(kDev, y.dev(), n * 4);
      ck.check("fill_zero", y, 0.0);
      copy(kHost, y.cpu(), z.cpu(), n * 4);
      copy(kDev, y.dev(), z.dev(), n * 4);
      ck.check("copy", y, 0.0);
    });
  }
  std::vector<std::pair<int64_t, int64_t>> mats = {{1, 1}, {33, 31}, {300, 17}};
  if (!small) {
    mats.push_back({8192, 768});
    mats.push_back({70000, 33});
  }
  for (auto [N, C] : mats) {
    const std::string shape = str("N", N, " C", C);
    ck.run("bias_add", shape, [&] {
      Pair<float> out(randn(N * C)), bias(randn(C));
      bias_add(kHost, out.cpu(), bias.cpu(), N, C);
      bias_add(kDev, out.dev(), bias.dev(), N, C);
      ck.check("out", out, kTolF32);
    });
    ck.run("bias_backward", shape, [&] {
      Pair<float> dbias(randn(C)), dout(randn(N * C));
      bias_backward(kHost, dbias.cpu(), dout.cpu(), N, C);
      bias_backward(kDev, dbias.dev(), dout.dev(), N, C);
      ck.check("dbias", dbias, kTolF32);
    });
  }
}

void norm_cases(Checker& ck, bool small) {
  std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1}, {7, 31}, {33, 96}, {65, 300}};
  if (!small) {
    shapes.push_back({4096, 768});
    shapes.push_back({2048, 2048});
    shapes.push_back({100, 8191});
  }
  for (auto [N, C] : shapes) {
    const std::string shape = str("N", N, " C", C);
    ck.run("layernorm", shape, [&] {
      auto xv = randn(N * C);
      for (auto& x : xv) x = 0.5f + 2.0f * x;  // a mean and a scale to remove
      Pair<float> x(xv), w(randn(C)), b(randn(C)), out(poison(N * C)), mean(poison(N)),
          rstd(poison(N));
      layernorm_forward(kHost, out.cpu(), mean.cpu(), rstd.cpu(), x.cpu(), w.cpu(), b.cpu(), N, C,
                        1e-5f);
      layernorm_forward(kDev, out.dev(), mean.dev(), rstd.dev(), x.dev(), w.dev(), b.dev(), N, C,
                        1e-5f);
      ck.check("out", out, kTolF32);
      ck.check("mean", mean, kTolF32);
      ck.check("rstd", rstd, kTolF32);
      Pair<float> dout(randn(N * C)), dx(randn(N * C)), dw(randn(C)), db(randn(C));
      // backward from the same saved statistics (the CPU's) on both sides
      Pair<float> m2(mean.cpu_result()), r2(rstd.cpu_result());
      layernorm_backward(kHost, dx.cpu(), dw.cpu(), db.cpu(), dout.cpu(), x.cpu(), w.cpu(),
                         m2.cpu(), r2.cpu(), N, C);
      layernorm_backward(kDev, dx.dev(), dw.dev(), db.dev(), dout.dev(), x.dev(), w.dev(), m2.dev(),
                         r2.dev(), N, C);
      ck.check("dinp (+=)", dx, kTolF32);
      ck.check("dweight (+=)", dw, kTolF32);
      ck.check("dbias (+=)", db, kTolF32);
    });
    ck.run("rmsnorm", shape, [&] {
      Pair<float> x(randn(N * C, 3.0f)), w(randn(C)), out(poison(N * C)), rstd(poison(N));
      rmsnorm_forward(kHost, out.cpu(), rstd.cpu(), x.cpu(), w.cpu(), N, C, 1e-6f);
      rmsnorm_forward(kDev, out.dev(), rstd.dev(), x.dev(), w.dev(), N, C, 1e-6f);
      ck.check("out", out, kTolF32);
      ck.check("rstd", rstd, kTolF32);
      Pair<float> dout(randn(N * C)), dx(randn(N * C)), dw(randn(C)), r2(rstd.cpu_result());
      rmsnorm_backward(kHost, dx.cpu(), dw.cpu(), dout.cpu(), x.cpu(), w.cpu(), r2.cpu(), N, C);
      rmsnorm_backward(kDev, dx.dev(), dw.dev(), dout.dev(), x.dev(), w.dev(), r2.dev(), N, C);
      ck.check("dinp (+=)", dx, kTolF32);
      ck.check("dweight (+=)", dw, kTolF32);
    });
  }
}

void activation_cases(Checker& ck, bool small) {
  std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1}, {3, 31}, {17, 100}};
  if (!small) shapes.push_back({4096, 3072});
  for (auto [N, F] : shapes) {
    const std::string shape = str("N", N, " F", F);
    ck.run("gelu", shape, [&] {
      const int64_t n = N * F;
      Pair<float> x(randn(n, 3.0f)), out(poison(n)), dout(randn(n)), dx(poison(n));
      gelu_forward(kHost, out.cpu(), x.cpu(), n);
      gelu_forward(kDev, out.dev(), x.dev(), n);
      ck.check("out", out, kTolF32);
      gelu_backward(kHost, dx.cpu(), x.cpu(), dout.cpu(), n);
      gelu_backward(kDev, dx.dev(), x.dev(), dout.dev(), n);
      ck.check("dinp", dx, kTolF32);
    });
    ck.run("swiglu", shape, [&] {
      Pair<float> x(randn(N * 2 * F, 3.0f)), out(poison(N * F)), dout(randn(N * F)),
          dx(poison(N * 2 * F));
      swiglu_forward(kHost, out.cpu(), x.cpu(), N, F);
      swiglu_forward(kDev, out.dev(), x.dev(), N, F);
      ck.check("out", out, kTolF32);
      swiglu_backward(kHost, dx.cpu(), x.cpu(), dout.cpu(), N, F);
      swiglu_backward(kDev, dx.dev(), x.dev(), dout.dev(), N, F);
      ck.check("dinp", dx, kTolF32);
    });
  }
}

void rope_cases(Checker& ck, bool small) {
  struct Shape {
    int64_t N, G, hpg, D, R;
  };
  std::vector<Shape> shapes = {{1, 1, 1, 2, 2}, {5, 2, 3, 16, 16}, {9, 1, 4, 24, 8}};
  if (!small) shapes.push_back({4096, 12, 1, 64, 64});
  for (const Shape& s : shapes) {
    const int64_t H = s.G * s.hpg, nq = s.N * H * s.D, nk = s.N * s.G * s.D;
    const std::string shape = str("N", s.N, " G", s.G, " hpg", s.hpg, " D", s.D, " R", s.R);
    ck.run("qkv_split/merge", shape, [&] {
      Pair<float> qkv(randn(nq + 2 * nk)), q(poison(nq)), k(poison(nk)), v(poison(nk));
      qkv_split(kHost, q.cpu(), k.cpu(), v.cpu(), qkv.cpu(), s.N, s.G, s.hpg, s.D);
      qkv_split(kDev, q.dev(), k.dev(), v.dev(), qkv.dev(), s.N, s.G, s.hpg, s.D);
      ck.check("q", q, 0.0);
      ck.check("k", k, 0.0);
      ck.check("v", v, 0.0);
      Pair<float> dqkv(poison(nq + 2 * nk));
      qkv_merge_grad(kHost, dqkv.cpu(), q.cpu(), k.cpu(), v.cpu(), s.N, s.G, s.hpg, s.D);
      qkv_merge_grad(kDev, dqkv.dev(), q.dev(), k.dev(), v.dev(), s.N, s.G, s.hpg, s.D);
      ck.check("dqkv", dqkv, 0.0);
    });
    ck.run("rope", shape, [&] {
      Pair<float> x(randn(nq));
      Pair<int32_t> pos(randint(s.N, 0, 8192));
      rope_forward(kHost, x.cpu(), pos.cpu(), s.N, H, s.D, s.R, 10000.0f);
      rope_forward(kDev, x.dev(), pos.dev(), s.N, H, s.D, s.R, 10000.0f);
      ck.check("forward", x, kTolF32);
      rope_backward(kHost, x.cpu(), pos.cpu(), s.N, H, s.D, s.R, 500000.0f);
      rope_backward(kDev, x.dev(), pos.dev(), s.N, H, s.D, s.R, 500000.0f);
      ck.check("backward", x, kTolF32);
    });
  }
}

void embedding_cases(Checker& ck, bool small) {
  struct Shape {
    int64_t N, C, row_start, rows, vocab;
  };
  std::vector<Shape> shapes = {{1, 1, 0, 1, 1}, {37, 33, 10, 20, 40}, {200, 64, 0, 7, 7}};
  if (!small) shapes.push_back({16384, 768, 25152, 25152, 50304});  // vocab-parallel half
  for (const Shape& s : shapes) {
    const std::string shape =
        str("N", s.N, " C", s.C, " rows [", s.row_start, ", +", s.rows, ") of ", s.vocab);
    ck.run("embedding", shape, [&] {
      Pair<int32_t> ids(randint(s.N, 0, int32_t(s.vocab)));
      Pair<float> table(randn(s.rows * s.C)), out(poison(s.N * s.C));
      embedding_forward(kHost, out.cpu(), ids.cpu(), table.cpu(), s.N, s.C, s.row_start, s.rows,
                        false);
      embedding_forward(kDev, out.dev(), ids.dev(), table.dev(), s.N, s.C, s.row_start, s.rows,
                        false);
      ck.check("forward", out, 0.0);
      embedding_forward(kHost, out.cpu(), ids.cpu(), table.cpu(), s.N, s.C, s.row_start, s.rows,
                        true);
      embedding_forward(kDev, out.dev(), ids.dev(), table.dev(), s.N, s.C, s.row_start, s.rows,
                        true);
      ck.check("forward (+=)", out, kTolF32);
      Pair<float> dtable(randn(s.rows * s.C)), dout(randn(s.N * s.C));
      embedding_backward(kHost, dtable.cpu(), dout.cpu(), ids.cpu(), s.N, s.C, s.row_start, s.rows);
      embedding_backward(kDev, dtable.dev(), dout.dev(), ids.dev(), s.N, s.C, s.row_start, s.rows);
      ck.check("backward (+=, exact)", dtable, 0.0);
    });
  }
}

void attention_cases(Checker& ck, bool small) {
  struct Case {
    AttnShape s;
    AttnMask mask;
  };
  auto shape = [](int64_t B, int64_t Sq, int64_t Sk, int64_t H, int64_t G, int64_t D) {
    return AttnShape{B, Sq, Sk, H, G, D, 1.0f / std::sqrt(float(D))};
  };
  std::vector<Case> cases = {
      {shape(1, 1, 1, 1, 1, 8), {true, 0}},     {shape(2, 33, 33, 4, 2, 24), {true, 0}},
      {shape(1, 17, 40, 4, 1, 64), {true, 23}},  // queries at the end of the keys
      {shape(1, 40, 17, 2, 2, 16), {false, 0}},  // no mask
      {shape(1, 20, 20, 2, 1, 40), {true, -7}},  // rows with no visible key
  };
  if (!small) {
    cases.push_back({shape(2, 130, 67, 6, 3, 128), {true, 100}});
    cases.push_back({shape(1, 70, 70, 2, 2, 256), {true, 0}});
    cases.push_back({shape(4, 1024, 1024, 12, 12, 64), {true, 0}});   // GPT-2 124M
    cases.push_back({shape(1, 2048, 2048, 16, 16, 128), {true, 0}});  // the 1.3B model
    cases.push_back({shape(1, 1024, 1024, 32, 8, 128), {true, 0}});   // Llama-style GQA
  }
  for (const Case& c : cases) {
    const AttnShape& s = c.s;
    const std::string name =
        str("B", s.B, " Sq", s.Sq, " Sk", s.Sk, " H", s.H, " G", s.G, " D", s.D,
            c.mask.causal ? str(" causal ", c.mask.offset) : std::string(" full"));
    ck.run("attention", name, [&] {
      const int64_t nq = s.Sq * s.B * s.H * s.D, nk = s.Sk * s.B * s.G * s.D;
      Pair<float> q(randn(nq)), k(randn(nk)), v(randn(nk)), out(poison(nq)),
          lse(poison(s.B * s.H * s.Sq));
      attention_forward(kHost, out.cpu(), lse.cpu(), q.cpu(), k.cpu(), v.cpu(), s, c.mask);
      attention_forward(kDev, out.dev(), lse.dev(), q.dev(), k.dev(), v.dev(), s, c.mask);
      ck.check("out", out, kTolF32);
      ck.check("lse", lse, kTolF32);
      // backward from the CPU's out and lse on both sides
      Pair<float> o2(out.cpu_result()), l2(lse.cpu_result()), dout(randn(nq)), dq(randn(nq)),
          dk(randn(nk)), dv(randn(nk));
      attention_backward(kHost, dq.cpu(), dk.cpu(), dv.cpu(), dout.cpu(), q.cpu(), k.cpu(), v.cpu(),
                         o2.cpu(), l2.cpu(), s, c.mask);
      attention_backward(kDev, dq.dev(), dk.dev(), dv.dev(), dout.dev(), q.dev(), k.dev(), v.dev(),
                         o2.dev(), l2.dev(), s, c.mask);
      ck.check("dq (+=)", dq, kTolF32);
      ck.check("dk (+=)", dk, kTolF32);
      ck.check("dv (+=)", dv, kTolF32);
    });
  }
}

void xent_cases(Checker& ck, bool small) {
  struct Shape {
    int64_t n, Vl, col_start, vocab_valid;
  };
  std::vector<Shape> shapes = {{1, 1, 0, 1}, {5, 50, 0, 47}, {9, 33, 40, 60}, {3, 20, 100, 50}};
  if (!small) shapes.push_back({1024, 50304, 0, 50257});
  for (const Shape& s : shapes) {
    const std::string shape =
        str("n", s.n, " Vl", s.Vl, " cols [", s.col_start, ", +", s.Vl, ") valid<", s.vocab_valid);
    ck.run("xent", shape, [&] {
      const int64_t nv = s.n * s.Vl;
      Pair<float> logits(randn(nv, 4.0f)), mx(poison(s.n)), se(poison(s.n)), tg(poison(s.n));
      Pair<int32_t> targets(randint(s.n, 0, int32_t(s.col_start + s.Vl + 5)));
      xent_stats(kHost, mx.cpu(), se.cpu(), tg.cpu(), logits.cpu(), targets.cpu(), s.n, s.Vl,
                 s.col_start, s.vocab_valid);
      xent_stats(kDev, mx.dev(), se.dev(), tg.dev(), logits.dev(), targets.dev(), s.n, s.Vl,
                 s.col_start, s.vocab_valid);
      ck.check("row_max", mx, kTolF32);
      ck.check("row_sumexp", se, kTolF32);
      ck.check("target_logit", tg, kTolF32);
      // backward from the CPU's statistics, once with row scales and once in place without
      Pair<float> m2(mx.cpu_result()), s2(se.cpu_result()), scale(randn(s.n)), dl(poison(nv));
      xent_backward(kHost, dl.cpu(), logits.cpu(), targets.cpu(), m2.cpu(), s2.cpu(), scale.cpu(),
                    s.n, s.Vl, s.col_start, s.vocab_valid);
      xent_backward(kDev, dl.dev(), logits.dev(), targets.dev(), m2.dev(), s2.dev(), scale.dev(),
                    s.n, s.Vl, s.col_start, s.vocab_valid);
      ck.check("dlogits", dl, kTolF32);
      xent_backward(kHost, logits.cpu(), logits.cpu(), targets.cpu(), m2.cpu(), s2.cpu(), nullptr,
                    s.n, s.Vl, s.col_start, s.vocab_valid);
      xent_backward(kDev, logits.dev(), logits.dev(), targets.dev(), m2.dev(), s2.dev(), nullptr,
                    s.n, s.Vl, s.col_start, s.vocab_valid);
      ck.check("dlogits in place", logits, kTolF32);
    });
  }
}

void adamw_cases(Checker& ck, bool small) {
  std::vector<int64_t> sizes = {1, 33, 1000};
  if (!small) sizes.push_back(5 << 20);
  for (int64_t n : sizes)
    for (bool with_bf16 : {false, true}) {
      ck.run("adamw", str("n", n, with_bf16 ? " +bf16 copy" : ""), [&] {
        Pair<float> p(randn(n)), m(randn(n, 0.1f)), g(randn(n));
        auto vv = randn(n, 0.1f);
        for (auto& x : vv) x = x * x;
        Pair<float> v(vv);
        Pair<bf16> pb(std::vector<bf16>(size_t(n), bf16{0xffff}));
        const AdamWParams ap{.lr = 3e-4f,
                             .beta1 = 0.9f,
                             .beta2 = 0.95f,
                             .eps = 1e-8f,
                             .weight_decay = 0.1f,
                             .step = 7};
        adamw_step(kHost, p.cpu(), m.cpu(), v.cpu(), g.cpu(), with_bf16 ? pb.cpu() : nullptr, n,
                   ap);
        adamw_step(kDev, p.dev(), m.dev(), v.dev(), g.dev(), with_bf16 ? pb.dev() : nullptr, n, ap);
        ck.check("param", p, kTolF32);
        ck.check("m", m, kTolF32);
        ck.check("v", v, kTolF32);
        if (with_bf16) ck.check_bits("param bf16 (bits)", pb);
      });
    }
}

// Ops on a stream of their own (kernels::create_stream) instead of the default one: GEMM (its
// workspace is per stream), attention (stream-ordered scratch) and a host-returning reduction.
void stream_cases(Checker& ck) {
  ck.run("stream", "gemm, attention, sum_squares on a created stream", [&] {
    void* st = create_stream(Device::kCUDA);
    const Ctx dev{Device::kCUDA, st};
    const int64_t M = 65, N = 70, K = 33;
    Pair<float> A(randn(M * K)), B(randn(N * K)), C(poison(M * N));
    gemm(kHost, Trans::kN, Trans::kT, M, N, K, 1.0f, A.cpu(), K, B.cpu(), K, 0.0f, C.cpu(), N);
    gemm(dev, Trans::kN, Trans::kT, M, N, K, 1.0f, A.dev(), K, B.dev(), K, 0.0f, C.dev(), N);
    synchronize(dev);
    ck.check("gemm C", C, kTolF32);
    const AttnShape s{1, 40, 40, 2, 1, 32, 1.0f / std::sqrt(32.0f)};
    const int64_t nq = 40 * 2 * 32, nk = 40 * 32;
    Pair<float> q(randn(nq)), k(randn(nk)), v(randn(nk)), out(poison(nq)), lse(poison(80));
    attention_forward(kHost, out.cpu(), lse.cpu(), q.cpu(), k.cpu(), v.cpu(), s, {true, 0});
    attention_forward(dev, out.dev(), lse.dev(), q.dev(), k.dev(), v.dev(), s, {true, 0});
    synchronize(dev);
    ck.check("attention out", out, kTolF32);
    const double r = sum_squares(kHost, out.cpu(), nq), g = sum_squares(dev, out.dev(), nq);
    ck.check("sum_squares", {float(g)}, {float(r)}, kTolF32);
    destroy_stream(Device::kCUDA, st);
  });
}

}  // namespace

int main(int argc, char** argv) {
  bool small = false;
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--small") {
      small = true;
    } else if (a == "--filter" && i + 1 < argc) {
      filter = argv[++i];
    } else {
      std::fprintf(stderr, "usage: op_check [--small] [--filter SUBSTRING]\n");
      return 2;
    }
  }
  try {
    init_device(Device::kCUDA, 0);
    const DeviceProperties p = device_properties(Device::kCUDA);
    std::printf("op_check: CUDA device \"%s\" (sm_%d%d, %d SMs) against the CPU kernels%s\n\n",
                p.name.c_str(), p.compute_major, p.compute_minor, p.multiprocessors,
                small ? " (small shapes)" : "");
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "op_check: %s\n", ex.what());
    return 2;
  }
  std::printf("%-28s %-34s %11s %11s %8s  %s\n", "op output", "shape", "rel err", "max abs",
              "bound", "result");
  Checker ck(filter);
  gemm_cases(ck, small);
  elementwise_cases(ck, small);
  norm_cases(ck, small);
  activation_cases(ck, small);
  rope_cases(ck, small);
  embedding_cases(ck, small);
  attention_cases(ck, small);
  xent_cases(ck, small);
  adamw_cases(ck, small);
  stream_cases(ck);
  const DeviceMemory mem = device_memory(Device::kCUDA);
  std::printf("\ndevice memory: %.1f MiB allocated now, %.1f MiB at most, %.1f MiB reserved\n",
              double(mem.allocated) / (1 << 20), double(mem.max_allocated) / (1 << 20),
              double(mem.reserved) / (1 << 20));
  std::printf("op_check: %d of %d comparisons failed\n", ck.failed(), ck.rows());
  return ck.failed() == 0 ? 0 : 1;
}
