// Model-level properties that need no external oracle: recompute changes no bit of any
// gradient; bf16 tracks fp32; training on structured mock data learns.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "mtron/comm/single.h"
#include "mtron/train/trainer.h"
#include "train_flags.h"

namespace mtron {
namespace {

train::TrainArgs make_args(const std::vector<std::string>& flags) {
  train::TrainArgs a;
  tests::parse_train_flags(
      "--num-layers 3 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
      "--micro-batch-size 2 --global-batch-size 4 --train-iters 40 --lr 3e-3 --mock-data "
      "--vocab-size 300 --metrics-file /dev/null --hidden-dropout 0 --attention-dropout 0",
      flags, 1, a);
  return a;
}

// Llama's architecture flags (SwiGLU, RMSNorm, RoPE, no biases) with GQA of this many groups.
std::vector<std::string> llama_flags(int query_groups) {
  return tests::words(
      "--swiglu --normalization RMSNorm --position-embedding-type rope --group-query-attention "
      "--disable-bias-linear --num-query-groups " +
      std::to_string(query_groups));
}

// One iteration's gradients (no optimizer step), flattened (the routed experts' after the
// rest), and the bytes the forward stashed for the backward.
struct Iteration {
  std::vector<float> grads;
  size_t stash_bytes = 0;
};
Iteration iteration_of(const train::TrainArgs& a) {
  auto world = make_single_comm();
  train::Trainer t(a, *world);
  auto& chunk = *t.chunks().front();
  chunk.params().zero_grad();
  if (!chunk.expert_params().specs().empty()) chunk.expert_params().zero_grad();
  model::GPTChunk::Stash st;
  Iteration it;
  for (int64_t j = 0; j < a.parallel.num_microbatches(); ++j) {
    model::MicroBatch mb = t.microbatch(j);
    chunk.forward(t.run_ctx(), mb, st, nullptr, true);
    it.stash_bytes = st.keep.used();
    chunk.backward(t.run_ctx(), mb, st, nullptr);
  }
  for (const model::ParamBuffer* p : {&chunk.params(), &chunk.expert_params()}) {
    if (p->specs().empty()) continue;
    const Tensor& g = p->grad_flat();
    it.grads.insert(it.grads.end(), g.f32(), g.f32() + g.numel());
  }
  return it;
}
std::vector<float> grads_of(const train::TrainArgs& a) {
  return iteration_of(a).grads;
}

class Recompute : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(Recompute, GradientsAreBitIdentical) {
  for (const char* arch : {"gpt", "llama"}) {
    std::vector<std::string> shape;
    if (std::string(arch) == "llama") shape = llama_flags(2);
    std::vector<float> plain = grads_of(make_args(shape));
    std::vector<std::string> flags = shape;
    for (const auto& f : GetParam()) flags.push_back(f);
    std::vector<float> rec = grads_of(make_args(flags));
    ASSERT_EQ(plain.size(), rec.size());
    EXPECT_EQ(std::memcmp(plain.data(), rec.data(), plain.size() * sizeof(float)), 0) << arch;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Methods,
    Recompute,
    ::testing::Values(
        std::vector<std::string>{"--recompute-granularity", "full", "--recompute-method", "uniform",
                                 "--recompute-num-layers", "1"},
        std::vector<std::string>{"--recompute-granularity", "full", "--recompute-method", "uniform",
                                 "--recompute-num-layers", "2"},
        std::vector<std::string>{"--recompute-granularity", "full", "--recompute-method", "block",
                                 "--recompute-num-layers", "2"}));

// With dropout, recompute regenerates the forward's masks: again no bit changes; and the
// gradients are not those without dropout.
TEST(Recompute, WithDropoutGradientsAreBitIdentical) {
  const std::vector<std::string> drop = {"--hidden-dropout", "0.1", "--attention-dropout", "0.1"};
  std::vector<std::string> rec = drop;
  for (const char* f : {"--recompute-granularity", "full", "--recompute-method", "uniform",
                        "--recompute-num-layers", "1"})
    rec.push_back(f);
  const std::vector<float> plain = grads_of(make_args(drop));
  const std::vector<float> recomputed = grads_of(make_args(rec));
  ASSERT_EQ(plain.size(), recomputed.size());
  EXPECT_EQ(std::memcmp(plain.data(), recomputed.data(), plain.size() * sizeof(float)), 0);
  EXPECT_NE(plain, grads_of(make_args({})));
}

// Selective recompute (--recompute-modules): for each architecture and set of modules, the
// gradients (the routed experts' too) are bit for bit those without recompute, and the forward
// stashes fewer bytes wherever a module drops something (core_attn drops nothing: attention
// stashes only what its backward reads).
struct SelectiveCase {
  std::string arch, modules;
  bool smaller;  // whether the stash must shrink
};
void PrintTo(const SelectiveCase& c, std::ostream* os) {
  *os << c.arch << " [" << c.modules << "]";
}

std::vector<std::string> arch_flags(const std::string& arch) {
  const std::string mla =
      "--multi-latent-attention --q-lora-rank 24 --kv-lora-rank 16 --qk-head-dim 12 "
      "--qk-pos-emb-head-dim 8 --v-head-dim 10 --qk-layernorm --swiglu --normalization RMSNorm "
      "--position-embedding-type rope --disable-bias-linear";
  const std::string moe =
      " --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 48 --moe-layer-freq [0,1,1] "
      "--moe-shared-expert-intermediate-size 32 --moe-aux-loss-coeff 1e-2 --moe-z-loss-coeff 1e-3";
  if (arch == "gpt") return {};
  if (arch == "gpt_bf16") return {"--bf16"};
  if (arch == "llama") return llama_flags(2);
  if (arch == "llama_bf16") {
    std::vector<std::string> f = llama_flags(2);
    f.push_back("--bf16");
    return f;
  }
  if (arch == "mla") return tests::words(mla);
  if (arch == "mla_no_q_lora") return tests::words(mla + " --q-lora-rank 0");
  if (arch == "dsv3") return tests::words(mla + moe);
  if (arch == "dsv3_bf16") return tests::words(mla + moe + " --bf16");
  if (arch == "moe_gelu") return tests::words("--disable-bias-linear" + moe);
  ADD_FAILURE() << "no architecture " << arch;
  return {};
}

class SelectiveRecompute : public ::testing::TestWithParam<SelectiveCase> {};

TEST_P(SelectiveRecompute, GradientsAreBitIdenticalAndTheStashShrinks) {
  const SelectiveCase& c = GetParam();
  const std::vector<std::string> shape = arch_flags(c.arch);
  const Iteration plain = iteration_of(make_args(shape));
  std::vector<std::string> flags = shape;
  flags.push_back("--recompute-granularity");
  flags.push_back("selective");
  if (!c.modules.empty()) {
    flags.push_back("--recompute-modules");
    for (const std::string& m : tests::words(c.modules)) flags.push_back(m);
  }
  const Iteration rec = iteration_of(make_args(flags));
  ASSERT_EQ(plain.grads.size(), rec.grads.size());
  EXPECT_EQ(std::memcmp(plain.grads.data(), rec.grads.data(), plain.grads.size() * sizeof(float)),
            0);
  if (c.smaller) {
    EXPECT_LT(rec.stash_bytes, plain.stash_bytes);
  } else {
    EXPECT_EQ(rec.stash_bytes, plain.stash_bytes);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modules,
    SelectiveRecompute,
    ::testing::Values(SelectiveCase{"gpt", "", false},  // Megatron's default: core_attn
                      SelectiveCase{"llama", "core_attn", false},
                      SelectiveCase{"gpt", "layernorm", true},
                      SelectiveCase{"gpt", "mlp", true},
                      SelectiveCase{"gpt_bf16", "layernorm mlp", true},
                      SelectiveCase{"llama", "layernorm mlp", true},
                      SelectiveCase{"llama_bf16", "layernorm mlp", true},
                      SelectiveCase{"mla", "mla_up_proj", true},
                      SelectiveCase{"mla_no_q_lora", "mla_up_proj layernorm", true},
                      SelectiveCase{"dsv3", "moe_act", true},
                      SelectiveCase{"dsv3", "shared_experts", true},
                      SelectiveCase{"dsv3", "moe", true},
                      SelectiveCase{"dsv3", "layernorm moe", true},
                      SelectiveCase{"dsv3", "layernorm mla_up_proj mlp moe_act", true},
                      SelectiveCase{"dsv3_bf16", "layernorm mla_up_proj mlp moe_act", true},
                      SelectiveCase{"moe_gelu", "moe_act shared_experts", true}));

// Each module drops what it names, and only that: mlp leaves an MoE layer's shared expert alone
// (shared_experts or moe take it), so on a model whose only dense MLP is a shared expert it
// stashes what no recompute stashes.
TEST(SelectiveRecompute, MlpLeavesSharedExpertsToTheirModules) {
  std::vector<std::string> shape = arch_flags("moe_gelu");
  for (std::string& f : shape)
    if (f == "[0,1,1]") f = "[1,1,1]";
  const size_t plain = iteration_of(make_args(shape)).stash_bytes;
  auto with = [&](const char* module) {
    std::vector<std::string> f = shape;
    for (const char* w : {"--recompute-granularity", "selective", "--recompute-modules", module})
      f.push_back(w);
    return iteration_of(make_args(f)).stash_bytes;
  };
  EXPECT_EQ(with("mlp"), plain);
  EXPECT_LT(with("shared_experts"), plain);
  EXPECT_LT(with("moe"), with("shared_experts"));
}

// The MTP depths' transformer layers rebuild the modules too (Megatron builds them from the
// decoder's config): with two depths the stash drops more than without, and the gradients stay
// bit-identical.
TEST(SelectiveRecompute, MtpDepthsRebuildTheirLayersToo) {
  auto dropped = [](std::vector<std::string> shape) {
    const Iteration plain = iteration_of(make_args(shape));
    for (const char* w :
         {"--recompute-granularity", "selective", "--recompute-modules", "layernorm", "mlp"})
      shape.push_back(w);
    const Iteration rec = iteration_of(make_args(shape));
    EXPECT_EQ(plain.grads, rec.grads);
    return plain.stash_bytes - rec.stash_bytes;
  };
  std::vector<std::string> mtp = llama_flags(2);
  const size_t without = dropped(mtp);
  mtp.push_back("--mtp-num-layers");
  mtp.push_back("2");
  EXPECT_GT(dropped(mtp), without);
}

// --apply-layernorm-1p: norm weights w are applied as 1 + w. A 1p model whose norm weights are w
// computes what the standard model with norm weights 1 + w computes (every other weight equal):
// the same loss and the same gradient for every parameter.
TEST(LayerNorm1p, AppliesOnePlusTheWeight) {
  for (const char* norm : {"LayerNorm", "RMSNorm"}) {
    auto world = make_single_comm();
    train::Trainer plain(make_args({"--normalization", norm}), *world);
    train::Trainer zc(make_args({"--normalization", norm, "--apply-layernorm-1p"}), *world);
    model::ParamBuffer& p = plain.chunks().front()->params();
    model::ParamBuffer& q = zc.chunks().front()->params();
    ASSERT_EQ(p.size(), q.size());
    int norms = 0;
    for (size_t i = 0; i < p.specs().size(); ++i) {
      const model::ParamSpec& s = p.spec(int(i));
      if (!s.name.ends_with("layernorm.weight")) continue;
      ++norms;
      for (int64_t e = 0; e < s.numel(); ++e) {
        ASSERT_EQ(q.master(int(i))[e], 0.0f) << s.name;  // zero-centred at initialisation
        const float w = 0.05f * float((e * 7 + int64_t(i)) % 9) - 0.2f;
        q.master(int(i))[e] = w;
        p.master(int(i))[e] = 1.0f + w;
      }
    }
    EXPECT_EQ(norms, 2 * 3 + 1);  // two per layer and the final norm
    double loss[2];
    std::vector<float> grads[2];
    train::Trainer* t[2] = {&plain, &zc};
    for (int k = 0; k < 2; ++k) {
      model::GPTChunk& chunk = *t[k]->chunks().front();
      chunk.params().zero_grad();
      model::GPTChunk::Stash st;
      const model::MicroBatch mb = t[k]->microbatch(0);
      chunk.forward(t[k]->run_ctx(), mb, st, nullptr, true);
      loss[k] = st.loss_sum;
      chunk.backward(t[k]->run_ctx(), mb, st, nullptr);
      const Tensor& g = chunk.params().grad_flat();
      grads[k].assign(g.f32(), g.f32() + g.numel());
    }
    EXPECT_NEAR(loss[1], loss[0], 1e-5 * std::abs(loss[0])) << norm;
    double worst = 0;
    for (size_t e = 0; e < grads[0].size(); ++e) {
      worst = std::max(
          worst, double(std::abs(grads[1][e] - grads[0][e])) / (std::abs(grads[0][e]) + 1e-6));
    }
    EXPECT_LT(worst, 1e-3) << norm;
    // And without the shift the two models differ: the test sees the flag.
    for (size_t i = 0; i < p.specs().size(); ++i) {
      if (p.spec(int(i)).name.ends_with("layernorm.weight")) q.master(int(i))[0] += 1.0f;
    }
    model::GPTChunk::Stash st;
    zc.chunks().front()->forward(zc.run_ctx(), zc.microbatch(0), st, nullptr, false);
    EXPECT_GT(std::abs(st.loss_sum - loss[0]), 1e-4 * std::abs(loss[0])) << norm;
  }
}

// --decoupled-lr: the word embeddings and the output layer (Megatron's
// is_embedding_or_output_parameter) step with their own learning rate; here the others have 0.
TEST(DecoupledLr, OnlyEmbeddingAndOutputLayerMove) {
  for (bool untied : {false, true}) {
    std::vector<std::string> flags = {"--lr",    "0", "--decoupled-lr", "1e-2", "--lr-decay-style",
                                      "constant"};
    if (untied) flags.push_back("--untie-embeddings-and-output-weights");
    auto world = make_single_comm();
    train::Trainer t(make_args(flags), *world);
    const model::ParamBuffer& p = t.chunks().front()->params();
    const std::vector<float> before(p.master_flat().f32(), p.master_flat().f32() + p.size());
    t.step();
    int moved = 0;
    for (const model::ParamSpec& s : p.specs()) {
      const bool decoupled =
          s.name == "embedding.word_embeddings.weight" || s.name == "output_layer.weight";
      int64_t changed = 0;
      for (int64_t e = s.offset; e < s.offset + s.numel(); ++e)
        changed += p.master_flat().f32()[e] != before[size_t(e)];
      if (decoupled) {
        EXPECT_GT(changed, 0) << s.name;
        ++moved;
      } else {
        EXPECT_EQ(changed, 0) << s.name;
      }
    }
    EXPECT_EQ(moved, untied ? 2 : 1);
  }
}

TEST(BF16, FirstLossWithin1e2OfFp32) {
  auto world = make_single_comm();
  train::Trainer f32(make_args({}), *world);
  train::Trainer b16(make_args({"--bf16"}), *world);
  const double l32 = f32.step().lm_loss, l16 = b16.step().lm_loss;
  EXPECT_NEAR(l16, l32, 1e-2) << "fp32 " << l32 << " bf16 " << l16;
}

TEST(BF16, LossFallsOnStructuredMockData) {
  auto world = make_single_comm();
  train::Trainer t(make_args({"--bf16"}), *world);
  const double first = t.step().lm_loss;
  double last = first;
  for (int i = 1; i < 40; ++i) last = t.step().lm_loss;
  EXPECT_NEAR(first, std::log(300.0), 0.3);  // starts near uniform
  EXPECT_LT(last, first - 1.5) << "first " << first << " last " << last;
}

}  // namespace
}  // namespace mtron

namespace mtron {
namespace {

// Megatron's initialisation test: the TP=4 shard of every weight equals the matching slice of
// the TP=1 weight (here for every parameter of a GPT-2 and a Llama GQA model).
TEST(TensorParallel, Tp4ShardsAreSlicesOfTp1) {
  for (const char* arch : {"gpt", "llama"}) {
    std::vector<std::string> shape = {"--num-attention-heads", "8"};
    if (std::string(arch) == "llama") {
      const std::vector<std::string> llama = llama_flags(4);
      shape.insert(shape.end(), llama.begin(), llama.end());
      shape.push_back("--untie-embeddings-and-output-weights");
    }
    const train::TrainArgs a = make_args(shape);
    const model::ChunkPlacement all{0, a.model.num_layers, true, true};
    model::GPTChunk full(a.model, all, parallel::TensorParallel{}, {});
    full.params().allocate(Precision::kFP32, 1);
    full.params().init(a.seed);
    for (int64_t r = 0; r < 4; ++r) {
      model::GPTChunk part(a.model, all, parallel::TensorParallel{nullptr, r, 4, false}, {});
      part.params().allocate(Precision::kFP32, 1);
      part.params().init(a.seed);
      const auto& fs = full.params().specs();
      int checked = 0;
      for (size_t i = 0; i < part.params().specs().size(); ++i) {
        const model::ParamSpec& s = part.params().spec(int(i));
        size_t j = 0;
        while (j < fs.size() && fs[j].name != s.name) ++j;
        ASSERT_LT(j, fs.size()) << s.name;
        const model::ParamSpec& f = fs[j];
        // Row-major walk over the local shard, mapped to the TP=1 tensor. The vocabulary is
        // padded further at TP=4; rows beyond TP=1's table are padding and skipped.
        const Shape& L = s.local_shape;
        const Shape& G = f.local_shape;
        std::vector<int64_t> idx(L.size(), 0);
        const float* lw = part.params().master(int(i));
        const float* gw = full.params().master(int(j));
        for (int64_t e = 0; e < s.numel(); ++e) {
          int64_t g = 0;
          bool inside = true;
          for (size_t d = 0; d < L.size(); ++d) {
            const int64_t gi = idx[d] + (int(d) == s.shard_dim ? s.shard_offset : 0);
            inside = inside && gi < G[d];
            g = g * G[d] + gi;
          }
          if (inside) {
            ASSERT_EQ(lw[e], gw[g]) << arch << " " << s.name << " rank " << r << " element " << e;
          }
          for (int64_t d = int64_t(L.size()) - 1; d >= 0 && ++idx[size_t(d)] == L[size_t(d)]; --d) {
            idx[size_t(d)] = 0;
          }
        }
        ++checked;
      }
      EXPECT_EQ(checked, int(fs.size()));
    }
  }
}

}  // namespace
}  // namespace mtron
