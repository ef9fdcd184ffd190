#include <gtest/gtest.h>

#include <cmath>

#include "mtron/core/formulas.h"
#include "mtron/core/parallel_config.h"
#include "test_helpers.h"

namespace mtron {
namespace {

using tests::error_of;

ModelConfig gpt2_124m() {
  ModelConfig m = tests::model_shape(12, 768, 12, 1024, 50257);
  m.max_position_embeddings = 1024;
  m.finalize();
  return m;
}

TEST(ModelConfig, DefaultsAndPadding) {
  ModelConfig m = gpt2_124m();
  EXPECT_EQ(m.ffn(), 3072);
  EXPECT_EQ(m.kv_channels, 64);
  EXPECT_EQ(m.query_groups(), 12);
  EXPECT_EQ(m.padded_vocab_size(1), 50304);
  EXPECT_EQ(m.padded_vocab_size(4), 50688);
  // GPT-2 small: 124,475,904 parameters with the vocab padded to 50304 (124,439,808 at 50257).
  EXPECT_EQ(m.num_parameters(1), 124475904);
  ModelConfig s = tests::model_shape(2, 4096, 32, 8, 10);
  s.swiglu = true;
  s.finalize();
  EXPECT_EQ(s.ffn(), 10880);  // int(8h/3/64)*64
}

TEST(ModelConfig, BadShapesNameTheFlag) {
  ModelConfig m = gpt2_124m();
  m.num_attention_heads = 10;
  m.kv_channels = 0;
  EXPECT_NE(error_of([&] { m.finalize(); }).find("--num-attention-heads"), std::string::npos);
  ModelConfig g = gpt2_124m();
  g.group_query_attention = true;
  g.num_query_groups = 5;
  EXPECT_NE(error_of([&] { g.finalize(); }).find("--num-query-groups"), std::string::npos);
  ModelConfig n = gpt2_124m();
  n.hidden_size = -3;
  EXPECT_NE(error_of([&] { n.finalize(); }).find("--hidden-size"), std::string::npos);
}

// YaRN of multi-latent attention at DeepSeek-V3's values (qk_rope_head_dim 64, rope_theta 10000,
// factor 40, mscale = mscale_all_dim = 1): the correction range [10, 23] and softmax scale
// 0.1352 that Megatron's yarn_rotary_pos_embedding.py and MLASelfAttention compute
// (_yarn_find_correction_range: 10.47 -> 10, 22.50 -> 23; (0.1 ln 40 + 1)^2 / sqrt(192)).
TEST(MlaConfig, YarnAtDeepSeekV3Values) {
  MlaConfig a;
  a.enabled = true;
  a.qk_head_dim = 128;
  a.qk_pos_emb_head_dim = 64;
  a.rotary_scaling_factor = 40;
  a.mscale = a.mscale_all_dim = 1;
  double low = 0, high = 0;
  a.yarn_ramp(10000, &low, &high);
  EXPECT_EQ(low, 10);
  EXPECT_EQ(high, 23);
  EXPECT_DOUBLE_EQ(a.yarn_concentration(), 1.0);
  const double m = 0.1 * std::log(40.0) + 1;
  EXPECT_NEAR(a.softmax_scale(), m * m / std::sqrt(192.0), 1e-7);
  a.mscale_all_dim = 0;  // Megatron's default: concentration get_mscale(40, 1) / 1, scale plain
  EXPECT_NEAR(a.yarn_concentration(), m, 1e-12);
  EXPECT_EQ(a.softmax_scale(), 1.0f / std::sqrt(192.0f));
  a.rotary_scaling_factor = 1;  // factor 1: plain RoPE
  EXPECT_DOUBLE_EQ(a.yarn_concentration(), 1.0);
  ModelConfig c = tests::model_shape(2, 64, 4, 8, 100);
  c.mla.rope_type = "yarn";
  EXPECT_NE(error_of([&] { c.finalize(); }).find("--rope-type yarn needs --multi-latent-attention"),
            std::string::npos);
}

TEST(ParallelConfig, MegatronRules) {
  ModelConfig m = gpt2_124m();
  ParallelConfig p = tests::layout({.world = 16, .tp = 2, .pp = 2, .cp = 2, .mbs = 2, .gbs = 16});
  p.num_layers_per_virtual_pipeline_stage = 3;
  p.finalize(m);
  EXPECT_EQ(p.dp(), 2);
  EXPECT_EQ(p.vpp(), 2);
  EXPECT_EQ(p.num_microbatches(), 4);

  ParallelConfig bad = p;
  bad.global_batch_size = 10;
  EXPECT_EQ(error_of([&] { bad.finalize(m); }),
            "global batch size (10) is not divisible by micro batch size (2) times data parallel "
            "size (2)");
  ParallelConfig w = p;
  w.world_size = 12;
  EXPECT_NE(error_of([&] { w.finalize(m); }).find("world_size (12) is not divisible"),
            std::string::npos);
  ParallelConfig tp = p;
  tp.tensor_model_parallel_size = 8;
  tp.world_size = 64;
  EXPECT_NE(error_of([&] { tp.finalize(m); }).find("num_attention_heads (12) must be a multiple"),
            std::string::npos);
}

// --cp-comm-type and --hierarchical-context-parallel-sizes: the words (one argument or several,
// Megatron's "allgather"), one per layer, and Megatron's and mtron's refusals.
TEST(ParallelConfig, CpCommTypes) {
  const ModelConfig m = gpt2_124m();  // 12 layers, 12 heads
  const auto cp = [&](int64_t size, std::vector<std::string> types, std::vector<int64_t> hcp = {}) {
    ParallelConfig p = tests::layout({.world = 8, .cp = size, .mbs = 1});
    p.cp_comm_type = std::move(types);
    p.hierarchical_context_parallel_sizes = std::move(hcp);
    return p;
  };
  ParallelConfig a = cp(4, {"a2a+p2p"}, {2, 2});
  a.finalize(m);
  EXPECT_EQ(a.cp_comms(), std::vector<CpCommType>{CpCommType::kA2AP2P});
  EXPECT_EQ(a.cp_a2a_size(CpCommType::kA2AP2P), 2);
  EXPECT_EQ(a.cp_a2a_size(CpCommType::kA2A), 4);
  EXPECT_NE(a.summary().find("CP by a2a+p2p (all-to-all over 2, ring over 2)"), std::string::npos);
  ParallelConfig words = cp(2, {"a2a a2a allgather", "p2p p2p p2p", "a2a+p2p"}, {1, 2});
  words.cp_comm_type.insert(words.cp_comm_type.end(), 5, "p2p");
  words.finalize(m);
  EXPECT_EQ(words.cp_comms().size(), 12u);
  EXPECT_EQ(words.cp_comms()[2], CpCommType::kAllGather);
  EXPECT_NE(words.summary().find("CP by a2a*2 all_gather p2p*3 a2a+p2p p2p*5"), std::string::npos);
  ParallelConfig one = cp(1, {"a2a"});  // CP 1: no CP communication at all
  one.finalize(m);
  EXPECT_EQ(one.cp_comms(), std::vector<CpCommType>{CpCommType::kP2P});

  const auto error = [&](ParallelConfig p) { return error_of([&] { p.finalize(m); }); };
  EXPECT_EQ(error(cp(2, {"ulysses"})),
            "--cp-comm-type: 'ulysses' is not one of p2p, all_gather, a2a, a2a+p2p");
  EXPECT_EQ(error(cp(2, {"a2a", "p2p"})),
            "Length of cp_comm_type (2) should equal to the total number of transformer layers "
            "(12)!");
  EXPECT_EQ(error(cp(4, {"a2a+p2p"})),
            "--hierarchical-context-parallel-sizes must be set when a2a+p2p is used in cp comm");
  EXPECT_EQ(error(cp(4, {"p2p"}, {2, 3})),
            "--hierarchical-context-parallel-sizes (2 x 3 = 6) must multiply to "
            "--context-parallel-size (4)");
  EXPECT_NE(error(cp(4, {"a2a+p2p"}, {1, 2, 2})).find("takes two levels"), std::string::npos);
  EXPECT_EQ(error(cp(8, {"a2a"})),
            "--cp-comm-type a2a splits the attention heads over 8 ranks (its all-to-all group): "
            "the heads per tensor-parallel rank (12) and the query groups per tensor-parallel "
            "rank (12) must be multiples of 8");
  EXPECT_EQ(error(cp(8, {"a2a+p2p"}, {4, 2})), "");  // 12 heads over all-to-all groups of 4
}

TEST(Formulas, MegatronFlopsMatchesClosedForm) {
  // Dense MHA, F = 4h, GeLU: 72 B s L h^2 (1 + s/(12h) + V/(12 L h)).
  ModelConfig m = gpt2_124m();
  const double B = 8, s = 1024, L = 12, h = 768, V = 50304;
  const double closed = 72 * B * s * L * h * h * (1 + s / (12 * h) + V / (12 * L * h));
  EXPECT_NEAR(flops_per_iteration(m, 8, 50304) / closed, 1.0, 1e-12);
}

TEST(Formulas, MegatronFlopsCountsMtpDepths) {
  // Megatron's: each depth adds a dense layer (attention 4h^2 + MLP 8h^2 and attention's s h per
  // token), its norms and eh_proj (3h + 2h^2) and the logits (h V), times 6 (forward + backward,
  // multiply-add).
  ModelConfig m = gpt2_124m();
  const double B = 8, s = 1024, h = 768, V = 50304;
  const double base = flops_per_iteration(m, 8, 50304);
  m.mtp_num_layers = 2;
  const double depth = 6 * B * s * (12 * h * h + s * h + 3 * h + 2 * h * h + h * V);
  EXPECT_NEAR((flops_per_iteration(m, 8, 50304) - base) / (2 * depth), 1.0, 1e-12);
}

}  // namespace
}  // namespace mtron
