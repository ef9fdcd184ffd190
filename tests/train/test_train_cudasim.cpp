// The CUDA code path of the model, optimizer, schedule and trainer (--device cuda), run on the
// CPU emulation of the CUDA kernels (kernels/cuda/sim): the same flags trained on Device::kCUDA
// and on the CPU give the same losses, gradient norms and weights. The emulated device memory
// faults on any host access, so a place that still reads or writes a device buffer on the host
// (a memcpy, an element read) kills the test, as it would crash on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "mtron/comm/nccl.h"
#include "mtron/comm/single.h"
#include "mtron/core/tensor.h"
#include "mtron/kernels/attention.h"
#include "mtron/kernels/device.h"
#include "mtron/kernels/elementwise.h"
#include "mtron/model/inference.h"
#include "mtron/train/trainer.h"
#include "train_flags.h"

namespace mtron {
namespace {

train::TrainArgs make_args(const std::vector<std::string>& flags, int64_t world_size = 1) {
  train::TrainArgs a;
  tests::parse_train_flags(
      "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
      "--max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 6 --train-iters 4 "
      "--lr 3e-3 --mock-data --vocab-size 127 --metrics-file /dev/null --log-interval 1 "
      "--eval-iters 0 --hidden-dropout 0 --attention-dropout 0",
      flags, world_size, a);
  return a;
}

struct Run {
  std::vector<double> loss, grad_norm;
  std::vector<float> master;  // the first chunk's master weights (experts' too) after the last step
  int64_t state_bytes = 0, host_state_bytes = 0;  // the optimizer's, on the device and offloaded
};

Run train_on(Device d, std::vector<std::string> flags) {
  flags.insert(flags.end(), {"--device", d == Device::kCUDA ? "cuda" : "cpu"});
  const train::TrainArgs a = make_args(flags);
  auto world = make_single_comm();
  train::Trainer t(a, *world);
  Run r;
  for (int64_t i = 0; i < a.train_iters; ++i) {
    const train::StepResult s = t.step();
    r.loss.push_back(s.lm_loss);
    r.grad_norm.push_back(s.grad_norm);
  }
  r.state_bytes = t.optimizer().state_bytes();
  r.host_state_bytes = t.optimizer().host_state_bytes();
  const model::GPTChunk& c = *t.chunks().front();
  for (const model::ParamBuffer* p : {&c.params(), &c.expert_params()}) {
    if (p->specs().empty()) continue;  // no experts
    const Tensor* m = &p->master_flat();
    EXPECT_EQ(m->device(), d);
    const size_t at = r.master.size();
    r.master.resize(at + size_t(m->numel()));
    kernels::copy_to_host(t.run_ctx().k, r.master.data() + at, m->raw(), int64_t(m->nbytes()));
  }
  return r;
}

double rel(double a, double b) {
  return std::abs(a - b) / std::max(std::abs(b), 1e-30);
}

void expect_same_training(const std::vector<std::string>& flags, double tol) {
  const Run cpu = train_on(Device::kCPU, flags);
  const Run gpu = train_on(Device::kCUDA, flags);
  ASSERT_EQ(cpu.loss.size(), gpu.loss.size());
  for (size_t i = 0; i < cpu.loss.size(); ++i) {
    EXPECT_LE(rel(gpu.loss[i], cpu.loss[i]), tol)
        << "step " << i + 1 << ": cuda " << gpu.loss[i] << " cpu " << cpu.loss[i];
    EXPECT_LE(rel(gpu.grad_norm[i], cpu.grad_norm[i]), 10 * tol)
        << "step " << i + 1 << ": cuda " << gpu.grad_norm[i] << " cpu " << cpu.grad_norm[i];
  }
  // Training moved the weights, and both devices moved them alike (normwise).
  ASSERT_EQ(cpu.master.size(), gpu.master.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < cpu.master.size(); ++i) {
    diff += std::pow(double(gpu.master[i]) - cpu.master[i], 2);
    norm += std::pow(double(cpu.master[i]), 2);
  }
  EXPECT_GT(norm, 0);
  EXPECT_LE(std::sqrt(diff / norm), 10 * tol);
  EXPECT_LT(cpu.loss.back(), cpu.loss.front());  // it trains
}

// GPT-2: learned positions, LayerNorm, GELU, biases, tied embeddings; two micro-batches.
TEST(TrainCudaSim, Gpt2Fp32MatchesCpu) {
  expect_same_training({}, 1e-5);
}

// Llama: RoPE, RMSNorm, SwiGLU, GQA, no biases, untied output layer, full recompute (backward
// rebuilds the layers from the stash on the device).
TEST(TrainCudaSim, LlamaFp32RecomputeMatchesCpu) {
  expect_same_training(
      {"--position-embedding-type", "rope", "--normalization", "RMSNorm", "--swiglu",
       "--disable-bias-linear", "--group-query-attention", "--num-query-groups", "2",
       "--untie-embeddings-and-output-weights", "--recompute-granularity", "full",
       "--recompute-method", "uniform", "--recompute-num-layers", "1"},
      1e-5);
}

// Dropout 0.1 (Megatron's default): the hidden-dropout kernel and the attention's dropout draw
// the CPU's masks; Llama's GQA and full recompute (the masks drawn again) too.
TEST(TrainCudaSim, Gpt2DropoutMatchesCpu) {
  expect_same_training({"--hidden-dropout", "0.1", "--attention-dropout", "0.1"}, 1e-5);
}
TEST(TrainCudaSim, LlamaDropoutRecomputeMatchesCpu) {
  expect_same_training(
      {"--position-embedding-type", "rope", "--normalization", "RMSNorm", "--swiglu",
       "--disable-bias-linear", "--group-query-attention", "--num-query-groups", "2",
       "--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers",
       "1", "--hidden-dropout", "0.1", "--attention-dropout", "0.1"},
      1e-5);
}

// Mixture of experts on the device: the router's kernels (top-k softmax, auxiliary and z losses),
// the routing plan with a capacity limit that drops pairs, the permutation and the combine, a
// shared expert; Mixtral-like otherwise.
TEST(TrainCudaSim, MoeFp32MatchesCpu) {
  expect_same_training({"--position-embedding-type",
                        "rope",
                        "--normalization",
                        "RMSNorm",
                        "--swiglu",
                        "--disable-bias-linear",
                        "--num-experts",
                        "4",
                        "--moe-router-topk",
                        "2",
                        "--moe-ffn-hidden-size",
                        "48",
                        "--moe-aux-loss-coeff",
                        "1e-2",
                        "--moe-z-loss-coeff",
                        "1e-3",
                        "--moe-expert-capacity-factor",
                        "1.0",
                        "--moe-shared-expert-intermediate-size",
                        "32"},
                       1e-5);
}

// Sigmoid routing (top 3, normalised), the per-sequence auxiliary loss, MoE every other layer,
// GELU experts, bf16.
TEST(TrainCudaSim, MoeSigmoidSeqAuxBf16MatchesCpu) {
  expect_same_training({"--disable-bias-linear", "--num-experts", "8", "--moe-router-topk", "3",
                        "--moe-router-score-function", "sigmoid", "--moe-layer-freq", "2",
                        "--moe-router-load-balancing-type", "seq_aux_loss", "--moe-aux-loss-coeff",
                        "1e-2", "--bf16"},
                       1e-3);
}

// Optimizer offload (--optimizer-cpu-offload): half (and in fp32 all) of the moments in host memory
// and stepped on the CPU beside the device; fp32, and bf16 (whose compute copy the device refreshes
// from the offloaded weights), with MoE's expert buffer as a second one. The losses, gradient
// norms and weights are those without offload, bit for bit; the device holds less state.
TEST(TrainCudaSim, OptimizerOffloadIsExact) {
  const std::vector<std::string> moe = {"--disable-bias-linear", "--num-experts", "4",
                                        "--moe-router-topk", "2"};
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{}, std::vector<std::string>{"--bf16"}, moe}) {
    const mtron::Run base = train_on(Device::kCUDA, flags);
    EXPECT_EQ(base.host_state_bytes, 0);
    for (const char* fraction : {"0.5", "1"}) {
      if (!flags.empty() && std::string(fraction) == "1") continue;  // fp32 only
      std::vector<std::string> f = flags;
      f.insert(f.end(), {"--optimizer-cpu-offload", "--use-precision-aware-optimizer",
                         "--optimizer-offload-fraction", fraction});
      const mtron::Run off = train_on(Device::kCUDA, f);
      const std::string what =
          "offload " + std::string(fraction) + " " + (flags.empty() ? "fp32" : flags[0]);
      EXPECT_EQ(off.loss, base.loss) << what;
      EXPECT_EQ(off.grad_norm, base.grad_norm) << what;
      EXPECT_TRUE(off.master == base.master) << what;
      EXPECT_EQ(off.state_bytes + off.host_state_bytes, base.state_bytes) << what;
      EXPECT_GT(off.host_state_bytes, 0) << what;
      if (std::string(fraction) == "1") {
        EXPECT_EQ(off.state_bytes, 0) << what;
      }
    }
  }
}

// Megatron's rule: offload needs the precision-aware optimizer.
TEST(TrainCudaSim, OffloadNeedsThePrecisionAwareOptimizer) {
  try {
    make_args({"--optimizer-cpu-offload", "--optimizer-offload-fraction", "1", "--device", "cuda"});
    ADD_FAILURE() << "--optimizer-cpu-offload without --use-precision-aware-optimizer accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--use-precision-aware-optimizer"), std::string::npos)
        << e.what();
  }
}

// bf16 GEMMs (cuBLASLt's mapping, emulated) against the CPU's bf16 GEMMs: both round the same
// inputs and accumulate in fp32, in different orders.
TEST(TrainCudaSim, Gpt2Bf16MatchesCpu) {
  expect_same_training({"--bf16"}, 1e-3);
}

// NVTE_ALLOW_NONDETERMINISTIC_ALGO=1 (Transformer Engine's switch, which Megatron scripts set):
// on CUDA attention's backward takes cuDNN's graph with dq accumulated atomically, the same
// training on the emulation (which adds in order); --deterministic-mode keeps the deterministic
// graph; on the CPU the variable has no effect.
TEST(TrainCudaSim, NondeterministicAttentionFollowsTransformerEnginesSwitch) {
  struct Env {
    Env() { setenv("NVTE_ALLOW_NONDETERMINISTIC_ALGO", "1", 1); }
    ~Env() { unsetenv("NVTE_ALLOW_NONDETERMINISTIC_ALGO"); }
  };
  {
    const Env env;
    EXPECT_FALSE(
        make_args({"--device", "cuda", "--deterministic-mode"}).nondeterministic_attention);
    EXPECT_FALSE(make_args({"--device", "cpu"}).nondeterministic_attention);
    const train::TrainArgs a = make_args({"--device", "cuda", "--bf16"});
    EXPECT_TRUE(a.nondeterministic_attention);
    auto world = make_single_comm();
    const train::Trainer t(a, *world);
    EXPECT_TRUE(model::attention_shape(t.run_ctx(), 1, 8, 8, 4, 4, 16, 16, 0.25f).nondeterministic);
    expect_same_training({"--bf16"}, 1e-3);
  }
  EXPECT_FALSE(make_args({"--device", "cuda", "--bf16"}).nondeterministic_attention);
}

// Generation (the training layers without a stash, with a KV cache) on the device: the logits of
// a prefill and of each decoded token are the CPU's.
double generation_diff_cuda_vs_cpu(const ModelConfig& m) {
  std::vector<std::vector<float>> logits;
  for (const Device d : {Device::kCPU, Device::kCUDA}) {
    if (d == Device::kCUDA) kernels::init_device(d, 0);
    model::RunCtx rc;
    rc.k.device = d;
    model::GPTChunk c(m, {0, m.num_layers, true, true}, parallel::TensorParallel{}, {});
    c.params().allocate(Precision::kFP32, 1, 0, rc.k);
    c.params().init(5);
    if (m.is_moe()) {
      c.expert_params().allocate(Precision::kFP32, 1, 0, rc.k);
      c.expert_params().init(6);
    }
    model::InferenceModel im(m, c, 16, rc);
    std::vector<float> row(static_cast<size_t>(im.padded_vocab())), all;
    const std::vector<int32_t> prompt = {3, 1, 4, 1, 5};
    im.forward(prompt.data(), int64_t(prompt.size()), row.data(), false);
    all.insert(all.end(), row.begin(), row.end());
    for (const int32_t t : {9, 2, 6}) {
      im.forward(&t, 1, row.data(), false);
      all.insert(all.end(), row.begin(), row.end());
    }
    logits.push_back(all);
  }
  double diff = 0, norm = 0;
  for (size_t i = 0; i < logits[0].size(); ++i) {
    diff += std::pow(double(logits[1][i]) - logits[0][i], 2);
    norm += std::pow(double(logits[0][i]), 2);
  }
  EXPECT_GT(norm, 0);
  return std::sqrt(diff / norm);
}

TEST(TrainCudaSim, KvCacheGenerationMatchesCpu) {
  ModelConfig m = tests::model_shape(2, 64, 4, 16, 100);
  m.group_query_attention = true;
  m.num_query_groups = 2;
  tests::set_llama_architecture(m);
  m.num_experts = 4;
  m.moe_shared_expert_intermediate_size = 32;
  m.finalize();
  EXPECT_LE(generation_diff_cuda_vs_cpu(m), 1e-5);
}

// Multi-latent attention caches the compressed latent (model/mla.h). With kv_lora_rank 12 both
// devices run the absorbed form; with 260 the latent rows (264 floats) exceed the CUDA attention
// kernel's head dim, so the device expands the cached latents while the CPU absorbs.
TEST(TrainCudaSim, MlaLatentCacheGenerationMatchesCpu) {
  for (const int64_t kv_lora_rank : {12, 260}) {
    ModelConfig m = tests::model_shape(2, 64, 4, 16, 100);
    tests::set_llama_architecture(m);
    m.mla.enabled = true;
    m.mla.q_lora_rank = 24;
    m.mla.kv_lora_rank = kv_lora_rank;
    m.mla.qk_head_dim = 8;
    m.mla.qk_pos_emb_head_dim = 4;
    m.mla.v_head_dim = 6;
    m.qk_layernorm = true;
    m.finalize();
    if (kv_lora_rank == 260) {
      EXPECT_GT(m.mla.latent_width(), kernels::attention_max_head_dim(Device::kCUDA));
    }
    EXPECT_LE(generation_diff_cuda_vs_cpu(m), 1e-5) << "kv_lora_rank " << kv_lora_rank;
  }
}

// The log of a --device cuda run: Megatron's memory report and the iteration lines.
TEST(TrainCudaSim, LogsDeviceMemory) {
  const train::TrainArgs a = make_args({"--device", "cuda", "--train-iters", "2"});
  auto world = make_single_comm();
  train::Trainer t(a, *world);
  testing::internal::CaptureStdout();
  t.run();
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("[Rank 0] (after 1 iterations) memory (MB) | allocated: "), std::string::npos)
      << out;
  EXPECT_NE(out.find("max reserved: "), std::string::npos) << out;
  EXPECT_NE(out.find("iteration        2/       2"), std::string::npos) << out;
  const kernels::DeviceMemory m = kernels::device_memory(Device::kCUDA);
  EXPECT_GT(m.max_allocated, 0);
}

// copy_from_host_async queues the upload as a copy, not a host synchronisation, and the host
// buffer may be overwritten as soon as it returns.
TEST(TrainCudaSim, AsyncUploadIsACopyAndFreesTheHostBuffer) {
  kernels::init_device(Device::kCUDA, 0);
  const kernels::Ctx k{Device::kCUDA, nullptr};
  const Tensor t = Tensor::empty({4}, DType::kI32, Device::kCUDA);
  std::vector<int32_t> host = {1, 2, 3, 4};
  const kernels::DeviceWork before = kernels::device_work(Device::kCUDA);
  kernels::copy_from_host_async(k, t.raw(), host.data(), 16);
  const kernels::DeviceWork w = kernels::device_work(Device::kCUDA) - before;
  EXPECT_EQ(w.copies, 1);
  EXPECT_EQ(w.host_syncs, 0);
  host.assign(4, 0);
  kernels::copy_to_host(k, host.data(), t.raw(), 16);
  EXPECT_EQ(host, (std::vector<int32_t>{1, 2, 3, 4}));
}

// The emulated NCCL's non-blocking calls work on host copies of the device buffers
// (sim_nccl.cpp): the result reaches the device buffer when the request completes.
TEST(TrainCudaSim, NonBlockingCommunicationIsStagedUntilItCompletes) {
  kernels::init_device(Device::kCUDA, 0);
  const kernels::Ctx k{Device::kCUDA, nullptr};
  const std::unique_ptr<Comm> single = make_single_comm();
  const std::unique_ptr<Comm> nccl =
      make_nccl_comm(*single, kernels::default_stream(Device::kCUDA));
  const std::vector<float> src = {1, 2, 3, 4};
  const Tensor send = Tensor::empty({4}, DType::kF32, Device::kCUDA);
  const Tensor recv = Tensor::empty({4}, DType::kF32, Device::kCUDA);
  kernels::copy_from_host(k, send.raw(), src.data(), 16);
  kernels::fill_zero(k, recv.raw(), 16);
  std::unique_ptr<Request> r = nccl->iall_gather(send.raw(), recv.raw(), 4, DType::kF32);
  EXPECT_TRUE(r->test());
  std::vector<float> got(4, -1.0f);
  kernels::copy_to_host(k, got.data(), recv.raw(), 16);
  EXPECT_EQ(got, src);
  r->wait();
  // A host buffer is refused, as NCCL refuses one.
  std::vector<float> host(4);
  EXPECT_THROW(nccl->iall_reduce(host.data(), 4, DType::kF32, ReduceOp::kSum), Error);
}

// Freeing a buffer of a pending non-blocking communication dies: on a GPU the free is queued on
// the compute stream before the communication is joined to it (comm/nccl.h).
TEST(TrainCudaSimDeathTest, FreeingABufferInFlightDies) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        kernels::init_device(Device::kCUDA, 0);
        const std::unique_ptr<Comm> single = make_single_comm();
        const std::unique_ptr<Comm> nccl =
            make_nccl_comm(*single, kernels::default_stream(Device::kCUDA));
        auto t = std::make_unique<Tensor>(Tensor::empty({16}, DType::kF32, Device::kCUDA));
        kernels::fill_zero(kernels::Ctx{Device::kCUDA, nullptr}, t->raw(), 64);
        std::unique_ptr<Request> r = nccl->iall_reduce(t->raw(), 16, DType::kF32, ReduceOp::kSum);
        t.reset();
        r->wait();
      },
      "freed while a non-blocking communication using it is pending");
}

// The check the other tests rely on: host code touching emulated device memory dies.
TEST(TrainCudaSimDeathTest, HostAccessToDeviceMemoryFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        kernels::init_device(Device::kCUDA, 0);
        const Tensor t = Tensor::empty({16}, DType::kF32, Device::kCUDA);
        volatile float* p = t.f32();
        p[3] = 1.0f;
      },
      "host code accessed device memory");
}

}  // namespace
}  // namespace mtron
