// Dumps everything the PyTorch reference (torch_reference.py) needs to check the model tensor
// by tensor: the configuration, the initial weights, the micro-batches of 10 iterations, the
// logits of micro-batch 0, the loss and every parameter gradient of iteration 1, and the loss
// and learning rate of 10 training iterations. With --mtp-num-layers, the mean loss of each MTP
// depth too (iteration 1 and the 10 training iterations).
//
//   ref_dump <gpt2|llama|mla|mla_q|qwen3moe|dsmoe|dsv3> <out.bin> [extra mtron train flags...]
//
// qwen3moe: a tiny Qwen3-MoE (--qk-layernorm, 8 experts top-2, no shared expert, aux loss);
// dsmoe: a tiny DeepSeek-V3-style MoE (a dense first layer by a --moe-layer-freq list, sigmoid
// scores with the expert bias, group-limited routing, a top-k scaling factor, a shared expert,
// seq_aux_loss); dsv3: dsmoe's MoE with mla's attention and one MTP depth (an MoE layer, the
// last layer's kind): a tiny DeepSeek-V3-shaped model. MoE dumps add every MoE layer's expert
// bias (the MTP depths' too) after the 10 iterations.
//
// mla: a Llama-style model with multi-latent attention, q projected directly; mla_q: with
// --q-lora-rank and --qk-layernorm (q_down, q_layernorm, q_up; kv_layernorm).
//
// Record format (little-endian): u32 name length, name, u8 dtype (0 f32, 1 i32, 2 f64, 3 u8),
// u32 ndim, i64 dims[ndim], data.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "mtron/comm/single.h"
#include "mtron/core/error.h"
#include "mtron/train/trainer.h"
#include "test_helpers.h"

using namespace mtron;

namespace {

FILE* g_out = nullptr;

void record(const std::string& name,
            int dtype,
            const std::vector<int64_t>& dims,
            const void* data,
            size_t elem) {
  uint32_t n = uint32_t(name.size());
  std::fwrite(&n, 4, 1, g_out);
  std::fwrite(name.data(), 1, n, g_out);
  uint8_t t = uint8_t(dtype);
  std::fwrite(&t, 1, 1, g_out);
  uint32_t nd = uint32_t(dims.size());
  std::fwrite(&nd, 4, 1, g_out);
  size_t count = 1;
  for (int64_t d : dims) {
    std::fwrite(&d, 8, 1, g_out);
    count *= size_t(d);
  }
  std::fwrite(data, elem, count, g_out);
}

std::vector<std::string> base_flags(const std::string& arch) {
  std::vector<std::string> common = tests::words(
      "--num-layers 2 --hidden-size 64 --seq-length 32 --max-position-embeddings 32 "
      "--micro-batch-size 2 --global-batch-size 4 --train-iters 10 --lr 2e-3 --min-lr 2e-4 "
      "--lr-decay-style cosine --lr-warmup-iters 2 --weight-decay 0.1 --clip-grad 1.0 "
      "--adam-beta2 0.95 --mock-data --vocab-size 500 --seed 1234 --init-method-std 0.05 "
      "--log-interval 1000");
  std::vector<std::string> extra;
  if (arch == "gpt2") {
    extra = {"--num-attention-heads", "4"};
  } else if (arch == "llama" || arch == "qwen3moe" || arch == "dsmoe") {
    extra = tests::words(
        "--num-attention-heads 8 --group-query-attention --num-query-groups 2 --swiglu "
        "--normalization RMSNorm --position-embedding-type rope "
        "--untie-embeddings-and-output-weights --disable-bias-linear");
  } else if (arch == "mla" || arch == "mla_q" || arch == "dsv3") {
    extra = tests::words(
        "--num-attention-heads 4 --multi-latent-attention --kv-lora-rank 16 --qk-head-dim 12 "
        "--qk-pos-emb-head-dim 8 --v-head-dim 10 --swiglu --normalization RMSNorm "
        "--position-embedding-type rope --untie-embeddings-and-output-weights "
        "--disable-bias-linear");
    if (arch == "mla_q") extra.insert(extra.end(), {"--q-lora-rank", "24", "--qk-layernorm"});
  } else {
    throw Error("unknown arch " + arch + " (gpt2, llama, mla, mla_q, qwen3moe, dsmoe or dsv3)");
  }
  if (arch == "qwen3moe") {
    const auto moe = tests::words(
        "--qk-layernorm --kv-channels 16 --norm-epsilon 1e-6 --num-experts 8 --moe-router-topk 2 "
        "--moe-ffn-hidden-size 32 --moe-layer-freq ([1]*2) --moe-aux-loss-coeff 1e-2");
    extra.insert(extra.end(), moe.begin(), moe.end());
  } else if (arch == "dsmoe" || arch == "dsv3") {
    const auto moe = tests::words(
        "--num-layers 4 --num-experts 16 --moe-router-topk 4 --moe-ffn-hidden-size 32 "
        "--moe-layer-freq ([0]*1+[1]*3) --moe-router-score-function sigmoid "
        "--moe-router-enable-expert-bias --moe-router-bias-update-rate 1e-2 "
        "--moe-router-num-groups 4 --moe-router-group-topk 2 --moe-router-topk-scaling-factor 2.5 "
        "--moe-shared-expert-intermediate-size 32 --moe-router-load-balancing-type seq_aux_loss "
        "--moe-aux-loss-coeff 1e-3");
    extra.insert(extra.end(), moe.begin(), moe.end());
    if (arch == "dsv3") extra.insert(extra.end(), {"--mtp-num-layers", "1"});
  }
  common.insert(common.end(), extra.begin(), extra.end());
  return common;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(
        stderr,
        "usage: ref_dump <gpt2|llama|mla|mla_q|qwen3moe|dsmoe|dsv3> <out.bin> [flags...]\n");
    return 2;
  }
  std::vector<std::string> flags = base_flags(argv[1]);
  for (int i = 3; i < argc; ++i) flags.push_back(argv[i]);
  // Extra flags with --data-path train on that data instead of the mock data.
  if (std::find(flags.begin(), flags.end(), "--data-path") != flags.end())
    flags.erase(std::find(flags.begin(), flags.end(), "--mock-data"));
  std::vector<char*> av = {const_cast<char*>("train")};
  for (auto& f : flags) av.push_back(f.data());

  auto world = make_single_comm();
  train::TrainArgs a;
  a.metrics_file = "/dev/null";
  train::parse_train_args(int(av.size()), av.data(), 1, a);
  a.metrics_file = "/dev/null";
  train::Trainer t(a, *world);
  g_out = std::fopen(argv[2], "wb");
  if (!g_out) return 2;
  std::fwrite("MTRONREF", 1, 8, g_out);

  std::string cfg;
  for (auto& f : flags) cfg += f + " ";
  record("config", 3, {int64_t(cfg.size())}, cfg.data(), 1);

  auto& chunk = *t.chunks().front();
  const auto& params = chunk.params();
  const auto& experts = chunk.expert_params();
  for (const model::ParamBuffer* b : {&params, &experts}) {
    for (size_t i = 0; i < b->specs().size(); ++i)
      record("param/" + b->spec(int(i)).name, 0, b->spec(int(i)).global_shape, b->master(int(i)),
             4);
  }

  // Iteration 1 by hand: logits of micro-batch 0, loss and gradients over the global batch.
  const int64_t M = a.parallel.num_microbatches();
  const int64_t N = a.parallel.micro_batch_size * a.model.seq_length;
  const int64_t V = a.model.padded_vocab_size(1);
  std::vector<float> logits(size_t(N * V));
  model::GPTChunk::Stash st;
  chunk.params().zero_grad();
  if (!experts.specs().empty()) chunk.expert_params().zero_grad();
  double loss_sum = 0;
  const int64_t D = a.model.mtp_num_layers;
  std::vector<double> mtp(size_t(D), 0.0);
  // The tokens whose loss counts, from the micro-batches' masks (--eod-mask-loss) or all
  // positions (with a target at each MTP depth).
  double counted = 0;
  std::vector<double> mtp_counted(size_t(D), 0.0);
  for (int64_t j = 0; j < M; ++j) {
    model::MicroBatch mb = t.microbatch(j);
    const auto count = [&](const std::vector<float>& mask, int64_t k, int64_t all) {
      if (mask.empty()) return double(all);
      return std::accumulate(mask.begin() + k * N, mask.begin() + (k + 1) * N, 0.0);
    };
    counted += count(mb.loss_mask, 0, N);
    for (int64_t k = 0; k < D; ++k)
      mtp_counted[size_t(k)] +=
          count(mb.mtp_loss_mask, k, a.parallel.micro_batch_size * (a.model.seq_length - k - 1));
    st.logits_out = j == 0 ? logits.data() : nullptr;
    chunk.forward(t.run_ctx(), mb, st, nullptr, true);
    loss_sum += st.loss_sum;
    for (int64_t k = 0; k < D; ++k) mtp[size_t(k)] += st.mtp_loss_sum[size_t(k)];
    chunk.backward(t.run_ctx(), mb, st, nullptr);
  }
  record("step0/logits", 0, {N, V}, logits.data(), 4);
  double loss = loss_sum / counted;
  record("step0/loss", 2, {1}, &loss, 8);
  for (int64_t k = 0; k < D; ++k) mtp[size_t(k)] /= mtp_counted[size_t(k)];
  if (D > 0) record("step0/mtp_losses", 2, {D}, mtp.data(), 8);
  for (const model::ParamBuffer* b : {&params, &experts}) {
    for (size_t i = 0; i < b->specs().size(); ++i)
      record("grad/" + b->spec(int(i)).name, 0, b->spec(int(i)).global_shape, b->grad(int(i)), 4);
  }
  // The hand-made iteration routed tokens too: the expert bias counts start from the training.
  for (model::MoELayer* l : chunk.moe_layers())
    std::fill(l->tokens_per_expert().begin(), l->tokens_per_expert().end(), 0.0);

  std::vector<double> losses, lrs, norms, mtp_losses;
  for (int64_t it = 0; it < a.train_iters; ++it) {
    for (int64_t j = 0; j < M; ++j) {
      model::MicroBatch mb = t.microbatch(j);
      const std::string p = "it" + std::to_string(it) + "/mb" + std::to_string(j);
      record("tokens/" + p, 1, {mb.S, mb.B}, mb.tokens.data(), 4);
      record("labels/" + p, 1, {mb.S, mb.B}, mb.labels.data(), 4);
    }
    train::StepResult r = t.step();
    losses.push_back(r.lm_loss);
    lrs.push_back(r.lr);
    norms.push_back(r.grad_norm);
    mtp_losses.insert(mtp_losses.end(), r.mtp_losses.begin(), r.mtp_losses.end());
  }
  record("losses", 2, {int64_t(losses.size())}, losses.data(), 8);
  record("lrs", 2, {int64_t(lrs.size())}, lrs.data(), 8);
  record("grad_norms", 2, {int64_t(norms.size())}, norms.data(), 8);
  if (D > 0) record("mtp_losses", 2, {a.train_iters, D}, mtp_losses.data(), 8);
  for (model::MoELayer* l : chunk.moe_layers()) {
    record("expert_bias/" + l->prefix() + "router.expert_bias", 0,
           {int64_t(l->expert_bias().size())}, l->expert_bias().data(), 4);
  }
  std::fclose(g_out);
  return 0;
}
