#include "mtron/train/run_log.h"

#include <algorithm>

#include "mtron/core/error.h"
#include "mtron/core/formulas.h"
#include "mtron/core/hardware.h"
#include "mtron/core/log.h"
#include "mtron/core/profile.h"
#include "mtron/core/version.h"
#include "mtron/kernels/cpu_isa.h"

namespace mtron::train {

RunLog::RunLog(const TrainArgs& a, int64_t world_size, bool resumed) {
  const std::string path = metrics_path(a);
  if (!path.empty()) metrics_ = std::make_unique<MetricsWriter>(path, resumed);
  if (!a.tensorboard.dir.empty() || !wandb_dir(a.tensorboard, a.checkpoint.save).empty())
    tensorboard_ =
        std::make_unique<TensorBoard>(a.tensorboard, a.checkpoint.save, world_size, a.device);
}

void RunLog::step(const TensorBoardStep& s) {
  if (tensorboard_) tensorboard_->iteration(s);
}

void RunLog::interval(const IterationLog& l) {
  log_plain(format_iteration_line(l));
  if (metrics_) metrics_->write(l);
  if (tensorboard_) tensorboard_->timers(l.iteration, l.elapsed_ms / 1e3, l.tflops_per_device);
}

void RunLog::validation(const std::string& where,
                        int64_t iteration,
                        int64_t consumed,
                        double loss) {
  log_plain(format_eval_block(where, loss));
  if (metrics_) metrics_->write_eval(iteration, loss);
  if (tensorboard_) tensorboard_->validation(iteration, consumed, loss);
}

std::string optimizer_summary(const TrainArgs& a) {
  MT_ASSERT(a.muon, "optimizer_summary of an AdamW run (its header names no optimizer)");
  return a.muon->describe() +
         (a.layer_wise_optimizer
              ? "; layer-wise distributed optimizer (each data-parallel rank steps its own whole "
                "parameters and keeps their state)"
              : "");
}

void log_run_header(const TrainArgs& a, int rank, bool logger, const RunHeader& h) {
  const auto& par = a.parallel;
  if (rank == 0) {
    log_info("mtron {}: {}", mtron_version(), kernels::cpu_summary());
    log_info("model: {}", a.model.summary());
    log_info("layout: {}", par.summary());
    if (a.recompute.granularity != RecomputeGranularity::kNone)
      log_info("activation recompute: {}", a.recompute.describe());
    if (a.batches.varies()) log_info("global batch size: {}", a.batches.describe());
    if (a.eval_iters > 0 && a.eval_global_batch_size != par.global_batch_size)
      log_info("validation batch size: {}", a.eval_global_batch_size);
    if (a.muon) log_info("optimizer: {}", optimizer_summary(a));
    log_info("parameters: {:.2f} M (padded vocab {})",
             double(a.model.num_parameters(par.tp())) / 1e6, a.model.padded_vocab_size(par.tp()));
    log_info("precision: {}{}; MFU against {} ({})",
             a.precision.compute == Precision::kFP32
                 ? std::string("fp32")
                 : fmt::format("{} (fp32 master weights and gradients)",
                               precision_name(a.precision.compute)),
             a.fp8.enabled ? "; FP8 linear GEMMs: " + a.fp8.describe() : "", h.mfu_against,
             h.where);
    if (a.grad_scaler) {
      const optim::GradScalerConfig& s = *a.grad_scaler;
      log_info("loss scaling: {}",
               s.static_scale ? fmt::format("static, {}", *s.static_scale)
                              : fmt::format("dynamic from {} (min {}, window {}, hysteresis {})",
                                            s.initial_scale, s.min_scale, s.window, s.hysteresis));
    }
    log_info("{}", format_theoretical_memory(
                       megatron_theoretical_memory(a.model, par, a.recompute.granularity)));
    for (const auto& n : a.notes) log_info("note: {}", n);
  }
  if (h.first_of_dp_cp) {
    log_plain(fmt::format(
        " > number of parameters on (tensor, pipeline) model parallel rank ({}, {}): {}", h.tp_rank,
        h.pp_rank, h.params_on_rank));
  }
  if (rank != 0 && !logger) return;
  log_info("optimizer state: {:.3f} MB ({} bytes) on this rank{}{}",
           double(h.optimizer_state_bytes) / 1048576.0, h.optimizer_state_bytes,
           par.use_distributed_optimizer ? " (distributed optimizer shard)"
           : a.layer_wise_optimizer      ? " (layer-wise distributed optimizer: its own parameters)"
                                         : "",
           h.optimizer_host_state_bytes > 0
               ? fmt::format(", and {:.3f} MB offloaded to host memory (--optimizer-cpu-offload)",
                             double(h.optimizer_host_state_bytes) / 1048576.0)
               : "");
  if (a.fp8.enabled) {
    log_info(
        "fp8 state: {} linear layers in FP8 on this rank, {} bytes of amax histories and "
        "scales",
        h.fp8_layers, h.fp8_state_bytes);
  }
  if (a.model.is_moe()) {
    log_info(
        "expert weights on this rank: {} bytes fp32 ({} of {} experts per MoE layer, 1/{} of "
        "each by expert tensor parallelism)",
        h.expert_elems * int64_t(sizeof(float)), a.model.num_experts / par.ep(),
        a.model.num_experts, par.etp());
  }
}

namespace {

constexpr GroupKind kProfiledGroups[] = {GroupKind::kTP, GroupKind::kCP,   GroupKind::kDPCP,
                                         GroupKind::kPP, GroupKind::kTPPP, GroupKind::kEmbedding,
                                         GroupKind::kEP, GroupKind::kETP,  GroupKind::kEDP};

// The bytes each profiled group's Comm has sent, then the hierarchical CP levels' (a2a+p2p; 0
// without) and the world's.
constexpr const char* kOtherGroups[] = {"cp-a2a", "cp-ring", "world"};
std::vector<int64_t> comm_bytes(const ParallelState& ps, const Comm& world) {
  std::vector<int64_t> b;
  for (GroupKind k : kProfiledGroups) {
    b.push_back(k == GroupKind::kEmbedding && !ps.in_embedding_group() ? 0
                                                                       : ps.group(k).bytes_sent());
  }
  for (int level : {0, 1}) b.push_back(ps.cp_level(level) ? ps.cp_level(level)->bytes_sent() : 0);
  b.push_back(world.bytes_sent());
  return b;
}

// The profile's costs per step (`entries` summed over `iters` iterations) and the step time they
// give at an H200's peaks, each kernel at its roofline (the larger of its FLOPs at the peak of
// its arithmetic and its bytes at the memory bandwidth), one after another: GEMMs at the peak
// of their type, attention's bf16 products at the bf16 peak and its fp32 ones at the fp32 peak,
// every other kernel by its bytes.
void log_step_cost(const std::vector<ProfileEntry>& entries, int64_t iters) {
  const Hardware h = find_hardware("h200");
  struct Sum {
    double flops = 0, tensor_flops = 0, bytes = 0, min_bytes = 0, seconds = 0, min_seconds = 0;
  } gemm, attn, other;
  for (const ProfileEntry& e : entries) {
    const OpCost& c = e.cost;
    const bool is_gemm = e.name.starts_with("gemm_");
    const double peak = e.name == "gemm_fp32"  ? h.peak_fp32
                        : e.name == "gemm_fp8" ? h.peak_fp8
                                               : h.peak_bf16;
    const double compute =
        is_gemm ? c.flops / peak
                : c.tensor_flops / h.peak_bf16 + (c.flops - c.tensor_flops) / h.peak_fp32;
    Sum& s = is_gemm ? gemm : (c.flops > 0 ? attn : other);
    s.flops += c.flops;
    s.tensor_flops += c.tensor_flops;
    s.bytes += c.bytes;
    s.min_bytes += c.min_bytes;
    s.seconds += std::max(compute, c.bytes / h.memory_bandwidth);
    s.min_seconds += std::max(compute, c.min_bytes / h.memory_bandwidth);
  }
  const double n = double(iters);
  const double moved = attn.bytes + other.bytes, least = attn.min_bytes + other.min_bytes;
  log_info(
      "cost per step: GEMMs {:.4g} GFLOP ({:.4g} GB), attention {:.4g} GFLOP ({:.0f}% bf16 "
      "products), non-GEMM kernels {:.4g} GB moved, {:.4g} GB at the minimum (bf16 activations, "
      "GEMM epilogues, no conversion or split copies): {:.2f}x",
      gemm.flops / n / 1e9, gemm.bytes / n / 1e9, attn.flops / n / 1e9,
      attn.flops > 0 ? 100 * attn.tensor_flops / attn.flops : 0.0, moved / n / 1e9, least / n / 1e9,
      least > 0 ? moved / least : 0.0);
  log_info(
      "predicted step on an {} at its peaks ({:.4g} TFLOP/s bf16, {:.4g} fp32, {:.4g} TB/s), each "
      "kernel at its roofline, none overlapped: GEMMs {:.4g} ms, attention {:.4g} ms, other "
      "kernels {:.4g} ms: {:.4g} ms ({:.4g} ms at the minimum traffic)",
      h.description, h.peak_bf16 / 1e12, h.peak_fp32 / 1e12, h.memory_bandwidth / 1e12,
      gemm.seconds / n * 1e3, attn.seconds / n * 1e3, other.seconds / n * 1e3,
      (gemm.seconds + attn.seconds + other.seconds) / n * 1e3,
      (gemm.min_seconds + attn.min_seconds + other.min_seconds) / n * 1e3);
}

}  // namespace

ProfileStart profile_start(const ParallelState& ps, const Comm& world, Device d) {
  return {comm_bytes(ps, world), kernels::device_work(d)};
}

void log_profile(const ParallelState& ps,
                 const Comm& world,
                 int64_t iteration,
                 const ProfileTimes& t,
                 const ProfileStart& start) {
  const ParallelConfig& par = ps.config();
  const bool logger = world.rank() == world.size() - 1;
  if (world.rank() == 0 || logger) {
    const std::vector<ProfileEntry> entries = profile_report();
    log_info("profile of iterations 2-{} on this rank ({:.3f} s):\n{}", iteration, t.seconds,
             format_profile(entries, t.seconds));
    log_step_cost(entries, t.iters);
  }
  // Every rank: bytes it sent per step by group, and its pipeline compute/wait split.
  const std::vector<int64_t> bytes1 = comm_bytes(ps, world);
  std::string line;
  for (size_t i = 0; i < bytes1.size(); ++i) {
    const size_t n = std::size(kProfiledGroups);
    const char* name = i < n ? group_name(kProfiledGroups[i]).data() : kOtherGroups[i - n];
    line += fmt::format(" {} {}", name, (bytes1[i] - start.bytes[i]) / t.iters);
  }
  log_info("bytes sent per step:{}", line);
  const double ideal = double(par.pp() - 1) / double(par.vpp() * par.num_microbatches());
  log_info(
      "pipeline per step: compute {:.4f} s, waiting {:.4f} s, bubble {:.3f} (ideal "
      "(p-1)/(v m) = {:.3f})",
      t.compute_s / double(t.iters), t.wait_s / double(t.iters), t.wait_s / t.compute_s, ideal);
  if (t.device != Device::kCPU) {
    const kernels::DeviceWork w = kernels::device_work(t.device) - start.work;
    const auto per = [&](int64_t n) { return double(n) / double(t.iters); };
    log_info(
        "device work per step: {:.1f} kernel launches, {:.1f} GEMMs, {:.1f} copies, {:.1f} host "
        "synchronisations",
        per(w.launches), per(w.gemms), per(w.copies), per(w.host_syncs));
  }
}

}  // namespace mtron::train
