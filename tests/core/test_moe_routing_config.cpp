// --moe-layer-freq's list expressions (core/moe_layer_freq.h) and the DeepSeek routing options'
// checks, with Megatron's messages.
#include <gtest/gtest.h>

#include "mtron/core/model_config.h"
#include "mtron/core/moe_layer_freq.h"
#include "test_helpers.h"

namespace mtron {
namespace {

using tests::error_of;

std::vector<int64_t> pattern(const std::string& s) {
  int64_t freq = 0;
  std::vector<int64_t> p;
  parse_moe_layer_freq(s, freq, p);
  return p;
}

TEST(MoeLayerFreq, IntegersAndListExpressions) {
  int64_t freq = 0;
  std::vector<int64_t> p;
  parse_moe_layer_freq("3", freq, p);
  EXPECT_EQ(freq, 3);
  EXPECT_TRUE(p.empty());
  EXPECT_EQ(pattern("[0,1,1]"), (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(pattern("([0]*3+[1]*2)"), (std::vector<int64_t>{0, 0, 0, 1, 1}));
  EXPECT_EQ(pattern("([1]*2+[0]*1)*2"), (std::vector<int64_t>{1, 1, 0, 1, 1, 0}));
  EXPECT_EQ(pattern("2*[1,0]"), (std::vector<int64_t>{1, 0, 1, 0}));
  EXPECT_EQ(pattern("[0]+[1]*(2+1)"), (std::vector<int64_t>{0, 1, 1, 1}));
  EXPECT_EQ(moe_layer_freq_string(1, {0, 1, 1}), "[0,1,1]");
  EXPECT_EQ(moe_layer_freq_string(2, {}), "2");
}

TEST(MoeLayerFreq, MalformedIsMegatronsError) {
  int64_t freq = 0;
  std::vector<int64_t> p;
  for (const char* bad : {"[0,1", "[0]*[1]", "[0] 1", "[a]", "([0]*2", "[0]+2", "[]"}) {
    EXPECT_EQ(error_of([&] { parse_moe_layer_freq(bad, freq, p); }),
              std::string("Invalid pattern: ") + bad)
        << bad;
  }
  EXPECT_NE(error_of([&] { parse_moe_layer_freq("x", freq, p); }).find("invalid int value"),
            std::string::npos);
}

ModelConfig moe() {
  ModelConfig m = tests::model_shape(4, 64, 8, 32, 500);
  m.num_experts = 16;
  m.moe_router_topk = 4;
  return m;
}

TEST(MoeRouting, LayerPatternLength) {
  ModelConfig m = moe();
  m.moe_layer_pattern = {0, 1, 1};
  EXPECT_EQ(error_of([&] { m.finalize(); }),
            "Invalid length of moe_layer_pattern: 3, expected 4, current moe layer pattern: "
            "[0, 1, 1]");
  m.moe_layer_pattern = {0, 1, 1, 1};
  m.finalize();
  EXPECT_EQ(m.num_moe_layers(), 3);
  EXPECT_FALSE(m.is_moe_layer(0));
  EXPECT_TRUE(m.is_moe_layer(3));
}

TEST(MoeRouting, MtpDepthsTakeTheLastLayersKind) {
  ModelConfig m = moe();
  m.position_embedding_type = PositionEmbedding::kRope;
  ModelConfig base = m, five = m;
  m.moe_layer_pattern = base.moe_layer_pattern = {0, 1, 1, 1};
  m.mtp_num_layers = 2;
  five.num_layers = 5;
  five.moe_layer_pattern = {0, 1, 1, 1, 1};
  for (ModelConfig* c : {&m, &base, &five}) c->finalize();
  EXPECT_TRUE(m.is_moe_layer(4));
  EXPECT_TRUE(m.is_moe_layer(5));
  EXPECT_EQ(m.num_moe_layers(), 3);
  EXPECT_EQ(m.num_mtp_moe_layers(), 2);
  // Each depth: an MoE layer (what a fifth decoder layer adds), enorm, hnorm, final_layernorm
  // (LayerNorm: weight and bias) and eh_proj [h, 2h].
  const int64_t h = m.hidden_size;
  EXPECT_EQ(m.num_parameters(1) - base.num_parameters(1),
            2 * (five.num_parameters(1) - base.num_parameters(1) + 3 * 2 * h + 2 * h * h));
  ModelConfig dense_last = moe();
  dense_last.position_embedding_type = PositionEmbedding::kRope;
  dense_last.moe_layer_pattern = {1, 1, 1, 0};
  dense_last.mtp_num_layers = 1;
  dense_last.finalize();
  EXPECT_FALSE(dense_last.is_moe_layer(4));
  EXPECT_EQ(dense_last.num_mtp_moe_layers(), 0);
}

TEST(MoeRouting, GroupLimitedChecks) {
  ModelConfig m = moe();
  m.moe_router_group_topk = 2;
  EXPECT_EQ(error_of([&] { m.finalize(); }),
            "When using group limited routing, moe_router_num_groups must be specified.");
  m = moe();
  m.moe_router_group_topk = 2;
  m.moe_router_num_groups = 3;
  EXPECT_EQ(error_of([&] { m.finalize(); }),
            "num_moe_experts (16) should be divisible by moe_router_num_groups (3).");
  m.moe_router_num_groups = 4;
  m.moe_router_group_topk = 8;
  EXPECT_EQ(error_of([&] { m.finalize(); }),
            "moe_router_group_topk (8) should be smaller than moe_router_num_groups (4).");
  m.moe_router_group_topk = 1;
  m.moe_router_topk = 8;  // one group of 4 experts cannot hold 8
  EXPECT_NE(error_of([&] { m.finalize(); }).find("--moe-router-topk (8) must be in"),
            std::string::npos);
  m.moe_router_group_topk = 2;
  m.finalize();
}

TEST(MoeRouting, ExpertBiasNeedsSigmoid) {
  ModelConfig m = moe();
  m.moe_router_enable_expert_bias = true;
  EXPECT_NE(error_of([&] {
              m.finalize();
            }).find("Expert bias for aux-loss-free routing only supports 'sigmoid'"),
            std::string::npos);
  m.moe_router_score_function = RouterScore::kSigmoid;
  m.finalize();
}

TEST(MoeRouting, TopOneSoftmaxNeedsPreSoftmax) {
  ModelConfig m = moe();
  m.moe_router_topk = 1;  // a softmax over one chosen logit: weight 1, no gradient
  EXPECT_EQ(error_of([&] { m.finalize(); }), "Please use --moe-router-pre-softmax when topk is 1.");
  m.moe_router_pre_softmax = true;
  m.finalize();
  m = moe();
  m.moe_router_topk = 1;
  m.moe_router_score_function = RouterScore::kSigmoid;
  m.finalize();
}

TEST(MoeRouting, SinkhornChecks) {
  ModelConfig m = moe();
  m.moe_router_load_balancing_type = RouterLoadBalancing::kSinkhorn;
  m.moe_router_topk = 1;  // Megatron's exception to the top-1 rule
  m.moe_z_loss_coeff = 1e-3f;
  m.finalize();
  m.moe_aux_loss_coeff = 1e-2f;
  EXPECT_EQ(error_of([&] { m.finalize(); }), "Sinkhorn routing does not support aux loss.");
  m.moe_aux_loss_coeff = 0;
  m.moe_expert_capacity_factor = 1.0f;
  EXPECT_EQ(error_of([&] { m.finalize(); }),
            "moe_expert_capacity_factor only works with aux_loss, seq_aux_loss, global_aux_loss "
            "or none load balancing");
  m.moe_expert_capacity_factor = 0;
  // Options Megatron's Sinkhorn routing ignores are refused by name.
  const auto refused = [&](const char* flag, auto set) {
    ModelConfig c = m;
    set(c);
    const std::string e = error_of([&] { c.finalize(); });
    EXPECT_NE(e.find(std::string("which ignores ") + flag + ": drop it"), std::string::npos) << e;
  };
  refused("--moe-router-score-function sigmoid",
          [](ModelConfig& c) { c.moe_router_score_function = RouterScore::kSigmoid; });
  refused("--moe-router-pre-softmax", [](ModelConfig& c) { c.moe_router_pre_softmax = true; });
  refused("--moe-router-group-topk", [](ModelConfig& c) {
    c.moe_router_num_groups = 4;
    c.moe_router_group_topk = 1;
  });
  refused("--moe-router-topk-scaling-factor",
          [](ModelConfig& c) { c.moe_router_topk_scaling_factor = 2.0f; });
  refused("--moe-router-enable-expert-bias", [](ModelConfig& c) {
    c.moe_router_enable_expert_bias = true;
    c.moe_router_score_function = RouterScore::kSigmoid;
  });
}

}  // namespace
}  // namespace mtron
