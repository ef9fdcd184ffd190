// Selective recompute's modules (Megatron's --recompute-modules) in the planner: what each drops
// from a layer's saved activations, counted by hand for a model small enough to count; the
// rebuilt layer in the transient memory; each module's forward seconds in the recompute term;
// the layout's name and JSON; the search's candidates; the launch script's flags.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "mtron/plan/emit.h"
#include "mtron/plan/report.h"
#include "util.h"

namespace mtron::plan {
namespace {

using M = RecomputeModule;

// h 64, 4 heads, seq 32, SwiGLU ffn 128, bf16. With `moe_mla`: multi-latent attention (q rank
// 32, kv rank 16, qk 16 + 8, v 16), one dense layer then three MoE layers of 8 experts top-2
// (ffn 32) with a shared expert of 32.
ModelConfig tiny(bool moe_mla) {
  std::string flags =
      "--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
      "--max-position-embeddings 32 --vocab-size 128 --ffn-hidden-size 128 --swiglu "
      "--normalization RMSNorm --position-embedding-type rope --disable-bias-linear "
      "--hidden-dropout 0 --attention-dropout 0 --untie-embeddings-and-output-weights";
  if (moe_mla) {
    flags +=
        " --multi-latent-attention --q-lora-rank 32 --kv-lora-rank 16 --qk-head-dim 16 "
        "--qk-pos-emb-head-dim 8 --v-head-dim 16 --num-experts 8 --moe-ffn-hidden-size 32 "
        "--moe-router-topk 2 --moe-shared-expert-intermediate-size 32 --moe-layer-freq "
        "([0]*1+[1]*3)";
  }
  std::istringstream in(flags);
  std::vector<std::string> args;
  for (std::string w; in >> w;) args.push_back(w);
  return parse_model_args(args);
}

RecomputeModules modules(std::initializer_list<M> list) {
  RecomputeModules r{0};
  for (M x : list) r.add(x);
  return r;
}

Layout selective(const ModelConfig& m, RecomputeModules r, Precision p = Precision::kBF16) {
  Layout l = test::layout(m, {.world = 1, .mbs = 1, .gbs = 2});
  l.recompute = RecomputeGranularity::kSelective;
  l.recompute_modules = r;
  l.precision = p;
  return l;
}

double bytes(const ModelConfig& m, const Layout& l, bool moe_layer, bool fused = true) {
  return layer_activation_bytes(m, l, fused, moe_layer);
}

// A dense GQA layer, T = 32 tokens, 2-byte elements. Attention: norm input and QKV input
// 2 x 2 x 32 x 64 = 8192, Q/K/V 2 x 32 x 192 = 12288, projection input 4096, softmax statistics
// 4 x 32 x 4 = 512. MLP: norm input 4096, fc1 input 4096, fc1 outputs 2 x 32 x 256 = 16384,
// activation output 2 x 32 x 128 = 8192. Total 57856.
TEST(RecomputeMemory, DenseLayerByHand) {
  const ModelConfig m = tiny(false);
  Layout none = selective(m, {});
  none.recompute = RecomputeGranularity::kNone;
  EXPECT_EQ(bytes(m, none, false), 57856);
  EXPECT_EQ(bytes(m, selective(m, RecomputeModules{}), false), 57856);  // core_attn, fused
  // layernorm: the QKV input and the fc1 input, 2 x 4096.
  EXPECT_EQ(bytes(m, selective(m, modules({M::kLayernorm})), false), 57856 - 8192);
  // mlp: fc1 outputs and activation output, 16384 + 8192; its input stays.
  EXPECT_EQ(bytes(m, selective(m, modules({M::kMlp})), false), 57856 - 24576);
  // Both: the checkpointed MLP's input is the discarded norm output.
  EXPECT_EQ(bytes(m, selective(m, modules({M::kLayernorm, M::kMlp})), false), 57856 - 32768);
  // Modules of parts this layer does not have drop nothing.
  EXPECT_EQ(bytes(m, selective(m, modules({M::kMlaUpProj, M::kMoe, M::kMoeAct, M::kSharedExperts})),
                  false),
            57856);
  // Materialised scores (2 x 4 x 32 x 32 = 8192, no softmax statistics): core_attn drops them,
  // other modules keep them.
  EXPECT_EQ(bytes(m, none, false, false), 57856 - 512 + 8192);
  EXPECT_EQ(bytes(m, selective(m, RecomputeModules{}), false, false), 57856 - 512);
  EXPECT_EQ(bytes(m, selective(m, modules({M::kMlp})), false, false), 57856 - 512 + 8192 - 24576);
  // fp8 (1-byte GEMM inputs): 47616 without recompute; mlp keeps its input as the checkpoint
  // saves it, in bf16 (4096 for the fp8 cast's 2048), and drops 16384 + 4096.
  Layout fp8 = none;
  fp8.precision = Precision::kFP8;
  EXPECT_EQ(bytes(m, fp8, false), 47616);
  EXPECT_EQ(bytes(m, selective(m, modules({M::kMlp}), Precision::kFP8), false),
            47616 + 2048 - 16384 - 4096);
}

// Multi-latent attention: norm input and down projections' input 8192, Q/K/V at the head dims
// 2 x 32 x 4 x (24 + 24 + 16) = 16384, projection input 2 x 32 x 64 = 4096, latents
// 2 x 32 x 2 x (32 + 16) = 6144, statistics 512: 35328. Dense MLP 4096 + 28672 (as above): 68096.
// MoE MLP: norm input 4096, router 4 x 32 x 8 = 1024; 64 routed tokens: input 2 x 64 x 64 = 8192,
// fc1 outputs 2 x 64 x 64 = 8192, activation 2 x 64 x 32 = 4096, outputs 8192; shared expert:
// input 4096, fc1 outputs 4096, activation 2048. MoE layer 79360.
TEST(RecomputeMemory, MlaAndMoeLayersByHand) {
  const ModelConfig m = tiny(true);
  Layout none = selective(m, {});
  none.recompute = RecomputeGranularity::kNone;
  EXPECT_EQ(bytes(m, none, false), 68096);
  EXPECT_EQ(bytes(m, none, true), 79360);
  auto drop = [&](RecomputeModules r, bool moe_layer) {
    return bytes(m, none, moe_layer) - bytes(m, selective(m, r), moe_layer);
  };
  // mla_up_proj: Q/K/V at MLA's head dims, in both kinds of layer.
  EXPECT_EQ(drop(modules({M::kMlaUpProj}), false), 16384);
  EXPECT_EQ(drop(modules({M::kMlaUpProj}), true), 16384);
  // layernorm: the down projections' input; the dense fc1's or the shared expert's input.
  EXPECT_EQ(drop(modules({M::kLayernorm}), false), 8192);
  EXPECT_EQ(drop(modules({M::kLayernorm}), true), 8192);
  // moe_act: the routed experts' activation output.
  EXPECT_EQ(drop(modules({M::kMoeAct}), true), 4096);
  EXPECT_EQ(drop(modules({M::kMoeAct}), false), 0);
  // shared_experts: the shared expert's fc1 outputs and activation output.
  EXPECT_EQ(drop(modules({M::kSharedExperts}), true), 4096 + 2048);
  // moe: the whole MoE block (router, routed and shared experts) but its input, 4096.
  EXPECT_EQ(drop(modules({M::kMoe}), true), 1024 + 28672 + 10240 - 4096);
  EXPECT_EQ(drop(modules({M::kMoe, M::kLayernorm}), true), 1024 + 28672 + 10240 + 4096);
  // mlp: dense layers only.
  EXPECT_EQ(drop(modules({M::kMlp}), false), 24576);
  EXPECT_EQ(drop(modules({M::kMlp}), true), 0);
  // core_attn with fused attention: nothing.
  EXPECT_EQ(drop(RecomputeModules{}, true), 0);
}

// The transient peak during backward holds one layer's rebuilt modules where that is more than
// the logits and their gradient ((2 + 4) x 32 x 128 = 24576 bytes at vocabulary 128).
TEST(RecomputeMemory, TransientHoldsTheRebuiltLayer) {
  const ModelConfig m = tiny(true);
  const Cluster c = test::gpus("h100-sxm", 1);
  EXPECT_EQ(estimate_memory(m, selective(m, RecomputeModules{}), c).working, 24576);
  EXPECT_EQ(estimate_memory(m, selective(m, modules({M::kMlaUpProj})), c).working, 24576);
  EXPECT_EQ(estimate_memory(m, selective(m, modules({M::kMoe})), c).working, 35840);
  EXPECT_EQ(estimate_memory(m, selective(m, modules({M::kMoe, M::kMlaUpProj})), c).working,
            35840 + 16384);
}

// Each module's forward seconds, from the same GEMM and bandwidth terms: one dense and three MoE
// layers, two micro-batches, TP 1 and EP 1 (no collectives).
TEST(RecomputeTime, EachModuleCostsItsForward) {
  const ModelConfig m = tiny(true);
  const PerfParams pp = perf_from_hardware(test::gpus("h100-sxm", 1), Precision::kBF16);
  const Precision bf16 = Precision::kBF16;
  auto gemm = [&](double M_, double N, double K) { return gemm_seconds(pp, M_, N, K, bf16); };
  const double T = 32, bw = pp.memory_bandwidth, mb = 2;
  auto recompute = [&](RecomputeModules r) {
    return estimate_step_time(m, selective(m, r), pp).recompute;
  };
  auto near = [](double got, double want) { EXPECT_NEAR(got / want, 1.0, 1e-12); };
  // core_attn (the default): the fused attention forward of every layer.
  near(recompute(RecomputeModules{}),
       mb * 4 * fused_attention_seconds(pp.attention_flops, T, T, (96 + 64) / 2.0, T).first);
  // layernorm: two norms' read and write of [32, 64] per layer.
  near(recompute(modules({M::kLayernorm})), mb * 4 * (4 * 2 * T * 64) / bw);
  // mla_up_proj: q_up [32 x 96, K 32], kv_up [32 x 128, K 16], RoPE and the K/V expansion.
  const double rope = 2 * 2 * T * (4 * 8 + 8) + 2 * 2 * T * (96 + 64);
  near(recompute(modules({M::kMlaUpProj})),
       mb * 4 * (gemm(T, 96, 32) + gemm(T, 128, 16) + rope / bw));
  // mlp: the dense layer's fc1 [32 x 256, K 64], fc2 [32 x 64, K 128] and SwiGLU (3 passes).
  const double mlp = gemm(T, 256, 64) + gemm(T, 64, 128) + 3 * 2 * T * 128 / bw;
  near(recompute(modules({M::kMlp})), mb * 1 * mlp);
  // moe_act: the routed experts' SwiGLU over 64 tokens of 32.
  const double act = 3 * 2 * 64 * 32 / bw;
  near(recompute(modules({M::kMoeAct})), mb * 3 * act);
  // shared_experts: fc1 [32 x 64, K 64], fc2 [32 x 64, K 32], SwiGLU.
  const double shared = gemm(T, 64, 64) + gemm(T, 64, 32) + 3 * 2 * T * 32 / bw;
  near(recompute(modules({M::kSharedExperts})), mb * 3 * shared);
  // moe: router [32 x 8], 8 experts of 8 tokens (fc1 [8 x 64, K 64], fc2 [8 x 64, K 32]), the
  // activation and (un)permutation (4 x 2 x 64 x 64 bytes), the shared expert.
  const double moe = gemm(T, 8, 64) + 8 * (gemm(8, 64, 64) + gemm(8, 64, 32)) + act +
                     4 * 2 * 64 * 64 / bw + shared;
  near(recompute(modules({M::kMoe})), mb * 3 * moe);
  // A set costs the sum of its modules (nested checkpoints run the inner part again).
  RecomputeModules all{0};
  double sum = 0;
  for (const auto& [name, x] : recompute_module_names()) {
    all.add(x);
    sum += recompute(modules({x}));
  }
  near(recompute(all), sum);
  // The recomputed forward is charged to the backward pass: the step grows by it.
  Layout none = selective(m, {});
  none.recompute = RecomputeGranularity::kNone;
  near(estimate_step_time(m, selective(m, all), pp).total - estimate_step_time(m, none, pp).total,
       recompute(all));
}

// With TP and EP the MLP modules carry their collectives: moe its dispatch and combine
// all-to-alls, mlp and shared_experts their TP all-gather and reduce-scatter.
TEST(RecomputeTime, CollectivesAreRecomputedWithTheirBlocks) {
  const ModelConfig m = tiny(true);
  const Cluster c = test::gpus("h100-sxm", 8);
  const PerfParams pp = perf_from_hardware(c, Precision::kBF16);
  Layout l = test::layout(m, {.world = 8, .tp = 2, .ep = 4, .etp = 1, .mbs = 1, .gbs = 4});
  l.tp_comm_overlap = false;
  l.recompute = RecomputeGranularity::kSelective;
  auto recompute = [&](RecomputeModules r) {
    l.recompute_modules = r;
    return estimate_step_time(m, l, pp).recompute;
  };
  const double ep_f =
      2 * collective_seconds(Collective::kAllToAll, 2 * 16 * 2 * 64, 4, pp.link_for_group(4, 1));
  const double tp_f =
      2 * collective_seconds(Collective::kAllGather, 2 * 32 * 64, 2, pp.link_for_group(2, 1));
  const double moe = recompute(modules({M::kMoe})),
               shared = recompute(modules({M::kSharedExperts}));
  const double M_ = double(l.parallel.num_microbatches());
  EXPECT_GT(moe, shared);
  EXPECT_GT(shared, M_ * 3 * tp_f);
  EXPECT_GT(moe - shared, M_ * 3 * ep_f);
  EXPECT_GT(recompute(modules({M::kMlp})), M_ * 1 * tp_f);
}

TEST(RecomputeLayout, NameAndJsonCarryTheModules) {
  const ModelConfig m = tiny(true);
  Layout l = selective(m, RecomputeModules{});
  EXPECT_EQ(layout_name(l), "TP1 PP1 CP1 DP1 mbs1 recompute-selective");
  l.recompute_modules = modules({M::kMlp, M::kMlaUpProj});
  EXPECT_EQ(layout_name(l), "TP1 PP1 CP1 DP1 mbs1 recompute-selective(mla_up_proj mlp)");
  l.recompute_modules = RecomputeModules{0};
  EXPECT_EQ(recompute_label(l), "selective(none)");
  SearchOptions o;
  o.global_batch_size = 2;
  o.recompute = RecomputeGranularity::kSelective;
  o.recompute_modules = modules({M::kMlaUpProj, M::kLayernorm});
  const Cluster c = test::gpus("h100-sxm", 1);
  const SearchResult r = test::plan(m, c, o);
  ASSERT_FALSE(r.plans.empty());
  for (const Candidate& cand : r.plans)
    EXPECT_EQ(cand.layout.recompute_modules.bits, o.recompute_modules.bits);
  const nlohmann::json j = plans_json(m, c, o, r);
  EXPECT_EQ(j["plans"][0]["layout"]["recompute_modules"],
            nlohmann::json::array({"layernorm", "mla_up_proj"}));
  EXPECT_NE(format_plans(m, c, o, r).find("selective(layernorm mla_up_proj) recompute"),
            std::string::npos);
}

// The search tries selective mla_up_proj for multi-latent attention, and only there.
TEST(RecomputeSearch, MlaModelsTryTheUpProjections) {
  const Cluster c = test::gpus("h100-sxm", 1024);
  SearchOptions o;
  o.global_batch_size = 8192;
  o.precision = Precision::kFP8;
  o.cp = 1;
  o.top = 10;
  auto tries_up_proj = [&](const ModelConfig& m) {
    const SearchResult r = test::plan(m, c, o);
    return std::any_of(r.plans.begin(), r.plans.end(), [](const Candidate& x) {
      return x.layout.recompute == RecomputeGranularity::kSelective &&
             x.layout.recompute_modules.bits == uint32_t(M::kMlaUpProj);
    });
  };
  EXPECT_TRUE(tries_up_proj(test::model("deepseek-v3")));
  o.global_batch_size = 1024;
  EXPECT_FALSE(tries_up_proj(test::model("mixtral-8x7b")));
}

TEST(RecomputeEmit, ScriptsCarryTheModules) {
  const ModelConfig m = tiny(true);
  const Cluster c = test::gpus("h100-sxm", 1);
  auto args = [&](RecomputeModules r) { return train_args(m, selective(m, r), c, {}); };
  auto count = [](const std::vector<std::string>& a, const std::string& w) {
    return std::count(a.begin(), a.end(), w);
  };
  // Megatron's default: no --recompute-modules.
  std::vector<std::string> a = args(RecomputeModules{});
  EXPECT_EQ(count(a, "--recompute-granularity"), 1);
  EXPECT_EQ(count(a, "--recompute-modules"), 0);
  a = args(modules({M::kMlp, M::kMlaUpProj}));
  auto it = std::find(a.begin(), a.end(), "--recompute-modules");
  ASSERT_NE(it, a.end());
  ASSERT_LT(it + 3, a.end());
  EXPECT_EQ(*(it + 1), "mla_up_proj");
  EXPECT_EQ(*(it + 2), "mlp");
  EXPECT_EQ((it + 3)->rfind("--", 0), 0u);
  EXPECT_EQ(count(a, "--moe-grouped-gemm"), 0);
  // moe_act: Megatron requires grouped GEMMs.
  EXPECT_EQ(count(args(modules({M::kMoeAct})), "--moe-grouped-gemm"), 1);
  // The script keeps a flag's values on its line.
  const std::string s = emit_script(Launcher::kMpirun, c, selective(m, RecomputeModules{}),
                                    args(modules({M::kMlp, M::kMlaUpProj})), {});
  EXPECT_NE(s.find("\n  --recompute-modules mla_up_proj mlp\n"), std::string::npos);
}

}  // namespace
}  // namespace mtron::plan
