#include "mtron/train/megatron_flags.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <set>

#include "mtron/core/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace mtron::train {
namespace {

constexpr const char* kGroup = "Accepted for Megatron scripts (no effect in mtron: docs/flags.md)";

constexpr const char* kNoCudaGraphs = "mtron does not capture CUDA graphs (docs/cuda.md says why)";
constexpr const char* kNoRngTracker =
    "mtron's dropout masks come from Philox counters, with no RNG tracker";

struct Compat {
  const char* flag;
  const char* why;  // completes "<flag> has no effect: <why>"
};

// Switches.
constexpr Compat kSwitches[] = {
    {"--use-mcore-models", "Megatron-Core models are the only ones mtron has"},
    {"--use-flash-attn", "mtron's attention is always tiled with an exact online softmax"},
    {"--no-masked-softmax-fusion", "kernel fusion choice"},
    {"--no-bias-gelu-fusion", "kernel fusion choice"},
    {"--no-bias-dropout-fusion", "kernel fusion choice"},
    {"--no-bias-swiglu-fusion", "kernel fusion choice"},
    {"--no-rope-fusion", "kernel fusion choice"},
    {"--no-gradient-accumulation-fusion", "kernel fusion choice"},
    {"--no-persist-layer-norm", "kernel choice"},
    {"--cross-entropy-loss-fusion", "mtron's vocab-parallel cross entropy is one fused pass"},
    {"--moe-grouped-gemm", "kernel choice"},
    {"--moe-permute-fusion", "kernel fusion choice"},
    {"--moe-router-fusion", "kernel fusion choice"},
    {"--attention-softmax-in-fp32", "mtron's softmax always runs in fp32"},
    {"--no-async-tensor-model-parallel-allreduce", "communication scheduling choice"},
    {"--accumulate-allreduce-grads-in-fp32",
     "gradients are accumulated and reduced in fp32 unless --grad-reduce-in-bf16"},
    {"--log-throughput", "mtron's log line always carries the throughput"},
    {"--no-create-attention-mask-in-dataloader", "mtron's attention is causal without a mask"},
    {"--use-contiguous-buffers-in-local-ddp", "gradients always live in contiguous buckets"},
    {"--manual-gc", "mtron has no garbage collector"},
    {"--no-manual-gc-eval", "mtron has no garbage collector"},
    {"--no-mmap-bin-files", "mtron reads .bin files through mmap; the data are the same"},
    {"--use-pytorch-profiler", "mtron's profiler is --profile (per-kernel table)"},
    {"--async-save", "mtron saves synchronously; the result is the same checkpoint"},
    {"--use-dist-ckpt", "mtron's checkpoints are always sharded and reshardable"},
    {"--auto-detect-ckpt-format", "mtron reads its own checkpoint format only"},
    {"--ckpt-fully-parallel-save", "every rank writes its own shards already"},
    {"--ckpt-fully-parallel-load", "every rank reads its own shards already"},
    {"--dist-ckpt-optim-fully-reshardable", "mtron's optimizer state reshards under any layout"},
    {"--log-params-norm", "mtron's log line has no params norm"},
    {"--log-num-zeros-in-grad", "mtron's log line has no zeros count"},
    {"--log-progress", "progress.txt is not written"},
    {"--log-energy", "energy is not measured"},
    {"--use-persistent-ckpt-worker", "mtron saves synchronously, with no checkpoint worker"},
    {"--no-use-layer-wise-param-layout",
     "mtron's layer-wise distributed optimizer cuts each buffer into one run of whole parameters "
     "per data-parallel rank; there is no other layout to opt out of"},
    {"--verify-integrity",
     "mtron's checkpoints always carry a CRC-32C of every tensor and file header, checked on "
     "every load"},
    {"--check-for-large-grads",
     "mtron has no rerun engine to replay an iteration with unexpectedly large gradients "
     "(NaN and Inf gradients are counted and the iteration skipped)"},
    {"--ckpt-assume-constant-structure",
     "mtron's checkpoint writer keeps no structure between saves to reuse"},
    {"--no-ckpt-fully-parallel-save",
     "every rank writes its own shards; the checkpoint is the same"},
    {"--disable-gloo-process-groups", "mtron creates no Gloo process groups"},
    {"--overlap-param-gather-with-optimizer-step", "communication scheduling choice"},
    {"--ddp-average-in-collective",
     "mtron's gradients are already divided by the global batch's tokens, so the data-parallel "
     "reduction is a sum either way"},
    {"--ddp-pad-buckets-for-high-nccl-busbw",
     "bucket padding for NCCL's bus bandwidth is a communication-speed choice (the gradients "
     "are the same)"},
    {"--delay-wgrad-compute", "kernel scheduling choice (the weight gradients are the same)"},
    {"--async-ckpt-use-cpu-shm", "mtron saves synchronously; the result is the same checkpoint"},
    {"--use-transformer-engine-op-fuser",
     "mtron has one transformer implementation (the fused operations compute the same)"},
    {"--log-straggler", "mtron does not time the ranks against each other"},
    {"--dist-ckpt-save-pre-mcore-014", "mtron writes its own checkpoint format"},
    {"--overlap-p2p-communication-warmup-flush", "pipeline send/recv scheduling choice"},
    {"--overlap-moe-expert-parallel-comm", "communication scheduling choice"},
    {"--legacy-tokenizer", "mtron has one implementation of each tokenizer"},
    {"--no-check-for-nan-in-loss-and-grad", "NaN/Inf iterations are always counted and skipped"},
    {"--no-overlap-p2p-communication", "pipeline send/recv scheduling choice"},
    {"--defer-embedding-wgrad-compute", "kernel scheduling choice"},
    {"--enable-experimental", "mtron has no experimental features to enable"},
    {"--enable-cuda-graph", kNoCudaGraphs},
    {"--external-cuda-graph", kNoCudaGraphs},
    {"--te-rng-tracker", kNoRngTracker},
    {"--inference-rng-tracker", kNoRngTracker},
    {"--apply-query-key-layer-scaling",
     "it scales Q K^T by 1 / layer number and the softmax back, the same in exact arithmetic; "
     "mtron's softmax runs in fp32"},
    {"--moe-shared-expert-overlap",
     "communication scheduling choice (the shared experts' results are the same)"},
    {"--overlap-cpu-optimizer-d2h-h2d",
     "with --optimizer-cpu-offload the host's AdamW step always runs while the device steps its "
     "part"},
    {"--use-torch-optimizer-for-cpu-offload", "the host's AdamW step is mtron's CPU kernel"},
    {"--no-pin-cpu-grads", "staging memory choice (the offloaded step's copies)"},
    {"--no-pin-cpu-params", "staging memory choice (the offloaded step's copies)"},
    {"--fsdp-double-buffer",
     "FSDP communication buffer choice (the gathered parameters are the same)"},
    {"--megatron-fsdp-max-pool-double-buffer", "FSDP communication buffer choice"},
    {"--fsdp-db-use-persist-buf-on-alloc-fail", "FSDP communication buffer choice"},
    {"--use-nccl-ub", "NCCL user-buffer registration is a communication choice"},
    {"--fsdp-manual-registration", "NCCL user-buffer registration is a communication choice"},
    {"--disable-symmetric-registration", "NCCL user-buffer registration is a communication choice"},
    {"--create-all-gather-group", "communication scheduling choice"},
    {"--keep-fp8-transpose-cache",
     "mtron quantises the weights before each FP8 GEMM and keeps no transpose cache"},
    {"--megatron-fsdp-enable-fine-grained-param-gather",
     "mtron's FSDP gathers the parameters one layer at a time already"},
    {"--enable-full-sharding-in-hsdp", "mtron has no hybrid FSDP (an outer data-parallel group)"},
    {"--torch-fsdp2-no-reshard-after-forward",
     "mtron's FSDP releases a layer's gathered parameters after its forward and gathers them "
     "again for its backward (the results are the same)"},
    {"--init-model-with-meta-device",
     "every rank initialises the model in host memory and keeps its shard; the initial weights "
     "are the same"},
    {"--no-gradient-reduce-div-fusion",
     "mtron's gradients are already divided by the global batch's tokens"},
    {"--calculate-per-token-loss",
     "mtron's loss is always the mean over the global batch's tokens whose loss counts; "
     "without --eod-mask-loss every token counts, so that is Megatron's per-micro-batch mean"},
};

// Flags with a value.
struct CompatValue {
  const char* flag;
  const char* why;
  std::vector<std::string> choices;  // empty: any value
};

// Flags that take a list of values (nargs='+' in Megatron).
const std::vector<CompatValue>& list_flags() {
  const std::vector<std::string> kCudaGraphModules = {"attn",
                                                      "mlp",
                                                      "moe",
                                                      "moe_router",
                                                      "moe_preprocess",
                                                      "mamba",
                                                      "full",
                                                      "full_iteration",
                                                      "full_iteration_inference"};
  static const std::vector<CompatValue> v = {
      {"--profile-ranks", "--profile reports rank 0 and the last rank", {}},
      {"--cuda-graph-modules", kNoCudaGraphs, kCudaGraphModules},
      {"--cuda-graph-scope", kNoCudaGraphs, kCudaGraphModules},  // Megatron's deprecated name
  };
  return v;
}

const std::vector<CompatValue>& value_flags() {
  static const std::vector<CompatValue> v = {
      {"--transformer-impl",
       "mtron has one transformer implementation",
       {"transformer_engine", "local", "inference_optimized"}},
      {"--empty-unused-memory-level", "mtron frees activation memory as it goes", {"0", "1", "2"}},
      {"--manual-gc-interval", "mtron has no garbage collector", {}},
      {"--num-workers", "samples are read on the training thread (mmap)", {}},
      {"--num-dataset-builder-threads", "rank 0 builds the dataset indices", {}},
      {"--dataloader-type",
       "mtron's sampler is Megatron's 'single' (in order from consumed samples)",
       {"single"}},
      {"--cuda-graph-impl", kNoCudaGraphs, {"none", "local", "transformer_engine"}},
      {"--cuda-graph-warmup-steps", kNoCudaGraphs, {}},
      {"--profile-step-start", "--profile times every iteration after the first", {}},
      {"--profile-step-end", "--profile times every iteration after the first", {}},
      {"--tensorboard-queue-size", "mtron flushes the event file at every logged iteration", {}},
      {"--timing-log-level", "mtron's timers are --profile's per-kernel table", {"0", "1", "2"}},
      {"--timing-log-option",
       "mtron's timers are --profile's per-kernel table",
       {"max", "minmax", "all"}},
      {"--tiktoken-pattern",
       "only TikTokenizer uses it, and mtron has no TikTokenizer",
       {"v1", "v2"}},
      {"--logging-level", "mtron's log has one level (errors, notes and the log line)", {}},
      {"--async-strategy", "mtron saves synchronously", {"nvrx", "mcore"}},
      {"--rerun-mode",
       "mtron has no rerun engine: an iteration with a NaN or Inf loss or gradient is counted "
       "and skipped",
       {"disabled", "validate_results", "report_stats"}},
      {"--num-distributed-optimizer-instances",
       "the distributed optimizer shards its state over the whole data-parallel group",
       {}},
      {"--suggested-communication-unit-size",
       "mtron's FSDP gathers the parameters one layer at a time",
       {}},
      {"--outer-dp-sharding-strategy",
       "it shards over Hybrid FSDP's outer data-parallel group, which mtron does not create",
       {"no_shard", "optim"}},
      {"--megatron-fsdp-version",
       "both versions shard as --data-parallel-sharding-strategy says",
       {"1", "2"}},
      {"--straggler-minmax-count", "mtron does not time the ranks against each other", {}},
      {"--cross-entropy-fusion-impl",
       "mtron's vocab-parallel cross entropy is one fused pass",
       {"native", "te"}},
      {"--wgrad-deferral-limit", "kernel scheduling choice", {}},
      {"--tp-comm-overlap-cfg", "mtron does not overlap TP collectives with GEMMs", {}},
      {"--max-tokens-to-oom", "it bounds Megatron's inference server, not training", {}},
      {"--dist-ckpt-strictness",
       "mtron's loader checks every tensor and refuses a checkpoint that does not match the model "
       "(Megatron's raise_all)",
       {"assume_ok_unexpected", "log_unexpected", "log_all", "raise_unexpected", "raise_all",
        "return_unexpected", "return_all", "ignore_all"}},
  };
  return v;
}

void add_note(std::vector<std::string>& notes, std::string note) {
  if (std::find(notes.begin(), notes.end(), note) == notes.end()) notes.push_back(std::move(note));
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

void add_compat_flags(CLI::App& app, std::vector<std::string>& notes) {
  for (const Compat& c : kSwitches) {
    std::string note = std::string(c.flag) + " has no effect: " + c.why;
    app.add_flag_callback(
           c.flag, [&notes, note] { add_note(notes, note); }, c.why)
        ->group(kGroup);
  }
  for (const CompatValue& c : value_flags()) {
    const std::string flag = c.flag, why = c.why;
    auto* o = app.add_option_function<std::string>(
        flag,
        [&notes, flag, why](const std::string& v) {
          add_note(notes, flag + " " + v + " has no effect: " + why);
        },
        why);
    o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)->group(kGroup);
    if (!c.choices.empty()) o->check(CLI::IsMember(c.choices));
  }
  for (const CompatValue& c : list_flags()) {
    const std::string flag = c.flag, why = c.why;
    auto* o = app.add_option_function<std::vector<std::string>>(
        flag,
        [&notes, flag, why](const std::vector<std::string>& v) {
          add_note(notes, fmt::format("{} {} has no effect: {}", flag, fmt::join(v, " "), why));
        },
        why);
    o->group(kGroup);
    if (!c.choices.empty()) o->check(CLI::IsMember(c.choices));
  }
}

std::vector<std::string> last_occurrence_only(int argc,
                                              char** argv,
                                              const std::vector<std::string>& list_flags) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const std::string& f : list_flags) {
    size_t last = args.size();
    for (size_t i = 0; i < args.size(); ++i)
      if (args[i] == f) last = i;
    std::vector<std::string> kept;
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i] == f && i != last) {
        while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) ++i;
        continue;
      }
      kept.push_back(args[i]);
    }
    args = std::move(kept);
  }
  return args;
}

void check_unknown_flags(const CLI::App& app) {
  const std::vector<std::string> rest = app.remaining();
  if (rest.empty()) return;
  const std::string& arg = rest.front();
  if (arg.rfind("-", 0) != 0) {
    MT_CHECK(false, "unexpected argument '", arg, "' (not the value of any flag)");
  }
  const std::string name = arg.substr(0, arg.find('='));
  std::string best;
  size_t best_d = std::string::npos;
  for (const CLI::Option* o : app.get_options()) {
    for (const std::string& l : o->get_lnames()) {
      const size_t d = edit_distance(name, "--" + l);
      if (d < best_d) {
        best_d = d;
        best = "--" + l;
      }
    }
  }
  MT_CHECK(false, "unknown flag ", name, "; did you mean ", best, "?");
}

}  // namespace mtron::train
