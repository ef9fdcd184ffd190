// Inference with a KV cache against the training forward, and sampling against an independent
// computation of the distribution it must draw from.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "mtron/model/gpt.h"
#include "mtron/model/inference.h"
#include "mtron/train/generate.h"
#include "test_helpers.h"

namespace mtron {
namespace {

// gpt2; llama; moe: llama with 8 experts, top-2 softmax routing, aux loss (Mixtral-like);
// moe_mixed: MoE every 2nd layer (the others dense), sigmoid top-3 routing, a shared expert;
// mla: llama's norms and MLP with multi-latent attention (value head dim 6 != 8 + 4);
// mla_q_proj: the query through linear_q_proj (no q latent), the kv latent normed (--qk-layernorm).
ModelConfig arch(const std::string& name) {
  const bool llama = name != "gpt2";
  ModelConfig m = tests::model_shape(3, 64, 8, 33, 131);  // vocabulary padded to 256
  const bool mla = name.rfind("mla", 0) == 0;
  if (llama && !mla) {
    m.group_query_attention = true;
    m.num_query_groups = 2;
  }
  if (llama) {
    tests::set_llama_architecture(m);
    m.untie_embeddings_and_output_weights = true;
  }
  if (mla) {
    m.mla.enabled = true;
    m.mla.q_lora_rank = name == "mla" ? 16 : 0;
    m.qk_layernorm = name == "mla_q_proj";
    m.mla.kv_lora_rank = 12;
    m.mla.qk_head_dim = 8;
    m.mla.qk_pos_emb_head_dim = 4;
    m.mla.v_head_dim = 6;
  }
  if (name == "moe" || name == "moe_mixed") {
    m.num_experts = 8;
    m.moe_ffn_hidden_size = 48;
    m.moe_aux_loss_coeff = 1e-2f;
  }
  if (name == "moe_mixed") {
    m.moe_layer_freq = 2;
    m.moe_router_topk = 3;
    m.moe_router_score_function = RouterScore::kSigmoid;
    m.moe_shared_expert_intermediate_size = 32;
  }
  m.finalize();
  return m;
}

// The training forward's logits [S, Vp] of one sequence.
std::vector<float> training_logits(model::GPTChunk& c,
                                   const std::vector<int32_t>& ids,
                                   int64_t Vp) {
  const int64_t S = int64_t(ids.size());
  model::MicroBatch mb;
  mb.B = 1;
  mb.S = S;
  mb.tokens = ids;
  mb.labels = ids;
  for (int64_t s = 0; s < S; ++s) mb.pos.push_back(int32_t(s));
  model::GPTChunk::Stash st;
  std::vector<float> logits(static_cast<size_t>(S * Vp));
  st.logits_out = logits.data();
  c.forward(model::RunCtx{}, mb, st, nullptr, false);
  return logits;
}

double rel_diff(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    num = std::max(num, std::fabs(double(a[i]) - double(b[i])));
    den = std::max(den, std::fabs(double(b[i])));
  }
  return num / den;
}

class KvCache : public ::testing::TestWithParam<std::string> {};

TEST_P(KvCache, MatchesTrainingForwardAtEveryPosition) {
  const ModelConfig cfg = arch(GetParam());
  model::GPTChunk c(cfg, {0, cfg.num_layers, true, true}, parallel::TensorParallel{}, {});
  c.params().allocate(Precision::kFP32, 1);
  c.params().init(99);
  ASSERT_EQ(cfg.is_moe(), !c.expert_params().specs().empty());
  if (cfg.is_moe()) {
    c.expert_params().allocate(Precision::kFP32, 1);
    c.expert_params().init(99);
  }
  std::mt19937 rng(5);
  std::vector<int32_t> ids(33);
  for (auto& t : ids) t = int32_t(rng() % 131);
  const int64_t S = 33, Vp = cfg.padded_vocab_size(1);
  const std::vector<float> ref = training_logits(c, ids, Vp);

  model::InferenceModel m(cfg, c, S);
  ASSERT_EQ(m.padded_vocab(), Vp);
  // Floats per position and layer: multi-latent attention's latent and RoPE key, else K and V.
  const int64_t per_position =
      cfg.mla.enabled ? cfg.mla.latent_width() : cfg.query_groups() * (cfg.qk_dim() + cfg.v_dim());
  const int64_t cache_bytes = cfg.num_layers * S * per_position * 4;
  EXPECT_GE(m.cache_bytes(), cache_bytes);
  EXPECT_LE(m.cache_bytes(), cache_bytes + 2 * cfg.num_layers * 256);  // allocation alignment
  // Prefill of everything at once, all rows.
  std::vector<float> all(static_cast<size_t>(S * Vp));
  m.forward(ids.data(), S, all.data(), true);
  EXPECT_LE(rel_diff(all.data(), ref.data(), S * Vp), 1e-5);
  // Prefill of 1, 31 or 32 tokens, then one token per call: each last row.
  for (int64_t pre : {1, 31, 32}) {
    m.reset();
    std::vector<float> last(static_cast<size_t>(Vp));
    m.forward(ids.data(), pre, last.data(), false);
    EXPECT_LE(rel_diff(last.data(), ref.data() + (pre - 1) * Vp, Vp), 1e-5) << pre;
    for (int64_t s = pre; s < S; ++s) {
      m.forward(&ids[size_t(s)], 1, last.data(), false);
      ASSERT_LE(rel_diff(last.data(), ref.data() + s * Vp, Vp), 1e-5) << "position " << s;
    }
    EXPECT_EQ(m.length(), S);
  }
  EXPECT_THROW(m.forward(ids.data(), 1, all.data(), false), Error);  // cache full
}

INSTANTIATE_TEST_SUITE_P(
    Archs,
    KvCache,
    ::testing::Values("gpt2", "llama", "moe", "moe_mixed", "mla", "mla_q_proj"),
    [](const auto& i) { return i.param; });

// The probabilities sample_token must draw from, computed independently (double, full sort).
std::vector<double> expected(const std::vector<float>& z, const train::SamplingOptions& o) {
  const size_t V = z.size();
  std::vector<size_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return z[a] > z[b]; });
  std::vector<double> p(V, 0.0);
  const size_t k = o.top_k > 0 ? std::min<size_t>(size_t(o.top_k), V) : V;
  double sum = 0;
  for (size_t i = 0; i < k; ++i) sum += std::exp(double(z[order[i]]) / o.temperature);
  size_t keep = k;
  if (o.top_p > 0) {
    double c = 0;
    for (keep = 0; keep < k;) {
      c += std::exp(double(z[order[keep++]]) / o.temperature) / sum;
      if (c >= o.top_p) break;
    }
  }
  double s2 = 0;
  for (size_t i = 0; i < keep; ++i) s2 += std::exp(double(z[order[i]]) / o.temperature);
  for (size_t i = 0; i < keep; ++i)
    p[order[i]] = std::exp(double(z[order[i]]) / o.temperature) / s2;
  return p;
}

TEST(Sampling, DrawsFromTheFilteredDistribution) {
  std::mt19937 rng(11);
  std::normal_distribution<float> n(0, 2);
  for (int64_t V : {1, 7, 31, 33}) {
    std::vector<float> z(static_cast<size_t>(V));
    for (auto& x : z) x = n(rng);
    for (const train::SamplingOptions o :
         {train::SamplingOptions{1.0f, 0, 0.0f}, train::SamplingOptions{0.7f, 5, 0.0f},
          train::SamplingOptions{1.3f, 0, 0.8f}, train::SamplingOptions{1.0f, 10, 0.5f}}) {
      // The share of a fine grid of u that picks each token is its probability.
      const int grid = 100000;
      std::vector<double> got(size_t(V), 0.0);
      for (int i = 0; i < grid; ++i) {
        got[size_t(train::sample_token(z.data(), V, o, (i + 0.5) / grid))] += 1.0 / grid;
      }
      const std::vector<double> want = expected(z, o);
      for (int64_t t = 0; t < V; ++t) {
        ASSERT_NEAR(got[size_t(t)], want[size_t(t)], 2.0 / grid)
            << "V " << V << " token " << t << " T " << o.temperature << " k " << o.top_k << " p "
            << o.top_p;
      }
    }
  }
}

TEST(Sampling, GreedyIsArgmax) {
  const std::vector<float> z = {0.1f, 3.0f, -1.0f, 3.0f, 2.9f};
  for (double u : {0.0, 0.5, 0.999}) {
    EXPECT_EQ(train::sample_token(z.data(), 5, {0.0f, 0, 0.0f}, u), 1);
    EXPECT_EQ(train::sample_token(z.data(), 5, {1.0f, 1, 0.0f}, u), 1);
  }
}

TEST(Generate, SeededAndStopsAtEod) {
  const ModelConfig cfg = arch("llama");
  model::GPTChunk c(cfg, {0, cfg.num_layers, true, true}, parallel::TensorParallel{}, {});
  c.params().allocate(Precision::kFP32, 1);
  c.params().init(3);
  model::InferenceModel m(cfg, c, 32);
  const std::vector<int32_t> prompt = {1, 2, 3};
  const train::SamplingOptions o{1.0f, 0, 0.0f};
  const auto a = train::generate(m, prompt, 131, 20, o, 7, std::nullopt);
  const auto b = train::generate(m, prompt, 131, 20, o, 7, std::nullopt);
  const auto d = train::generate(m, prompt, 131, 20, o, 8, std::nullopt);
  EXPECT_EQ(a.size(), 20u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, d);
  for (int32_t t : a) EXPECT_LT(t, 131);  // never a padding id
  const auto s = train::generate(m, prompt, 131, 20, o, 7, a[4]);
  EXPECT_EQ(std::vector<int32_t>(s.begin(), s.end()),
            std::vector<int32_t>(a.begin(), a.begin() + 5));
  // Greedy generation: each token is the argmax of the training forward on the sequence so far.
  std::vector<int32_t> seq = prompt;
  const auto g = train::generate(m, prompt, 131, 8, {0.0f, 0, 0.0f}, 1, std::nullopt);
  for (int32_t t : g) {
    const std::vector<float> lg = training_logits(c, seq, cfg.padded_vocab_size(1));
    const float* last = lg.data() + (seq.size() - 1) * size_t(cfg.padded_vocab_size(1));
    EXPECT_EQ(t, int32_t(std::max_element(last, last + 131) - last));
    seq.push_back(t);
  }
}

}  // namespace
}  // namespace mtron
