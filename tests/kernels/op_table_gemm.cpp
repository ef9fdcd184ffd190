// The op table's GEMM cases (op_table.h): gemm in fp32, bf16 and fp16 (every transpose, beta 0
// and 1, padded leading dimensions and unaligned views), gemm_bias (also to bf16), gemm_gelu,
// gemm_dgelu and gemm_fp8.
#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "mtron/kernels/ops.h"
#include "mtron/kernels/ref/ref_ops.h"
#include "op_checker.h"
#include "op_table_cases.h"

namespace mtron::kernels::test {
namespace {

// run(A, B, a_ref, b_ref): the operands a and b on the device in type `in` (Pair<float>, <bf16>
// or <f16>), and their values as the reference reads them (16-bit ones widened to fp32: exact).
template <typename Run>
void with_operands(DType in, const std::vector<float>& a, const std::vector<float>& b, Run run) {
  auto sixteen = [&](auto* type) {
    using H = std::remove_pointer_t<decltype(type)>;
    Pair<H> A(narrow<H>(a)), B(narrow<H>(b));
    const std::vector<float> aw = widen(A.host_result()), bw = widen(B.host_result());
    run(A, B, aw.data(), bw.data());
  };
  if (in == DType::kBF16) return sixteen(static_cast<bf16*>(nullptr));
  if (in == DType::kF16) return sixteen(static_cast<f16*>(nullptr));
  Pair<float> A(a), B(b);
  run(A, B, A.host(), B.host());
}

struct GemmCase {
  int64_t M, N, K, pad;  // pad: extra elements per row of every operand (lda > minimum)
};

void check_gemm(Checker& ck, const GemmCase& g, Trans ta, Trans tb, float beta, DType in) {
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
  const char* name = in == DType::kBF16  ? "gemm.bf16"
                     : in == DType::kF16 ? "gemm.fp16"
                                         : "gemm.fp32";
  ck.run(name, shape, [&] {
    auto a = randn(a_rows * lda + off), b = randn(b_rows * ldb + off);
    // beta == 0 must ignore C entirely, NaN included
    Pair<float> c(beta == 0.0f ? poison(g.M * ldc + off) : randn(g.M * ldc + off));
    with_operands(in, a, b, [&](const auto& A, const auto& B, const float* aw, const float* bw) {
      ref::gemm(ta, tb, g.M, g.N, g.K, 0.5f, aw + off, lda, bw + off, ldb, beta, c.host() + off,
                ldc);
      gemm(g_dev, ta, tb, g.M, g.N, g.K, 0.5f, A.dev() + off, lda, B.dev() + off, ldb, beta,
           c.dev() + off, ldc);
    });
    // the padding columns of C are not part of the result: compare the M x N block only
    std::vector<float> got = c.dev_result(), want = c.host_result(), g2, r2;
    for (int64_t r = 0; r < g.M; ++r)
      for (int64_t col = 0; col < g.N; ++col) {
        g2.push_back(got[size_t(off + r * ldc + col)]);
        r2.push_back(want[size_t(off + r * ldc + col)]);
      }
    // fp16 is widened to fp32 exactly on the CPU: fp32's tolerance
    ck.check("C", g2, r2, in == DType::kBF16 ? kTolBf16 : kTolF32);
  });
}

// gemm_bias against the reference GEMM, bias_add and add, C write-only (poisoned); the bias starts
// bias_off floats into its buffer (1: not 16-byte aligned, which CUDA runs as GEMM + bias_add;
// -1: no bias), with or without a residual.
void check_gemm_bias(
    Checker& ck, const GemmCase& g, Trans ta, Trans tb, DType in, int bias_off, bool residual) {
  const int64_t lda = (ta == Trans::kN ? g.K : g.M) + g.pad;
  const int64_t ldb = (tb == Trans::kN ? g.N : g.K) + g.pad;
  const int64_t a_rows = ta == Trans::kN ? g.M : g.K, b_rows = tb == Trans::kN ? g.K : g.N;
  const std::string shape = str("M", g.M, " N", g.N, " K", g.K, ta == Trans::kT ? " At" : "",
                                tb == Trans::kT ? " Bt" : "", g.pad ? " pad" : "",
                                bias_off > 0   ? " bias+1"
                                : bias_off < 0 ? " no bias"
                                               : "",
                                residual ? " residual" : "");
  const char* name = in == DType::kBF16  ? "gemm_bias.bf16"
                     : in == DType::kF16 ? "gemm_bias.fp16"
                                         : "gemm_bias.fp32";
  ck.run(name, shape, [&] {
    const auto a = randn(a_rows * lda), b = randn(b_rows * ldb);
    Pair<float> bias(randn(g.N + std::max(bias_off, 0))), c(poison(g.M * g.N));
    Pair<float> res(randn(g.M * g.N));
    with_operands(in, a, b, [&](const auto& A, const auto& B, const float* aw, const float* bw) {
      ref::gemm(ta, tb, g.M, g.N, g.K, 1.0f, aw, lda, bw, ldb, 0.0f, c.host(), g.N);
      if (bias_off >= 0) ref::bias_add(c.host(), bias.host() + bias_off, g.M, g.N);
      if (residual) ref::add(c.host(), c.host(), res.host(), g.M * g.N);
      gemm_bias(g_dev, ta, tb, g.M, g.N, g.K, A.dev(), lda, B.dev(), ldb, c.dev(),
                bias_off >= 0 ? bias.dev() + bias_off : nullptr, residual ? res.dev() : nullptr);
    });
    ck.check("C", c, in == DType::kBF16 ? kTolBf16 : kTolF32);
  });
}

// A bf16-output GEMM's case in form (ta, tb): bf16 operands of normal samples, a bf16 bias starting
// bias_off elements into its buffer (1: not 16-byte aligned, which CUDA runs without the
// epilogue; -1: none), and the fp32 reference v = op(A) op(B) + the widened bias.
struct Bf16Case {
  Bf16Case(const GemmCase& g, Trans ta, Trans tb, int bias_off)
      : lda((ta == Trans::kN ? g.K : g.M) + g.pad),
        ldb((tb == Trans::kN ? g.N : g.K) + g.pad),
        A(narrow<bf16>(randn((ta == Trans::kN ? g.M : g.K) * lda))),
        B(narrow<bf16>(randn((tb == Trans::kN ? g.K : g.N) * ldb))),
        bias(narrow<bf16>(randn(g.N + std::max(bias_off, 0)))),
        bias_off(bias_off),
        v(size_t(g.M * g.N)) {
    const std::vector<float> aw = widen(A.host_result()), bw = widen(B.host_result());
    ref::gemm(ta, tb, g.M, g.N, g.K, 1.0f, aw.data(), lda, bw.data(), ldb, 0.0f, v.data(), g.N);
    if (bias_off >= 0)
      ref::bias_add(v.data(), widen(bias.host_result()).data() + bias_off, g.M, g.N);
  }
  const bf16* bias_dev() const { return bias_off >= 0 ? bias.dev() + bias_off : nullptr; }

  int64_t lda, ldb;
  Pair<bf16> A, B, bias;
  int bias_off;
  std::vector<float> v;
};

std::string bf16_case_label(const GemmCase& g, Trans ta, Trans tb, int bias_off) {
  return str("M", g.M, " N", g.N, " K", g.K, ta == Trans::kT ? " At" : "",
             tb == Trans::kT ? " Bt" : "", g.pad ? " pad" : "",
             bias_off > 0   ? " bias+1"
             : bias_off < 0 ? " no bias"
                            : "");
}

// gemm_bias to bf16: the fp32 reference rounded to bf16, C poisoned.
void check_gemm_bias_to_bf16(Checker& ck, const GemmCase& g, Trans ta, Trans tb, int bias_off) {
  ck.run("gemm_bias.to_bf16", bf16_case_label(g, ta, tb, bias_off), [&] {
    const Bf16Case t(g, ta, tb, bias_off);
    Pair<bf16> c(narrow<bf16>(poison(g.M * g.N)));
    gemm_bias(g_dev, ta, tb, g.M, g.N, g.K, t.A.dev(), t.lda, t.B.dev(), t.ldb, c.dev(),
              t.bias_dev());
    ck.check("C", widen(c.dev_result()), widen(narrow<bf16>(t.v)), kTolBf16);
  });
}

// gemm_gelu: the fp32 reference rounded into pre and its reference GELU rounded into C, C and pre
// poisoned.
void check_gemm_gelu(Checker& ck, const GemmCase& g, Trans ta, Trans tb, int bias_off) {
  ck.run("gemm_gelu", bf16_case_label(g, ta, tb, bias_off), [&] {
    const Bf16Case t(g, ta, tb, bias_off);
    Pair<bf16> c(narrow<bf16>(poison(g.M * g.N))), pre(narrow<bf16>(poison(g.M * g.N)));
    std::vector<float> y(t.v.size());
    ref::gelu_forward(y.data(), t.v.data(), g.M * g.N);
    gemm_gelu(g_dev, ta, tb, g.M, g.N, g.K, t.A.dev(), t.lda, t.B.dev(), t.ldb, c.dev(), pre.dev(),
              t.bias_dev());
    ck.check("C", widen(c.dev_result()), widen(narrow<bf16>(y)), kTolBf16);
    ck.check("pre", widen(pre.dev_result()), widen(narrow<bf16>(t.v)), kTolBf16);
  });
}

// gemm_dgelu: the fp32 reference GEMM times the reference GELU derivative at a bf16 pre (normal
// samples scaled by 3: GELU's curved part and both tails), rounded; C poisoned.
void check_gemm_dgelu(Checker& ck, const GemmCase& g, Trans ta, Trans tb) {
  ck.run("gemm_dgelu", bf16_case_label(g, ta, tb, 0), [&] {
    const Bf16Case t(g, ta, tb, -1);
    std::vector<float> x = randn(g.M * g.N);
    for (float& e : x) e *= 3.0f;
    Pair<bf16> pre(narrow<bf16>(x)), c(narrow<bf16>(poison(g.M * g.N)));
    std::vector<float> d(t.v.size());
    ref::gelu_backward(d.data(), widen(pre.host_result()).data(), t.v.data(), g.M * g.N);
    gemm_dgelu(g_dev, ta, tb, g.M, g.N, g.K, t.A.dev(), t.lda, t.B.dev(), t.ldb, c.dev(),
               pre.dev());
    ck.check("C", widen(c.dev_result()), widen(narrow<bf16>(d)), kTolBf16);
  });
}

// gemm_fp8: operands of exact FP8 values (the reference's quantisation of normal samples, scaled
// so that E4M3's and E5M2's subnormals and largest values occur) against the reference GEMM of
// the values. On CUDA (the emulation) this is the packing to TN bytes and the FP8 product.
void check_gemm_fp8(
    Checker& ck, const GemmCase& g, Trans ta, Trans tb, float beta, Fp8Format fa, Fp8Format fb) {
  const int64_t lda = (ta == Trans::kN ? g.K : g.M) + g.pad;
  const int64_t ldb = (tb == Trans::kN ? g.N : g.K) + g.pad;
  const int64_t ldc = g.N + g.pad;
  const int64_t a_rows = ta == Trans::kN ? g.M : g.K, b_rows = tb == Trans::kN ? g.K : g.N;
  auto name = [](Fp8Format f) { return f == Fp8Format::kE4M3 ? "e4m3" : "e5m2"; };
  const std::string shape = str("M", g.M, " N", g.N, " K", g.K, ta == Trans::kT ? " At" : "",
                                tb == Trans::kT ? " Bt" : "", g.pad ? " pad" : "", " beta", beta,
                                " ", name(fa), " x ", name(fb));
  ck.run("gemm.fp8", shape, [&] {
    auto values = [](int64_t n, Fp8Format f) {
      const std::vector<float> x = randn(n, 0.5f * fp8_max(f));
      std::vector<bf16> q(static_cast<size_t>(n));
      ref::fp8_quantize(q.data(), nullptr, x.data(), 1.0f / 64, f, n);
      return q;
    };
    Pair<bf16> A(values(a_rows * lda, fa)), B(values(b_rows * ldb, fb));
    Pair<float> c(beta == 0.0f ? poison(g.M * ldc) : randn(g.M * ldc));
    const std::vector<float> aw = widen(A.host_result()), bw = widen(B.host_result());
    ref::gemm(ta, tb, g.M, g.N, g.K, 0.25f, aw.data(), lda, bw.data(), ldb, beta, c.host(), ldc);
    gemm_fp8(g_dev, ta, tb, g.M, g.N, g.K, 0.25f, A.dev(), fa, lda, B.dev(), fb, ldb, beta, c.dev(),
             ldc);
    std::vector<float> got = c.dev_result(), want = c.host_result(), g2, r2;
    for (int64_t r = 0; r < g.M; ++r)
      for (int64_t col = 0; col < g.N; ++col) {
        g2.push_back(got[size_t(r * ldc + col)]);
        r2.push_back(want[size_t(r * ldc + col)]);
      }
    ck.check("C", g2, r2, kTolBf16);
  });
}

}  // namespace

void gemm_cases(Checker& ck, bool small) {
  std::vector<GemmCase> cases = {{1, 1, 1, 0},   {31, 33, 17, 0}, {33, 31, 65, 3},
                                 {16, 24, 0, 1}, {32, 32, 32, 0}, {67, 5, 130, 0},
                                 {1, 64, 77, 2}, {130, 1, 3, 0},  {96, 80, 256, 0}};
  if (!small) {
    cases.push_back({512, 768, 256, 0});
    cases.push_back({1024, 2304, 768, 0});  // GPT-2 124M qkv, 1024 tokens
    cases.push_back({777, 1001, 515, 5});
  }
  for (const GemmCase& g : cases)
    for (Trans ta : {Trans::kN, Trans::kT})
      for (Trans tb : {Trans::kN, Trans::kT})
        for (float beta : {0.0f, 1.0f})
          for (DType in : {DType::kF32, DType::kBF16, DType::kF16}) {
            // large shapes: the three forms a linear layer uses (forward, dgrad, wgrad)
            if (g.M >= 512 && ta == Trans::kT && tb == Trans::kT) continue;
            check_gemm(ck, g, ta, tb, beta, in);
          }
  // gemm_bias: the linear layer's forward form (kN, kT) in every case, the other forms on a few
  for (const GemmCase& g : cases)
    for (Trans ta : {Trans::kN, Trans::kT})
      for (Trans tb : {Trans::kN, Trans::kT}) {
        if ((ta != Trans::kN || tb != Trans::kT) && (g.M >= 512 || g.K == 0)) continue;
        for (DType in : {DType::kF32, DType::kBF16, DType::kF16})
          for (int bias_off : {0, 1, -1})
            for (bool residual : {false, true})
              if (bias_off >= 0 || residual) check_gemm_bias(ck, g, ta, tb, in, bias_off, residual);
        for (int bias_off : {0, 1, -1}) {
          check_gemm_bias_to_bf16(ck, g, ta, tb, bias_off);
          check_gemm_gelu(ck, g, ta, tb, bias_off);
        }
        check_gemm_dgelu(ck, g, ta, tb);
      }
}

void gemm_fp8_cases(Checker& ck) {
  const std::vector<GemmCase> cases = {
      {1, 1, 1, 0}, {31, 33, 17, 0}, {33, 31, 65, 3}, {16, 24, 0, 1}, {96, 80, 256, 0}};
  const std::pair<Fp8Format, Fp8Format> formats[] = {{Fp8Format::kE4M3, Fp8Format::kE4M3},
                                                     {Fp8Format::kE5M2, Fp8Format::kE4M3},
                                                     {Fp8Format::kE4M3, Fp8Format::kE5M2}};
  for (const GemmCase& g : cases)
    for (Trans ta : {Trans::kN, Trans::kT})
      for (Trans tb : {Trans::kN, Trans::kT})
        for (float beta : {0.0f, 1.0f})
          for (const auto& [fa, fb] : formats) check_gemm_fp8(ck, g, ta, tb, beta, fa, fb);
}

}  // namespace mtron::kernels::test
