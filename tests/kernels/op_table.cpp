// The op table (op_table.h): each case runs one op on the device under test and the reference
// kernels on the host, from the same inputs, and compares every output.
#include "op_table.h"

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
#include "op_checker.h"

#include "mtron/core/error.h"
#include "mtron/core/tensor.h"
#include "mtron/kernels/device.h"
#include "mtron/kernels/ops.h"
#include "mtron/kernels/ref/ref_ops.h"
#include "op_checker.h"
#include "op_table_cases.h"

namespace mtron::kernels::test {
namespace {

void elementwise_cases(Checker& ck, bool small) {
  std::vector<int64_t> sizes = {0, 1, 7, 15, 31, 32, 33, 1000, 100003};
  if (!small) sizes.push_back(3 << 20);
  for (int64_t n : sizes) {
    const std::string shape = str("n", n);
    ck.run("add", shape, [&] {
      Pair<float> a(randn(n)), b(randn(n)), out(poison(n));
      ref::add(out.host(), a.host(), b.host(), n);
      add(g_dev, out.dev(), a.dev(), b.dev(), n);
      ck.check("out", out, kTolF32);
      ref::add(a.host(), a.host(), b.host(), n);  // in place
      add(g_dev, a.dev(), a.dev(), b.dev(), n);
      ck.check("in place", a, kTolF32);
    });
    ck.run("scale_inplace", shape, [&] {
      Pair<float> x(randn(n));
      ref::scale_inplace(x.host(), -0.3f, n);
      scale_inplace(g_dev, x.dev(), -0.3f, n);
      ck.check("x", x, kTolF32);
    });
    ck.run("convert", shape, [&] {
      auto v = randn(n, 3.0f);
      // specials: NaN, infinities, zeros, denormals, the largest values, ties to even
      const float specials[] = {kNaN,
                                -std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::infinity(),
                                0.0f,
                                -0.0f,
                                std::numeric_limits<float>::denorm_min(),
                                1e-40f,
                                -3e-39f,
                                std::numeric_limits<float>::max(),
                                3.3895314e38f,
                                1.00390625f,   // 1 + 2^-8: a tie, rounds down to even 1.0
                                1.01171875f};  // 1 + 3 * 2^-8: a tie, rounds up to 1 + 2^-6
      for (size_t i = 0; i < std::size(specials) && i < v.size(); ++i) v[i] = specials[i];
      Pair<float> src(v);
      Pair<bf16> dst(std::vector<bf16>(size_t(n), bf16{0xffff}));
      for (int64_t i = 0; i < n; ++i) dst.host()[i] = ref::to_bf16(src.host()[i]);
      convert(g_dev, dst.dev(), src.dev(), n);
      ck.check_bits("to bf16 (bits)", dst);
      Pair<bf16> b(narrow<bf16>(randn(n)));
      Pair<float> back(poison(n));
      for (int64_t i = 0; i < n; ++i) back.host()[i] = bf16_to_float(b.host()[i]);
      convert(g_dev, back.dev(), b.dev(), n);
      ck.check("to fp32", back, 0.0);
    });
    ck.run("convert.fp16", shape, [&] {
      auto v = randn(n, 3000.0f);
      // specials: NaN, infinities, zeros; fp16's largest value, just below the first that
      // overflows (65520, a tie rounding up) and beyond; 2^-14 (the smallest normal) and below;
      // 2^-24 (the smallest subnormal); 2^-25 (a tie to 0) and just above; 3 * 2^-25 (a tie up
      // to 2^-23); tiny values; 1 + 2^-11 (a tie to even 1.0), 1 + 3 * 2^-11 (a tie up)
      const float inf = std::numeric_limits<float>::infinity();
      // clang-format off
      const float specials[] = {kNaN, -kNaN, -inf, inf, 0.0f, -0.0f, 65504.0f, 65519.996f,
          65520.0f, -65520.0f, 1e6f, 6.1035156e-5f, 6.1e-5f, 5.9604645e-8f, 2.9802322e-8f,
          2.9802326e-8f, 8.940697e-8f, 1e-10f, std::numeric_limits<float>::denorm_min(),
          1.00048828125f, 1.00146484375f};
      // clang-format on
      for (size_t i = 0; i < std::size(specials) && i < v.size(); ++i) v[i] = specials[i];
      Pair<float> src(v);
      Pair<f16> dst(std::vector<f16>(size_t(n), f16{0xffff}));
      for (int64_t i = 0; i < n; ++i) dst.host()[i] = ref::to_f16(src.host()[i]);
      convert(g_dev, dst.dev(), src.dev(), n);
      ck.check_bits("to fp16 (bits)", dst);
      // every fp16 bit pattern (and the random ones) back to fp32, exactly
      std::vector<f16> all = narrow<f16>(randn(n));
      for (size_t i = 0; i < all.size() && i < 65536; ++i) all[i] = f16{uint16_t(i)};
      Pair<f16> h(all);
      Pair<float> back(poison(n));
      for (int64_t i = 0; i < n; ++i) back.host()[i] = ref::from_f16(h.host()[i]);
      convert(g_dev, back.dev(), h.dev(), n);
      ck.check_exact("to fp32 (bits)", back);
    });
    ck.run("sum_squares", shape, [&] {
      Pair<float> x(randn(n));
      Pair<double> total(std::vector<double>{1.5});  // sum_squares adds to it
      const double r = 1.5 + ref::sum_squares(x.host(), n);
      sum_squares(g_dev, total.dev(), x.dev(), n);
      ck.check("value", {float(total.dev_result()[0])}, {float(r)}, kTolF32);
    });
    ck.run("fp8_quantize/abs_max", shape, [&] {
      auto v = randn(n, 200.0f);  // beyond E4M3's 448 and into its subnormals
      const float inf = std::numeric_limits<float>::infinity();
      for (size_t i = 0; i < 3 && i < v.size(); ++i) v[i] = std::array{kNaN, -inf, 1e-3f}[i];
      for (const Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
        Pair<float> x(v), amax(std::vector<float>{0.5f});
        const std::vector<bf16> unset(size_t(n), bf16{0xffff});
        Pair<bf16> xb(narrow<bf16>(v)), q(unset), qb(unset);
        ref::fp8_quantize(q.host(), amax.host(), x.host(), 0.37f, f, n);
        fp8_quantize(g_dev, q.dev(), amax.dev(), x.dev(), 0.37f, f, n);
        ref::fp8_quantize(qb.host(), amax.host(), xb.host(), 3.0f, f, n);
        fp8_quantize(g_dev, qb.dev(), amax.dev(), xb.dev(), 3.0f, f, n);
        ck.check_bits("fp8 of fp32 (bits)", q);
        ck.check_bits("fp8 of bf16 (bits)", qb);
        ck.check("amax", amax, 0.0);
      }
    });
    ck.run("fill/fill_zero/copy/copy_rows", shape, [&] {
      Pair<float> x(poison(n)), y(poison(n)), z(randn(n));
      std::fill(x.host(), x.host() + n, 2.5f);
      fill(g_dev, x.dev(), 2.5f, n);
      ck.check("fill", x, 0.0);
      std::fill(y.host(), y.host() + n, 0.0f);
      fill_zero(g_dev, y.dev(), n * 4);
      ck.check("fill_zero", y, 0.0);
      std::copy(z.host(), z.host() + n, y.host());
      copy(g_dev, y.dev(), z.dev(), n * 4);
      ck.check("copy", y, 0.0);
      // rows of 3 floats from a pitch of 5 to a pitch of 4 (the 4th float of each row kept)
      const int64_t rows = n / 5;
      for (int64_t r = 0; r < rows; ++r) std::copy_n(z.host() + 5 * r, 3, x.host() + 4 * r);
      copy_rows(g_dev, x.dev(), 16, z.dev(), 20, 12, rows);
      ck.check("copy_rows", x, 0.0);
    });
  }
  std::vector<std::pair<int64_t, int64_t>> mats = {
      {1, 1}, {33, 31}, {300, 17}, {31, 32}, {257, 768}};
  if (!small) {
    mats.push_back({8192, 768});
    mats.push_back({70000, 33});
  }
  for (const auto& mat : mats) {
    const int64_t N = mat.first, C = mat.second;  // lambdas capture them (clang 14: no bindings)
    const std::string shape = str("N", N, " C", C);
    ck.run("bias_add", shape, [&] {
      Pair<float> out(randn(N * C)), bias(randn(C));
      ref::bias_add(out.host(), bias.host(), N, C);
      bias_add(g_dev, out.dev(), bias.dev(), N, C);
      ck.check("out", out, kTolF32);
    });
    ck.run("bias_backward", shape, [&] {
      Pair<float> dbias(randn(C)), dout(randn(N * C));
      ref::bias_backward(dbias.host(), dout.host(), N, C);
      bias_backward(g_dev, dbias.dev(), dout.dev(), N, C);
      ck.check("dbias", dbias, kTolF32);
    });
    ck.run("bias_backward_narrow", shape, [&] {
      const std::vector<float> d0 = randn(C), g = randn(N * C);
      Pair<float> dbias(d0), dout(g), plain(d0);
      Pair<bf16> d16(std::vector<bf16>(size_t(N * C), bf16{0xffff}));
      ref::bias_backward(dbias.host(), dout.host(), N, C);
      bias_backward_narrow(g_dev, dbias.dev(), d16.dev(), dout.dev(), N, C);
      ck.check("dbias", dbias, kTolF32);
      bias_backward(g_dev, plain.dev(), dout.dev(), N, C);
      ck.check("dbias as bias_backward's (bits)", dbias.dev_result(), plain.dev_result(), 0.0);
      ck.check_bits("dout to bf16 (bits)", d16, narrow<bf16>(g));
    });
    ck.run("bias_backward", shape + " bf16 dout", [&] {
      Pair<float> dbias(randn(C));
      Pair<bf16> dout(narrow<bf16>(randn(N * C)));
      ref::bias_backward(dbias.host(), widen(dout.host_result()).data(), N, C);
      bias_backward(g_dev, dbias.dev(), dout.dev(), N, C);
      ck.check("dbias", dbias, kTolF32);
    });
  }
}

// Hidden dropout: the multipliers bit for bit (the reference draws each element's on its own),
// and the share of dropped elements within 4 standard deviations of p.
void dropout_cases(Checker& ck, bool small) {
  struct Case {
    int64_t rows;
    DropoutRows d;
  };
  const PhiloxKey key = rng_key(5, "op table dropout");
  // d: p, key, width, B, row0 (with SP: the block's first row), sample0, S
  std::vector<Case> cases = {
      {1, {0.1f, key, 1, 1, 0, 0, 1}},
      {33, {0.1f, key, 31, 3, 5, 2, 64}},  // widths off multiples of 4 and 8
      {64, {0.1f, key, 96, 4, 64, 8, 128}},
      {130, {0.5f, key, 101, 2, 0, 6, 512}},
      {257, {0.1f, key, 768, 4, 3, 12, 1024}},
  };
  if (!small) cases.push_back({4096, {0.1f, key, 2048, 8, 0, 16, 2048}});
  for (const Case& c : cases) {
    const DropoutRows& d = c.d;
    const int64_t n = c.rows * d.width;
    const std::string shape = str("rows", c.rows, " width", d.width, " B", d.B, " row0", d.row0,
                                  " sample0", d.sample0, " p", d.p);
    ck.run("dropout", shape, [&] {
      Pair<int32_t> pos(randint(c.rows, 0, int32_t(d.S)));
      Pair<float> x(randn(n));
      ref::dropout(x.host(), pos.host(), c.rows, d);
      dropout(g_dev, x.dev(), pos.dev(), c.rows, d);
      ck.check_exact("x (bits)", x);
      if (n < 10000) return;
      const std::vector<float> got = x.dev_result();
      const double rate = double(std::count(got.begin(), got.end(), 0.0f)) / double(n);
      const double sd = std::sqrt(double(d.p) * (1 - d.p) / double(n));
      ck.check("dropped share", {float(rate)}, {d.p}, 4 * sd / d.p);
    });
  }
}

// The bf16 form of an op writing fp32 `out` (run(bf16*)): the rounding of the device's own fp32
// values, bit for bit.
template <typename Run>
void check_bf16_out(Checker& ck, const char* what, const Pair<float>& out, Run run) {
  Pair<bf16> out16{std::vector<bf16>(out.host_result().size())};
  run(out16.dev());
  std::vector<bf16> want;
  for (float v : out.dev_result()) want.push_back(float_to_bf16(v));
  ck.check_bits(what, out16, want);
}

void norm_cases(Checker& ck, bool small) {
  // The CUDA backward's paths: 8 columns a thread (C a multiple of 8) with 1 or 2 groups of them
  // in registers (C 96 and 4096: 32 and 512 threads; 5000) or too wide for registers (9000); one
  // column a thread with 2, 4 or 16 in registers (C 300, 1001, 5001: rows of 512 threads) or too
  // wide (9001).
  std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 1},    {7, 31},   {33, 96},  {65, 300}, {31, 32},  {32, 33}, {130, 768},
      {3, 5000}, {2, 9000}, {9, 1001}, {3, 4096}, {3, 5001}, {2, 9001}};
  if (!small) {
    shapes.push_back({4096, 768});
    shapes.push_back({2048, 2048});
    shapes.push_back({100, 8191});
  }
  for (const auto& shp : shapes) {
    const int64_t N = shp.first, C = shp.second;
    const std::string shape = str("N", N, " C", C);
    ck.run("layernorm", shape, [&] {
      auto xv = randn(N * C);
      for (auto& x : xv) x = 0.5f + 2.0f * x;  // a mean and a scale to remove
      Pair<float> x(xv), w(randn(C)), b(randn(C)), out(poison(N * C)), mean(poison(N)),
          rstd(poison(N));
      ref::layernorm_forward(out.host(), mean.host(), rstd.host(), x.host(), w.host(), b.host(), N,
                             C, 1e-5f);
      layernorm_forward(g_dev, out.dev(), mean.dev(), rstd.dev(), x.dev(), w.dev(), b.dev(), N, C,
                        1e-5f);
      ck.check("out", out, kTolF32);
      Pair<float> m16(poison(N)), r16(poison(N));
      check_bf16_out(ck, "out to bf16 (bits)", out, [&](bf16* o) {
        layernorm_forward(g_dev, o, m16.dev(), r16.dev(), x.dev(), w.dev(), b.dev(), N, C, 1e-5f);
      });
      ck.check("mean", mean, kTolF32);
      ck.check("rstd", rstd, kTolF32);
      Pair<float> dout(randn(N * C)), dx(randn(N * C)), dw(randn(C)), db(randn(C));
      // backward from the same saved statistics (the reference's) on both sides
      Pair<float> m2(mean.host_result()), r2(rstd.host_result());
      ref::layernorm_backward(dx.host(), dw.host(), db.host(), dout.host(), x.host(), w.host(),
                              m2.host(), r2.host(), N, C);
      layernorm_backward(g_dev, dx.dev(), dw.dev(), db.dev(), dout.dev(), x.dev(), w.dev(),
                         m2.dev(), r2.dev(), N, C);
      ck.check("dinp (+=)", dx, kTolF32);
      ck.check("dweight (+=)", dw, kTolF32);
      ck.check("dbias (+=)", db, kTolF32);
    });
    ck.run("rmsnorm", shape, [&] {
      Pair<float> x(randn(N * C, 3.0f)), w(randn(C)), out(poison(N * C)), rstd(poison(N));
      ref::rmsnorm_forward(out.host(), rstd.host(), x.host(), w.host(), N, C, 1e-6f);
      rmsnorm_forward(g_dev, out.dev(), rstd.dev(), x.dev(), w.dev(), N, C, 1e-6f);
      ck.check("out", out, kTolF32);
      Pair<float> r16(poison(N));
      check_bf16_out(ck, "out to bf16 (bits)", out, [&](bf16* o) {
        rmsnorm_forward(g_dev, o, r16.dev(), x.dev(), w.dev(), N, C, 1e-6f);
      });
      ck.check("rstd", rstd, kTolF32);
      Pair<float> dout(randn(N * C)), dx(randn(N * C)), dw(randn(C)), r2(rstd.host_result());
      ref::rmsnorm_backward(dx.host(), dw.host(), dout.host(), x.host(), w.host(), r2.host(), N, C);
      rmsnorm_backward(g_dev, dx.dev(), dw.dev(), dout.dev(), x.dev(), w.dev(), r2.dev(), N, C);
      ck.check("dinp (+=)", dx, kTolF32);
      ck.check("dweight (+=)", dw, kTolF32);
    });
  }
}

// An elementwise activation (fwd, bwd; rfwd, rbwd the reference's) on x0 with the output
// gradient dout0: fp32 against the reference, to bf16 outputs as convert's rounding of the fp32
// ones, and from bf16 inputs bit for bit as from their widened values.
template <class Fwd, class Bwd, class RefFwd, class RefBwd>
void check_elementwise_activation(Checker& ck,
                                  const std::vector<float>& x0,
                                  const std::vector<float>& dout0,
                                  Fwd fwd,
                                  Bwd bwd,
                                  RefFwd rfwd,
                                  RefBwd rbwd) {
  const int64_t n = int64_t(x0.size());
  Pair<float> x(x0), out(poison(n)), dout(dout0), dx(poison(n));
  rfwd(out.host(), x.host(), n);
  fwd(out.dev(), x.dev(), n);
  ck.check("out", out, kTolF32);
  check_bf16_out(ck, "out to bf16 (bits)", out, [&](bf16* o) { fwd(o, x.dev(), n); });
  rbwd(dx.host(), x.host(), dout.host(), n);
  bwd(dx.dev(), x.dev(), dout.dev(), n);
  ck.check("dinp", dx, kTolF32);
  check_bf16_out(ck, "dinp to bf16 (bits)", dx, [&](bf16* d) { bwd(d, x.dev(), dout.dev(), n); });
  const std::vector<bf16> nan16(size_t(n), bf16{0xffff});
  Pair<bf16> x16(narrow<bf16>(x0)), dout16(narrow<bf16>(dout0));
  Pair<float> xw(widen(x16.host_result())), doutw(widen(dout16.host_result()));
  Pair<bf16> o16(nan16), ow(nan16), g16(nan16), gw(nan16);
  fwd(o16.dev(), x16.dev(), n);
  fwd(ow.dev(), xw.dev(), n);
  ck.check_bits("out from bf16 (bits)", o16, ow.dev_result());
  bwd(g16.dev(), x16.dev(), dout16.dev(), n);
  bwd(gw.dev(), xw.dev(), doutw.dev(), n);
  ck.check_bits("dinp from bf16 (bits)", g16, gw.dev_result());
}

void activation_cases(Checker& ck, bool small) {
  std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 1},     {3, 31},  {17, 100}, {1, 33},
      {1, 10007}, {31, 32}, {33, 300}, {600, 40}};  // column sums in 3 chunks
  if (!small) shapes.push_back({4096, 3072});
  for (const auto& shp : shapes) {
    const int64_t N = shp.first, F = shp.second;
    const std::string shape = str("N", N, " F", F);
    ck.run("gelu", shape, [&] {
      const int64_t n = N * F;
      const std::vector<float> x0 = randn(n, 3.0f), dout0 = randn(n);
      check_elementwise_activation(
          ck, x0, dout0, [](auto... a) { gelu_forward(g_dev, a...); },
          [](auto... a) { gelu_backward(g_dev, a...); }, [](auto... a) { ref::gelu_forward(a...); },
          [](auto... a) { ref::gelu_backward(a...); });
      // fc1's output and bias gradients in one pass: gelu_backward to bf16 and bias_backward of
      // that, bit for bit
      std::vector<float> dx0(size_t(n), 0.0f);
      ref::gelu_backward(dx0.data(), x0.data(), dout0.data(), n);
      const std::vector<float> db0 = randn(F);
      const std::vector<bf16> nan16(size_t(n), bf16{0xffff});
      Pair<float> x(x0), dout(dout0), dbias(db0), plain(db0), want(db0);
      Pair<bf16> d16(nan16), plain16(nan16);
      gelu_backward_bias(g_dev, dbias.dev(), d16.dev(), x.dev(), dout.dev(), N, F);
      gelu_backward(g_dev, plain16.dev(), x.dev(), dout.dev(), n);
      bias_backward(g_dev, plain.dev(), plain16.dev(), N, F);
      ck.check_bits("gelu_backward_bias dinp as gelu_backward's (bits)", d16, plain16.dev_result());
      ck.check("gelu_backward_bias dbias as bias_backward's (bits)", dbias.dev_result(),
               plain.dev_result(), 0.0);
      ref::bias_backward(want.host(), widen(narrow<bf16>(dx0)).data(), N, F);
      ck.check("gelu_backward_bias dbias", dbias.dev_result(), want.host_result(), kTolBf16);
      // from bf16 inputs: bit for bit the same op on the widened values
      Pair<bf16> x16(narrow<bf16>(x0)), dout16(narrow<bf16>(dout0));
      Pair<float> xw(widen(x16.host_result())), doutw(widen(dout16.host_result()));
      Pair<float> db16(db0), dbw(db0);
      Pair<bf16> b16(nan16), bw(nan16);
      gelu_backward_bias(g_dev, db16.dev(), b16.dev(), x16.dev(), dout16.dev(), N, F);
      gelu_backward_bias(g_dev, dbw.dev(), bw.dev(), xw.dev(), doutw.dev(), N, F);
      ck.check_bits("gelu_backward_bias dinp from bf16 (bits)", b16, bw.dev_result());
      ck.check("gelu_backward_bias dbias from bf16 (bits)", db16.dev_result(), dbw.dev_result(),
               0.0);
    });
    ck.run("relu2", shape, [&] {
      std::vector<float> x0 = randn(N * F, 3.0f);
      x0[0] = 0.0f;
      check_elementwise_activation(
          ck, x0, randn(N * F), [](auto... a) { relu2_forward(g_dev, a...); },
          [](auto... a) { relu2_backward(g_dev, a...); },
          [](auto... a) { ref::relu2_forward(a...); },
          [](auto... a) { ref::relu2_backward(a...); });
      // a NaN input gives NaN, forward and backward, as torch's relu: 1 where NaN
      const float nan = std::numeric_limits<float>::quiet_NaN();
      Pair<float> xn(std::vector<float>{nan, -1, 0, 2}), on(poison(4)), dn(poison(4));
      Pair<float> ones(std::vector<float>(4, 1.0f));
      relu2_forward(g_dev, on.dev(), xn.dev(), 4);
      relu2_backward(g_dev, dn.dev(), xn.dev(), ones.dev(), 4);
      const auto nans = [](const std::vector<float>& v) {
        std::vector<float> f;
        for (float x : v) f.push_back(std::isnan(x) ? 1.0f : 0.0f);
        return f;
      };
      const std::vector<float> first = {1, 0, 0, 0};
      ck.check("NaN in, NaN out", nans(on.dev_result()), first, 0.0);
      ck.check("NaN in, NaN gradient", nans(dn.dev_result()), first, 0.0);
    });
    ck.run("swiglu", shape, [&] {
      Pair<float> x(randn(N * 2 * F, 3.0f)), out(poison(N * F)), dout(randn(N * F)),
          dx(poison(N * 2 * F));
      ref::swiglu_forward(out.host(), x.host(), N, F);
      swiglu_forward(g_dev, out.dev(), x.dev(), N, F);
      ck.check("out", out, kTolF32);
      ref::swiglu_backward(dx.host(), x.host(), dout.host(), N, F);
      swiglu_backward(g_dev, dx.dev(), x.dev(), dout.dev(), N, F);
      ck.check("dinp", dx, kTolF32);
      // bf16 to bf16: the device's fp32 op on the widened values, each output rounded once
      Pair<bf16> x16(narrow<bf16>(x.host_result())), dout16(narrow<bf16>(dout.host_result()));
      Pair<float> xw(widen(x16.host_result())), doutw(widen(dout16.host_result()));
      Pair<float> ow(poison(N * F)), gw(poison(N * 2 * F));
      Pair<bf16> o16(std::vector<bf16>(size_t(N * F), bf16{0xffff}));
      Pair<bf16> g16(std::vector<bf16>(size_t(N * 2 * F), bf16{0xffff}));
      swiglu_forward(g_dev, o16.dev(), x16.dev(), N, F);
      swiglu_forward(g_dev, ow.dev(), xw.dev(), N, F);
      ck.check_bits("out bf16 from bf16 (bits)", o16, narrow<bf16>(ow.dev_result()));
      swiglu_backward(g_dev, g16.dev(), x16.dev(), dout16.dev(), N, F);
      swiglu_backward(g_dev, gw.dev(), xw.dev(), doutw.dev(), N, F);
      ck.check_bits("dinp bf16 from bf16 (bits)", g16, narrow<bf16>(gw.dev_result()));
    });
  }
}

struct RopeShape {
  int64_t N, G, hpg, D, R;
};
// YaRN frequencies for rotary dim s.R.
RopeFreq yarn_of(const RopeShape& s) {
  return {10000.0f, 40.0f, 1.0f, float(s.R / 2 - 1), 1.25f};
}

void rope_cases(Checker& ck, bool small) {
  using Shape = RopeShape;
  std::vector<Shape> shapes = {{1, 1, 1, 2, 2},    {5, 2, 3, 16, 16},  {9, 1, 4, 24, 8},
                               {31, 3, 4, 34, 32}, {33, 1, 3, 80, 38}, {32, 2, 1, 64, 64}};
  if (!small) shapes.push_back({4096, 12, 1, 64, 64});
  for (const Shape& s : shapes) {
    const int64_t H = s.G * s.hpg, nq = s.N * H * s.D, nk = s.N * s.G * s.D;
    const std::string shape = str("N", s.N, " G", s.G, " hpg", s.hpg, " D", s.D, " R", s.R);
    ck.run("qkv_split/merge", shape, [&] {
      Pair<float> qkv(randn(nq + 2 * nk)), q(poison(nq)), k(poison(nk)), v(poison(nk));
      ref::qkv_split(q.host(), k.host(), v.host(), qkv.host(), s.N, s.G, s.hpg, s.D);
      qkv_split(g_dev, q.dev(), k.dev(), v.dev(), qkv.dev(), s.N, s.G, s.hpg, s.D);
      ck.check("q", q, 0.0);
      ck.check("k", k, 0.0);
      ck.check("v", v, 0.0);
      Pair<float> dqkv(poison(nq + 2 * nk));
      ref::qkv_merge_grad(dqkv.host(), q.host(), k.host(), v.host(), s.N, s.G, s.hpg, s.D);
      qkv_merge_grad(g_dev, dqkv.dev(), q.dev(), k.dev(), v.dev(), s.N, s.G, s.hpg, s.D);
      ck.check("dqkv", dqkv, 0.0);
      check_bf16_out(ck, "dqkv to bf16 (bits)", dqkv, [&](bf16* d) {
        qkv_merge_grad(g_dev, d, q.dev(), k.dev(), v.dev(), s.N, s.G, s.hpg, s.D);
      });
    });
    ck.run("rope", shape, [&] {
      Pair<float> x(randn(nq));
      Pair<int32_t> pos(randint(s.N, 0, 8192));
      RopeFreq interleaved{10000.0f};  // --rotary-interleaved: pairs (2i, 2i + 1)
      interleaved.interleaved = true;
      const struct {
        const char* what;
        RopeFreq forward, backward;
      } freqs[] = {{"", RopeFreq{10000.0f}, RopeFreq{500000.0f}},
                   {" (YaRN)", yarn_of(s), yarn_of(s)},
                   {" (interleaved)", interleaved, interleaved}};
      for (const auto& f : freqs) {
        ref::rope_forward(x.host(), pos.host(), s.N, H, s.D, s.R, f.forward, 0);
        rope_forward(g_dev, x.dev(), pos.dev(), s.N, H, s.D, s.R, f.forward, 0);
        ck.check(str("forward", f.what), x, kTolF32);
        ref::rope_backward(x.host(), pos.host(), s.N, H, s.D, s.R, f.backward, 0);
        rope_backward(g_dev, x.dev(), pos.dev(), s.N, H, s.D, s.R, f.backward, 0);
        ck.check(str("backward", f.what), x, kTolF32);
      }
    });
    // On the fused QKV buffer: the query and key heads of every group rotated, the value heads
    // not; the reference's result bit for bit the split tensors' rotated.
    ck.run("rope", shape + " fused QKV", [&] {
      const int64_t nh = s.G * (s.hpg + 2), grp = s.hpg + 2;
      const std::vector<float> x0 = randn(nq + 2 * nk);
      Pair<float> x(x0);
      Pair<int32_t> pos(randint(s.N, 0, 8192));
      ref::rope_forward(x.host(), pos.host(), s.N, nh, s.D, s.R, RopeFreq{10000.0f}, grp);
      rope_forward(g_dev, x.dev(), pos.dev(), s.N, nh, s.D, s.R, RopeFreq{10000.0f}, grp);
      ck.check("forward", x, kTolF32);
      std::vector<float> q(static_cast<size_t>(nq)), k(static_cast<size_t>(nk)),
          v(static_cast<size_t>(nk)), merged(x0.size());
      ref::qkv_split(q.data(), k.data(), v.data(), x0.data(), s.N, s.G, s.hpg, s.D);
      ref::rope_forward(q.data(), pos.host(), s.N, H, s.D, s.R, RopeFreq{10000.0f}, 0);
      ref::rope_forward(k.data(), pos.host(), s.N, s.G, s.D, s.R, RopeFreq{10000.0f}, 0);
      ref::qkv_merge_grad(merged.data(), q.data(), k.data(), v.data(), s.N, s.G, s.hpg, s.D);
      ck.check("reference forward: the split tensors'", x.host_result(), merged, 0.0);
      ref::rope_backward(x.host(), pos.host(), s.N, nh, s.D, s.R, RopeFreq{10000.0f}, grp);
      rope_backward(g_dev, x.dev(), pos.dev(), s.N, nh, s.D, s.R, RopeFreq{10000.0f}, grp);
      ck.check("backward", x, kTolF32);
      // bf16 (the QKV GEMM's bf16 output, attention's bf16 gradient): bit for bit the device's
      // fp32 rotation of the widened values, rounded
      Pair<bf16> x16(narrow<bf16>(x0));
      for (const bool interleaved : {false, true})
        for (const bool adjoint : {false, true}) {
          Pair<float> xw(widen(x16.dev_result()));
          RopeFreq f = yarn_of(s);
          f.interleaved = interleaved;
          const auto rotate = [&](auto* p) {
            if (adjoint) return rope_backward(g_dev, p, pos.dev(), s.N, nh, s.D, s.R, f, grp);
            rope_forward(g_dev, p, pos.dev(), s.N, nh, s.D, s.R, f, grp);
          };
          rotate(xw.dev());
          rotate(x16.dev());
          ck.check_bits(str(adjoint ? "backward" : "forward", " bf16",
                            interleaved ? " interleaved" : "", " (bits)"),
                        x16, narrow<bf16>(xw.dev_result()));
        }
    });
  }
  // Multi-latent attention: K/V split and merge, and RoPE on the last Dr channels of each head
  // (called at a channel offset: channels outside [Dn, Dn + Dr) stay as they are).
  struct MlaShape {
    int64_t N, H, Dn, Dr, Dv;
  };
  std::vector<MlaShape> mla = {{1, 1, 2, 2, 2}, {7, 3, 16, 8, 24}, {33, 4, 12, 6, 5}};
  if (!small) mla.push_back({2048, 16, 128, 64, 128});
  for (const MlaShape& s : mla) {
    const int64_t Dk = s.Dn + s.Dr, nkv = s.N * s.H * (s.Dn + s.Dv);
    const int64_t nk = s.N * s.H * Dk, nv = s.N * s.H * s.Dv;
    const std::string shape = str("N", s.N, " H", s.H, " Dn", s.Dn, " Dr", s.Dr, " Dv", s.Dv);
    ck.run("mla_kv_split/merge", shape, [&] {
      Pair<float> kv(randn(nkv)), kpe(randn(s.N * s.Dr)), k(poison(nk)), v(poison(nv));
      ref::mla_kv_split(k.host(), v.host(), kv.host(), kpe.host(), s.N, s.H, s.Dn, s.Dr, s.Dv);
      mla_kv_split(g_dev, k.dev(), v.dev(), kv.dev(), kpe.dev(), s.N, s.H, s.Dn, s.Dr, s.Dv);
      ck.check("k", k, 0.0);
      ck.check("v", v, 0.0);
      Pair<float> dk(randn(nk)), dv(randn(nv)), dkv(poison(nkv)), dkpe(poison(s.N * s.Dr));
      ref::mla_kv_merge_grad(dkv.host(), dkpe.host(), dk.host(), dv.host(), s.N, s.H, s.Dn, s.Dr,
                             s.Dv);
      mla_kv_merge_grad(g_dev, dkv.dev(), dkpe.dev(), dk.dev(), dv.dev(), s.N, s.H, s.Dn, s.Dr,
                        s.Dv);
      ck.check("dkv", dkv, 0.0);
      ck.check("dkpe", dkpe, kTolF32);
    });
    ck.run("rope (channel offset)", shape, [&] {
      Pair<float> x(randn(nk));
      Pair<int32_t> pos(randint(s.N, 0, 8192));
      ref::rope_forward(x.host() + s.Dn, pos.host(), s.N, s.H, Dk, s.Dr, RopeFreq{10000.0f}, 0);
      rope_forward(g_dev, x.dev() + s.Dn, pos.dev(), s.N, s.H, Dk, s.Dr, RopeFreq{10000.0f}, 0);
      ck.check("forward", x, kTolF32);
      ref::rope_backward(x.host() + s.Dn, pos.host(), s.N, s.H, Dk, s.Dr, RopeFreq{10000.0f}, 0);
      rope_backward(g_dev, x.dev() + s.Dn, pos.dev(), s.N, s.H, Dk, s.Dr, RopeFreq{10000.0f}, 0);
      ck.check("backward", x, kTolF32);
    });
  }
}

void embedding_cases(Checker& ck, bool small) {
  struct Shape {
    int64_t N, C, row_start, rows, vocab;
  };
  std::vector<Shape> shapes = {{1, 1, 0, 1, 1},
                               {37, 33, 10, 20, 40},
                               {200, 64, 0, 7, 7},
                               {300, 100, 10, 30, 50},
                               {32, 31, 0, 20, 20}};
  if (!small) shapes.push_back({16384, 768, 25152, 25152, 50304});  // vocab-parallel half
  for (const Shape& s : shapes) {
    const std::string shape =
        str("N", s.N, " C", s.C, " rows [", s.row_start, ", +", s.rows, ") of ", s.vocab);
    ck.run("embedding", shape, [&] {
      Pair<int32_t> ids(randint(s.N, 0, int32_t(s.vocab)));
      Pair<float> table(randn(s.rows * s.C)), out(poison(s.N * s.C));
      ref::embedding_forward(out.host(), ids.host(), table.host(), s.N, s.C, s.row_start, s.rows,
                             false);
      embedding_forward(g_dev, out.dev(), ids.dev(), table.dev(), s.N, s.C, s.row_start, s.rows,
                        false);
      ck.check("forward", out, 0.0);
      ref::embedding_forward(out.host(), ids.host(), table.host(), s.N, s.C, s.row_start, s.rows,
                             true);
      embedding_forward(g_dev, out.dev(), ids.dev(), table.dev(), s.N, s.C, s.row_start, s.rows,
                        true);
      ck.check("forward (+=)", out, kTolF32);
      Pair<float> dtable(randn(s.rows * s.C)), dout(randn(s.N * s.C));
      ref::embedding_backward(dtable.host(), dout.host(), ids.host(), s.N, s.C, s.row_start,
                              s.rows);
      embedding_backward(g_dev, dtable.dev(), dout.dev(), ids.dev(), s.N, s.C, s.row_start, s.rows);
      ck.check("backward (+=, exact)", dtable, 0.0);
    });
  }
}

void xent_cases(Checker& ck, bool small) {
  struct Shape {
    int64_t n, Vl, col_start, vocab_valid;
  };
  std::vector<Shape> shapes = {{1, 1, 0, 1},      {5, 50, 0, 47},       {9, 33, 40, 60},
                               {3, 20, 100, 50},  {31, 1000, 40, 1020}, {33, 32, 0, 32},
                               {2, 4100, 0, 4097}};  // more than one 2048-column chunk
  if (!small) shapes.push_back({1024, 50304, 0, 50257});
  for (const Shape& s : shapes) {
    const std::string shape =
        str("n", s.n, " Vl", s.Vl, " cols [", s.col_start, ", +", s.Vl, ") valid<", s.vocab_valid);
    ck.run("xent", shape, [&] {
      const int64_t nv = s.n * s.Vl;
      Pair<float> logits(randn(nv, 4.0f)), mx(poison(s.n)), se(poison(s.n)), tg(poison(s.n));
      Pair<int32_t> targets(randint(s.n, 0, int32_t(s.col_start + s.Vl + 5)));
      ref::xent_stats(mx.host(), se.host(), tg.host(), logits.host(), targets.host(), s.n, s.Vl,
                      s.col_start, s.vocab_valid);
      xent_stats(g_dev, mx.dev(), se.dev(), tg.dev(), logits.dev(), targets.dev(), s.n, s.Vl,
                 s.col_start, s.vocab_valid);
      ck.check("row_max", mx, kTolF32);
      ck.check("row_sumexp", se, kTolF32);
      ck.check("target_logit", tg, kTolF32);
      // another rank's max (>= this one's) rescales the sums; the loss sum adds to 0.5
      std::vector<float> g = mx.host_result();
      for (float& v : g) v += 0.25f;
      Pair<float> gmax(g), mr(mx.host_result()), sr(se.host_result());
      ref::xent_rescale(mr.host(), sr.host(), gmax.host(), s.n);
      xent_rescale(g_dev, mr.dev(), sr.dev(), gmax.dev(), s.n);
      ck.check("rescaled row_max", mr, 0.0);
      ck.check("rescaled row_sumexp", sr, kTolF32);
      Pair<double> sum(std::vector<double>{0.5});
      ref::xent_loss_sum(sum.host(), mx.host(), se.host(), tg.host(), (const float*)nullptr, s.n);
      xent_loss_sum(g_dev, sum.dev(), mx.dev(), se.dev(), tg.dev(), nullptr, s.n);
      ck.check("loss sum", {float(sum.dev_result()[0])}, {float(sum.host_result()[0])}, kTolF32);
      // rows masked out (--eod-mask-loss) are left out of the sum
      std::vector<float> keep(size_t(s.n));
      for (size_t r = 0; r < keep.size(); ++r) keep[r] = float((r * 7 + 3) % 4 != 0);
      Pair<float> mask(keep);
      Pair<double> msum(std::vector<double>{0.5});
      ref::xent_loss_sum(msum.host(), mx.host(), se.host(), tg.host(), mask.host(), s.n);
      xent_loss_sum(g_dev, msum.dev(), mx.dev(), se.dev(), tg.dev(), mask.dev(), s.n);
      ck.check("masked loss sum", {float(msum.dev_result()[0])}, {float(msum.host_result()[0])},
               kTolF32);
      // backward from the reference's statistics, once with row scales and once in place without
      Pair<float> m2(mx.host_result()), s2(se.host_result()), scale(randn(s.n)), dl(poison(nv));
      ref::xent_backward(dl.host(), logits.host(), targets.host(), m2.host(), s2.host(),
                         scale.host(), s.n, s.Vl, s.col_start, s.vocab_valid);
      xent_backward(g_dev, dl.dev(), logits.dev(), targets.dev(), m2.dev(), s2.dev(), scale.dev(),
                    s.n, s.Vl, s.col_start, s.vocab_valid);
      ck.check("dlogits", dl, kTolF32);
      check_bf16_out(ck, "dlogits to bf16 (bits)", dl, [&](bf16* d) {
        xent_backward(g_dev, d, logits.dev(), targets.dev(), m2.dev(), s2.dev(), scale.dev(), s.n,
                      s.Vl, s.col_start, s.vocab_valid);
      });
      // bf16 logits (the LM head's bf16 GEMM output): the statistics of their fp32 values, and
      // the backward written over them, bit for bit the device's backward of the widened values
      // rounded
      Pair<bf16> l16(narrow<bf16>(logits.host_result()));
      Pair<float> lw(widen(l16.host_result())), m3(poison(s.n)), s3(poison(s.n)), t3(poison(s.n));
      ref::xent_stats(m3.host(), s3.host(), t3.host(), lw.host(), targets.host(), s.n, s.Vl,
                      s.col_start, s.vocab_valid);
      xent_stats(g_dev, m3.dev(), s3.dev(), t3.dev(), l16.dev(), targets.dev(), s.n, s.Vl,
                 s.col_start, s.vocab_valid);
      ck.check("row_max of bf16 logits", m3, kTolF32);
      ck.check("row_sumexp of bf16 logits", s3, kTolF32);
      ck.check("target_logit of bf16 logits", t3, kTolF32);
      Pair<float> dw(poison(nv));
      xent_backward(g_dev, dw.dev(), lw.dev(), targets.dev(), m2.dev(), s2.dev(), scale.dev(), s.n,
                    s.Vl, s.col_start, s.vocab_valid);
      xent_backward(g_dev, l16.dev(), l16.dev(), targets.dev(), m2.dev(), s2.dev(), scale.dev(),
                    s.n, s.Vl, s.col_start, s.vocab_valid);
      std::vector<bf16> want16;
      for (float v : dw.dev_result()) want16.push_back(float_to_bf16(v));
      ck.check_bits("dlogits of bf16 logits in place (bits)", l16, want16);
      ref::xent_backward(logits.host(), logits.host(), targets.host(), m2.host(), s2.host(),
                         static_cast<const float*>(nullptr), s.n, s.Vl, s.col_start, s.vocab_valid);
      xent_backward(g_dev, logits.dev(), logits.dev(), targets.dev(), m2.dev(), s2.dev(), nullptr,
                    s.n, s.Vl, s.col_start, s.vocab_valid);
      ck.check("dlogits in place", logits, kTolF32);
    });
  }
}

void moe_cases(Checker& ck, bool small) {
  struct Shape {
    int64_t T, E, k, h, nb;
    bool sigmoid;
    int64_t groups = 0, group_topk = 0;  // DeepSeek's options: groups, expert bias, scaling
    bool bias = false;
    float scale = 0.0f;
    bool pre_softmax = false;
  };
  std::vector<Shape> shapes = {{1, 1, 1, 1, 1, false},
                               {7, 4, 2, 33, 1, false},
                               {33, 8, 2, 17, 3, true},
                               {31, 16, 1, 8, 1, true},
                               {65, 64, 8, 32, 4, false},
                               {40, 8, 3, 16, 2, true},
                               {40, 16, 4, 16, 2, true, 4, 2, true, 2.5f},
                               {33, 12, 3, 8, 1, false, 3, 1, false, 0.5f},
                               {21, 8, 2, 8, 1, true, 0, 0, true, 0.0f},
                               {7, 4, 2, 33, 1, false, 0, 0, false, 0.0f, true},  // pre-softmax
                               {65, 64, 8, 32, 4, false, 0, 0, false, 0.0f, true},
                               {33, 12, 3, 8, 1, false, 0, 0, false, 0.5f, true}};
  if (!small) shapes.push_back({4096, 64, 8, 1024, 4, false});
  for (const Shape& s : shapes) {
    const std::string shape = str(
        "T", s.T, " E", s.E, " k", s.k, " h", s.h, " nb", s.nb, s.sigmoid ? " sigmoid" : " softmax",
        s.group_topk ? str(" groups ", s.groups, "/", s.group_topk) : "", s.bias ? " bias" : "",
        s.scale > 0 ? str(" scale ", s.scale) : "", s.pre_softmax ? " pre-softmax" : "");
    ck.run("moe", shape, [&] {
      const int64_t T = s.T, E = s.E, k = s.k, h = s.h, nb = s.nb, n = T * k, row0 = 5;
      Pair<float> logits(randn(T * E, 2.0f)), w(poison(n)), sc(poison(T * E)), lse(poison(T));
      Pair<float> bias(randn(E, 0.1f));
      Pair<int32_t> idx(std::vector<int32_t>(size_t(n), -1));
      const MoeRouting rt{.T = T,
                          .E = E,
                          .k = k,
                          .sigmoid = s.sigmoid,
                          .pre_softmax = s.pre_softmax,
                          .groups = s.groups,
                          .group_topk = s.group_topk,
                          .scale = s.scale};
      MoeRouting rt_host = rt, rt_dev = rt;
      if (s.bias) {
        rt_host.bias = bias.host();
        rt_dev.bias = bias.dev();
      }
      ref::moe_route(idx.host(), w.host(), logits.host(), rt_host);
      moe_route(g_dev, idx.dev(), w.dev(), logits.dev(), rt_dev);
      ck.check_exact("route experts", idx);
      ck.check("route weights", w, kTolF32);
      ref::moe_aux_scores(sc.host(), logits.host(), rt);
      moe_aux_scores(g_dev, sc.dev(), logits.dev(), rt);
      ck.check("aux scores", sc, kTolF32);
      const std::vector<double> nan(size_t(nb * E), std::nan(""));
      Pair<double> psum(nan), counts(nan);
      ref::moe_aux_sums(psum.host(), counts.host(), sc.host(), idx.host(), rt, nb, row0);
      moe_aux_sums(g_dev, psum.dev(), counts.dev(), sc.dev(), idx.dev(), rt, nb, row0);
      ck.check("aux psum", narrow(psum.dev_result()), narrow(psum.host_result()), kTolF32);
      ck.check_exact("aux counts", counts);
      ref::moe_logsumexp(lse.host(), logits.host(), rt);
      moe_logsumexp(g_dev, lse.dev(), logits.dev(), rt);
      ck.check("logsumexp", lse, kTolF32);

      // A permutation of the kept pairs (about one in five dropped) to rows [0, P).
      std::vector<int64_t> rows_of(size_t(n), -1), order;
      for (int64_t i = 0; i < n; ++i)
        if (n == 1 || g_rng() % 5 != 0) order.push_back(i);
      std::shuffle(order.begin(), order.end(), g_rng);
      for (size_t r = 0; r < order.size(); ++r) rows_of[size_t(order[r])] = int64_t(r);
      const int64_t P = int64_t(order.size());
      Pair<int64_t> row(rows_of);
      Pair<float> x(randn(T * h)), perm(poison(P * h)), drows(randn(P * h)), dx(poison(T * h));
      ref::moe_permute(perm.host(), x.host(), row.host(), rt, h);
      moe_permute(g_dev, perm.dev(), x.dev(), row.dev(), rt, h);
      ck.check("permute", perm, kTolF32);
      ref::moe_permute_backward(dx.host(), drows.host(), row.host(), rt, h);
      moe_permute_backward(g_dev, dx.dev(), drows.dev(), row.dev(), rt, h);
      ck.check("permute backward", dx, kTolF32);
      Pair<float> wt(w.host_result()), y(poison(T * h)), dy(randn(T * h)), dr(poison(P * h));
      Pair<float> dw(poison(n));
      ref::moe_combine(y.host(), drows.host(), row.host(), wt.host(), rt, h);
      moe_combine(g_dev, y.dev(), drows.dev(), row.dev(), wt.dev(), rt, h);
      ck.check("combine", y, kTolF32);
      ref::moe_combine_backward(dr.host(), dw.host(), dy.host(), drows.host(), row.host(),
                                wt.host(), rt, h);
      moe_combine_backward(g_dev, dr.dev(), dw.dev(), dy.dev(), drows.dev(), row.dev(), wt.dev(),
                           rt, h);
      ck.check("combine drows", dr, kTolF32);
      ck.check("combine dweight", dw, kTolF32);

      // The router's backward: through the weights alone, then with the aux and z losses.
      Pair<float> gw(randn(n)), cnt(narrow(counts.host_result())), scores(sc.host_result());
      for (const bool losses : {false, true}) {
        Pair<float> dl(poison(T * E));
        MoeRouterLoss lh, ld;  // nothing but the routing weights, or every term
        if (losses) {
          lh = {scores.host(), cnt.host(), 0.3, 0.05, nb, row0};
          ld = {scores.dev(), cnt.dev(), 0.3, 0.05, nb, row0};
        }
        ref::moe_router_backward(dl.host(), logits.host(), idx.host(), wt.host(), gw.host(), rt,
                                 lh);
        moe_router_backward(g_dev, dl.dev(), logits.dev(), idx.dev(), wt.dev(), gw.dev(), rt, ld);
        ck.check(losses ? "router dlogits (+aux, z)" : "router dlogits", dl, kTolF32);
      }
    });
  }
}

void adamw_cases(Checker& ck, bool small) {
  std::vector<int64_t> sizes = {1, 31, 32, 33, 1000, 10007};
  if (!small) sizes.push_back(5 << 20);
  for (int64_t n : sizes)
    for (bool with_bf16 : {false, true}) {
      // the bf16 copy's cases scale the gradients as clipping does
      ck.run("adamw", str("n", n, with_bf16 ? " +bf16 copy, grad scale 0.37" : ""), [&] {
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
                             .step = 7,
                             .grad_scale = with_bf16 ? 0.37f : 1.0f};
        ref::adamw_step(p.host(), m.host(), v.host(), g.host(), n, ap);
        adamw_step(g_dev, p.dev(), m.dev(), v.dev(), g.dev(), with_bf16 ? pb.dev() : nullptr, n,
                   ap);
        ck.check("param", p, kTolF32);
        ck.check("m", m, kTolF32);
        ck.check("v", v, kTolF32);
        // the bf16 copy is the rounding of the device's own fp32 result
        if (with_bf16) ck.check_bits("param bf16 (bits)", pb, narrow<bf16>(p.dev_result()));
      });
    }
  // The multi-tensor form: runs with their own lr and weight decay, gaps between them (left as
  // they are), moments packed in another order, an empty run.
  for (bool with_bf16 : {false, true}) {
    ck.run("adamw_step_runs", with_bf16 ? "5 runs +bf16 copy" : "5 runs", [&] {
      const int64_t n = 2000, nm = 1500;
      Pair<float> p(randn(n)), g(randn(n)), m(randn(nm, 0.1f));
      auto vv = randn(nm, 0.1f);
      for (auto& x : vv) x = x * x;
      Pair<float> v(vv);
      Pair<bf16> pb(std::vector<bf16>(size_t(n), bf16{0xffff}));
      const std::vector<AdamWRun> runs = {{0, 100, 1000, 3e-4f, 0.1f},
                                          {150, 333, 0, 1e-3f, 0.0f},
                                          {500, 0, 333, 1e-3f, 0.1f},
                                          {600, 1, 333, 2e-4f, 0.0f},
                                          {1000, 666, 334, 5e-4f, 0.05f}};
      AdamWParams ap{.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .step = 3, .grad_scale = 1.7f};
      for (const AdamWRun& r : runs) {
        ap.lr = r.lr;
        ap.weight_decay = r.weight_decay;
        ref::adamw_step(p.host() + r.begin, m.host() + r.moment, v.host() + r.moment,
                        g.host() + r.begin, r.n, ap);
      }
      adamw_step_runs(g_dev, p.dev(), m.dev(), v.dev(), g.dev(), with_bf16 ? pb.dev() : nullptr,
                      runs.data(), int64_t(runs.size()), ap);
      ck.check("param", p, kTolF32);
      ck.check("m", m, kTolF32);
      ck.check("v", v, kTolF32);
      if (with_bf16) {  // the runs' elements: the rounding of the device's result; gaps untouched
        std::vector<bf16> want(size_t(n), bf16{0xffff});
        const std::vector<float> got = p.dev_result();
        for (const AdamWRun& r : runs)
          for (int64_t i = r.begin; i < r.begin + r.n; ++i)
            want[size_t(i)] = float_to_bf16(got[size_t(i)]);
        ck.check_bits("param bf16 (bits)", pb, want);
      }
    });
  }
}

// Muon's momentum step (with and without Nesterov, a clipping factor) and the normalisation by a
// sum of squares held on the device.
void muon_cases(Checker& ck, bool small) {
  std::vector<int64_t> sizes = {1, 33, 1000, 10007};
  if (!small) sizes.push_back(3 << 20);
  for (int64_t n : sizes)
    for (bool nesterov : {false, true}) {
      ck.run("muon_momentum", str("n", n, nesterov ? " Nesterov, grad scale 0.37" : ""), [&] {
        Pair<float> m(randn(n, 0.1f)), u(poison(n)), g(randn(n));
        const float scale = nesterov ? 0.37f : 1.0f;
        ref::muon_momentum(m.host(), u.host(), g.host(), scale, 0.95f, nesterov, n);
        muon_momentum(g_dev, m.dev(), u.dev(), g.dev(), scale, 0.95f, nesterov, n);
        ck.check("momentum", m, kTolF32);
        ck.check("update", u, kTolF32);
      });
    }
  for (int64_t n : sizes)
    ck.run("scale_by_inverse_norm", str("n", n), [&] {
      Pair<float> x(randn(n));
      Pair<double> sumsq(std::vector<double>{12.5});
      ref::scale_by_inverse_norm(x.host(), 12.5, 1e-15, n);
      scale_by_inverse_norm(g_dev, x.dev(), sumsq.dev(), 1e-15, n);
      ck.check("x", x, kTolF32);
    });
}

// Ops on a stream of their own (kernels::create_stream; none on the CPU) instead of the default
// one: GEMM (its workspace is per stream), attention (stream-ordered scratch) and a
// host-returning reduction.
}  // namespace

int run_op_table(const Ctx& device, const OpTableOptions& options) {
  g_dev = device;
  g_rng.seed(20240601);
  std::printf("%-28s %-34s %11s %11s %8s  %s\n", "op output", "shape", "rel err", "max abs",
              "bound", "result");
  Checker ck(options);
  gemm_cases(ck, options.small);
  gemm_fp8_cases(ck);
  elementwise_cases(ck, options.small);
  dropout_cases(ck, options.small);
  norm_cases(ck, options.small);
  activation_cases(ck, options.small);
  rope_cases(ck, options.small);
  embedding_cases(ck, options.small);
  attention_cases(ck, options.small);
  xent_cases(ck, options.small);
  moe_cases(ck, options.small);
  adamw_cases(ck, options.small);
  muon_cases(ck, options.small);
  stream_cases(ck);
  memory_cases(ck);
  std::printf("op table: %d of %d comparisons failed\n", ck.failed(), ck.rows());
  return ck.failed();
}

}  // namespace mtron::kernels::test
