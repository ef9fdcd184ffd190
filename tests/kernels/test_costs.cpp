// The ops' costs as the profile records them (kernels/contracts.h): FLOPs, bytes moved and the
// minimum with bf16 activations and GEMM epilogues.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "mtron/core/profile.h"
#include "mtron/kernels/ops.h"

namespace mtron::kernels::test {
namespace {

const Ctx kCpu{};

// What the calls made by f() added to profile entry `id`.
template <typename F>
OpCost cost_of(const std::string& id, F f) {
  auto find = [&] {
    for (const ProfileEntry& e : profile_report())
      if (e.name == id) return e.cost;
    return OpCost{};
  };
  profile_enable(true);
  const OpCost before = find();
  f();
  const OpCost after = find();
  profile_enable(false);
  return {after.flops - before.flops, after.bytes - before.bytes,
          after.min_bytes - before.min_bytes, after.tensor_flops - before.tensor_flops};
}

TEST(OpCost, ElementwiseOpsMoveEachTensorOnce) {
  const int64_t n = 1000;
  std::vector<float> a(n, 1.0f), b(n, 2.0f), out(n);
  const OpCost add_cost = cost_of("add", [&] { add(kCpu, out.data(), a.data(), b.data(), n); });
  EXPECT_EQ(add_cost.flops, 0);
  EXPECT_EQ(add_cost.bytes, 12.0 * n);     // two fp32 inputs, one output
  EXPECT_EQ(add_cost.min_bytes, 6.0 * n);  // the same in bf16
  // a conversion to a GEMM input and a bias pass cost nothing at the minimum
  std::vector<bf16> h(n);
  const OpCost conv = cost_of("convert_to_bf16", [&] { convert(kCpu, h.data(), a.data(), n); });
  EXPECT_EQ(conv.bytes, 6.0 * n);
  EXPECT_EQ(conv.min_bytes, 0);
  const OpCost bias =
      cost_of("bias_add", [&] { bias_add(kCpu, out.data(), b.data(), n / 10, 10); });
  EXPECT_EQ(bias.bytes, 8.0 * n + 40);
  EXPECT_EQ(bias.min_bytes, 0);
}

TEST(OpCost, GemmCountsFlopsAndOperands) {
  const int64_t M = 8, N = 6, K = 4;
  std::vector<float> A(M * K, 1.0f), B(K * N, 1.0f), C(M * N, 0.0f);
  const OpCost c = cost_of("gemm_fp32", [&] {
    gemm(kCpu, Trans::kN, Trans::kN, M, N, K, 1.0f, A.data(), K, B.data(), N, 1.0f, C.data(), N);
  });
  EXPECT_EQ(c.flops, 2.0 * M * N * K);
  EXPECT_EQ(c.bytes, 4.0 * (M * K + K * N + 2 * M * N));  // beta = 1 reads C
  EXPECT_EQ(c.tensor_flops, 0);
}

TEST(OpCost, AttentionWithBf16ProductsCountsTensorFlops) {
  for (const bool bf16_products : {false, true}) {
    const AttnShape s{1, 16, 16, 2, 1, 8, 8, 0.35f, bf16_products};
    std::vector<float> q(16 * 2 * 8, 0.1f), kv(16 * 8, 0.2f), o(16 * 2 * 8), lse(2 * 16);
    const OpCost c = cost_of("attention_forward", [&] {
      attention_forward(kCpu, o.data(), lse.data(), q.data(), kv.data(), kv.data(), s,
                        AttnMask{true, 0});
    });
    EXPECT_EQ(c.flops, 2.0 * 2 * 16 * 16 * 16 / 2);  // causal: half of 2 B H Sq Sk (D + Dv)
    EXPECT_EQ(c.tensor_flops, bf16_products ? c.flops : 0);
    // q and out [16, 2, 8], k and v [16, 1, 8] in fp32 (halved at the minimum), lse [2, 16]
    EXPECT_EQ(c.bytes, 4.0 * (2 * 256 + 2 * 128) + 4.0 * 32);
    EXPECT_EQ(c.min_bytes, 2.0 * (2 * 256 + 2 * 128) + 4.0 * 32);
  }
}

}  // namespace
}  // namespace mtron::kernels::test
