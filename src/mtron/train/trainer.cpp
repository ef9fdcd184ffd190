#include "mtron/train/trainer.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "mtron/core/formulas.h"
#include "mtron/core/hardware.h"
#include "mtron/core/log.h"
#include "mtron/core/memory.h"
#include "mtron/core/profile.h"
#include "mtron/core/timer.h"
#include "mtron/data/sampler.h"
#include "mtron/kernels/device.h"
#include "mtron/kernels/elementwise.h"
#include "mtron/parallel/launch.h"
#include "mtron/parallel/rank_map.h"
#include "mtron/parallel/schedule.h"
#include "mtron/train/ddp.h"
#include "mtron/train/expert_bias.h"
#include "mtron/train/fp8_state.h"
#include "mtron/train/mock_data.h"
#include "mtron/train/stages.h"
#include "mtron/train/weight_hash.h"

namespace mtron::train {

Trainer::Trainer(const TrainArgs& args, Comm& world, int ranks_per_node)
    : a_(args), world_(world), ranks_per_node_(ranks_per_node), schedule_(args.schedule) {
  MT_CHECK(world_.size() == a_.parallel.world_size, "internal: world size mismatch");
  rc_.k.device = a_.device;
  device_world_ = init_rank_device(a_.device, world_, ranks_per_node_, rc_.k.stream);
  ps_ = std::make_unique<ParallelState>(a_.parallel, device_world_ ? *device_world_ : world_);
  rc_.precision = a_.precision.compute;
  rc_.fp32_attention = a_.fp32_attention;
  rc_.flash_attention = a_.flash_attention;
  rc_.nondeterministic_attention = a_.nondeterministic_attention;
  rc_.tp = parallel::TensorParallel{&ps_->tp(), ps_->tp_rank(), ps_->tp_size(),
                                    a_.parallel.sequence_parallel};
  rc_.cp = parallel::ContextParallel(&ps_->cp(), ps_->cp_rank(), ps_->cp_size());
  rc_.cp.types = a_.parallel.cp_comms();
  rc_.cp.a2a_level = ps_->cp_level(0);
  rc_.cp.ring_level = ps_->cp_level(1);
  rc_.ep = parallel::ExpertParallel{.ep = &ps_->ep(),
                                    .etp = &ps_->etp(),
                                    .tokens = &ps_->tp_cp(),
                                    .ep_rank = ps_->ep_rank(),
                                    .ep_size = ps_->ep_size(),
                                    .etp_rank = ps_->etp_rank(),
                                    .etp_size = ps_->etp_size()};
  build_model();
  if (a_.grad_scaler) scaler_ = std::make_unique<optim::GradScaler>(*a_.grad_scaler);
  if (a_.mock_data) {
    for (data::Split sp : {data::Split::kTrain, data::Split::kValid, data::Split::kTest}) {
      auto d = std::make_shared<MockData>(a_.seed, a_.model.vocab_size, a_.model.seq_length, sp);
      (sp == data::Split::kTrain   ? datasets_.train
       : sp == data::Split::kValid ? datasets_.valid
                                   : datasets_.test) = d;
    }
  } else {
    // Rank 0 builds (and caches) the dataset indices; the others then load them.
    data::DataConfig dc{.data_path = a_.data_path,
                        .split = a_.split,
                        .seq_length = a_.model.seq_length,
                        .seed = uint32_t(a_.seed),
                        .cache_path = a_.data_cache_path,
                        .write_cache = world_.rank() == 0};
    const data::SampleCounts counts = data::megatron_sample_counts(
        a_.train_iters, a_.parallel.global_batch_size, a_.eval_global_batch_size, a_.eval_interval,
        a_.eval_iters,
        a_.train_samples > 0 ? std::optional<int64_t>(a_.train_samples) : std::nullopt);
    if (world_.rank() == 0) datasets_ = data::build_train_valid_test(dc, counts);
    world_.barrier();
    if (world_.rank() != 0) datasets_ = data::build_train_valid_test(dc, counts);
    MT_CHECK(datasets_.train, "--split ", a_.split, " leaves no training data");
    MT_CHECK(datasets_.train->size() >= counts.train, "the training split has ",
             datasets_.train->size(), " samples, fewer than the ", counts.train, " requested");
  }
  stages_ = std::make_unique<Stages>(*this);
  checkpointer_ =
      std::make_unique<checkpoint::Checkpointer>(a_.checkpoint, checkpoint_run_info(), *ps_);
  checkpointer_->load(checkpoint_view());
  // FSDP: from here on each rank holds its shard of the dense parameters (ZeRO-3) and
  // reduce-scatters their gradients micro-batch by micro-batch (ZeRO-2).
  for (auto& g : grad_syncs_) {
    if (a_.parallel.shard_params()) g->shard_params();
    if (a_.parallel.shard_grads()) g->shard_grads(a_.parallel.overlap_grad_reduce);
  }
  batch_size_ = a_.batches.batch_size_at(consumed_samples_);
  num_microbatches_ = a_.parallel.num_microbatches(batch_size_);
  // The last rank logs, as Megatron's.
  if (world_.rank() == world_.size() - 1)
    log_ = std::make_unique<RunLog>(a_, world_.size(), iteration_ > 0);
}

Trainer::~Trainer() = default;

void Trainer::build_model() {
  const auto& m = a_.model;
  const auto& par = a_.parallel;
  const int64_t P = par.pp(), v = par.vpp();
  // Every chunk's parameters are declared before any buffer is allocated: --ddp-num-buckets
  // divides the rank's total.
  for (int64_t c = 0; c < v; ++c) {
    const int64_t vs = c * P + ps_->pp_rank();  // virtual stage
    const ParallelConfig::StageLayers layers = par.virtual_stage_layers(vs);
    const model::ChunkPlacement place{layers.first_layer, layers.num_layers, vs == 0,
                                      vs == P * v - 1};
    chunks_.push_back(std::make_unique<model::GPTChunk>(m, place, rc_.tp, a_.recompute, rc_.ep));
  }
  int64_t rank_params = 0;
  for (const auto& c : chunks_)
    for (const model::ParamBuffer* b : {&c->params(), &c->expert_params()})
      for (const model::ParamSpec& s : b->specs()) rank_params += s.numel();
  DdpOptions ddp{
      .bucket_elems = ddp_bucket_elems(a_.ddp_bucket_size, a_.ddp_num_buckets, rank_params,
                                       par.overlap_grad_reduce, ps_->dp_cp().size()),
      .grad_reduce_in_bf16 = a_.precision.grad_reduce_in_bf16,
      .decoupled_lr = a_.decoupled_lr.has_value(),
      .unit_buckets = par.fsdp(),
      .discardable = par.shard_grads() && ps_->dp_cp().size() > 1,
      .shard_params = par.shard_params(),
      .muon = nullptr,
      .qkv_rows = {},
      .layer_wise = false,
      .wd_qk_layernorm = a_.apply_wd_to_qk_layernorm};
  if (a_.muon) {
    ddp.muon = &*a_.muon;
    const int64_t D = m.kv_channels, hpg = m.num_attention_heads / m.query_groups();
    ddp.qkv_rows = {hpg * D, D, D};  // Megatron's split shapes: q, k, v rows per query group
    ddp.layer_wise = a_.layer_wise_optimizer;
  }
  std::vector<optim::OptimBuffer> bufs;
  for (auto& chunk : chunks_) {
    bufs.push_back(ddp_buffer(rc_, *ps_, ddp, chunk->params(), false, a_.seed, grad_syncs_));
    // The routed experts: their own buffer, reduced (and sharded) over expert data parallel.
    model::ParamBuffer& x = chunk->expert_params();
    if (!x.specs().empty())
      bufs.push_back(ddp_buffer(rc_, *ps_, ddp, x, true, a_.seed, expert_syncs_));
    // Megatron's line for each of its buffers (the routed experts' after the dense ones').
    if (world_.rank() == 0)
      for (const model::ParamBuffer* b : {&chunk->params(), &x})
        if (!b->specs().empty())
          log_info("Number of buckets for gradient all-reduce / reduce-scatter: {}",
                   b->buckets().size());
  }
  optimizer_ = std::make_unique<optim::Optimizer>(std::move(bufs), a_.adam, rc_.k,
                                                  a_.optimizer_offload_fraction, a_.muon);
  if (a_.fp8.enabled) {
    fp8_ = std::make_unique<model::Fp8State>(a_.fp8, rc_.k);
    for (auto& c : chunks_) {
      fp8_->add_linears(c->params(), m.num_layers, false);
      fp8_->add_linears(c->expert_params(), m.num_layers, true);
    }
    fp8_->finalize();
    rc_.fp8 = fp8_.get();
  }
}

optim::LrSchedule Trainer::lr_schedule() const {
  return schedule_;
}

double Trainer::learning_rate(int64_t samples) const {
  return schedule_.lr_at(samples);
}

std::optional<double> Trainer::decoupled_learning_rate(int64_t samples) const {
  if (!a_.decoupled_lr) return std::nullopt;
  optim::LrSchedule d = schedule_;
  d.lr = *a_.decoupled_lr;
  d.min_lr = *a_.decoupled_min_lr;
  return d.lr_at(samples);
}

checkpoint::TrainView Trainer::checkpoint_view() {
  checkpoint::TrainView v{{},           &iteration_,      &consumed_samples_,
                          &lr_samples_, optimizer_.get(), &schedule_,
                          scaler_.get()};
  // The optimizer's buffers in build_model's order: each chunk's dense parameters, then its
  // experts (MoE).
  size_t i = 0;
  auto add = [&](model::ParamBuffer& p, bool experts) {
    checkpoint::ChunkState c{&p, optimizer_->exp_avg(i), optimizer_->exp_avg_sq(i), {}, experts,
                             {}};
    c.opt_shards = optimizer_->buffers()[i].shards;
    c.params_sharded = !experts && a_.parallel.shard_params();
    if (fp8_) add_fp8_states(c, *fp8_, p, experts);
    v.chunks.push_back(std::move(c));
    ++i;
  };
  for (auto& chunk : chunks_) {
    add(chunk->params(), false);
    if (a_.model.moe_router_enable_expert_bias)
      checkpoint::add_expert_bias_states(v.chunks.back(), *chunk);
    if (!chunk->expert_params().specs().empty()) add(chunk->expert_params(), true);
  }
  return v;
}

checkpoint::RunInfo Trainer::checkpoint_run_info() const {
  const auto& par = a_.parallel;
  checkpoint::RunInfo r;
  r.model = a_.model;
  r.layout = {par.world_size,
              par.tp(),
              par.pp(),
              par.cp(),
              par.ep(),
              par.etp(),
              par.dp(),
              par.vpp(),
              par.sequence_parallel,
              par.use_distributed_optimizer};
  r.precision = a_.precision.compute;
  r.adam = a_.adam;
  r.muon = a_.muon;
  r.lr_schedule = a_.schedule;
  r.seed = a_.seed;
  r.tokenizer = {a_.tokenizer_type, a_.vocab_file, a_.merge_file, a_.tokenizer_model};
  return r;
}

const std::vector<int64_t>& Trainer::loss_tokens(data::Split split, int64_t base) {
  LossTokens& c = loss_tokens_;
  if (c.split != split || c.base != base || c.batch != batch_size_) {
    c = {split, base, batch_size_,
         data::loss_token_counts(*datasets_[split], split, base, batch_size_,
                                 a_.eod_mask_loss ? a_.eod_id : -1, a_.model.mtp_num_layers)};
  }
  return c.counts;
}

model::MicroBatch Trainer::microbatch(data::Split split, int64_t base, int64_t j) {
  const auto& par = a_.parallel;
  // Context parallelism: this rank's two chunks of each sequence (rc_.cp.position).
  const int64_t S = a_.model.seq_length, Sl = S / par.cp();
  std::vector<int64_t> positions(static_cast<size_t>(Sl));
  for (int64_t s = 0; s < Sl; ++s) positions[size_t(s)] = rc_.cp.position(s, Sl);
  data::TokenRows t = data::sample_rows(
      *datasets_[split], split, base, j, par.micro_batch_size, par.dp(), ps_->dp_rank(), positions,
      a_.model.mtp_num_layers, a_.reset_position_ids ? a_.eod_id : -1);
  model::MicroBatch mb{t.B,
                       t.S,
                       std::move(t.tokens),
                       std::move(t.labels),
                       std::move(t.pos),
                       std::move(t.ahead_tokens),
                       std::move(t.ahead_labels),
                       std::move(t.embed_pos)};
  // Dropout masks by (seed, iteration) and the sequences' indices in the global batch.
  mb.drop = {
      .on = true, .seed = uint64_t(a_.seed), .iteration = iteration_, .sample0 = t.first - base};
  // --eod-mask-loss: the tokens whose input is the end-of-document token add nothing, at every
  // MTP depth too (the depth's input token).
  const int64_t D = a_.model.mtp_num_layers, N = mb.B * mb.S;
  if (a_.eod_mask_loss) {
    mb.loss_mask.resize(size_t(N));
    for (int64_t r = 0; r < N; ++r)
      mb.loss_mask[size_t(r)] = float(mb.tokens[size_t(r)] != a_.eod_id);
    mb.mtp_loss_mask.resize(size_t(D * N));
    for (int64_t d = 1; d <= D; ++d) {
      for (int64_t r = 0; r < N; ++r) {
        const size_t at = size_t((d - 1) * N + r);
        mb.mtp_loss_mask[at] = float(mb.pos[size_t(r)] + d < S && mb.mtp_tokens[at] != a_.eod_id);
      }
    }
  }
  // With a loss scaler, the scaled loss's gradient (scale 1 otherwise), over the global batch's
  // tokens whose loss counts (at least 1, as Megatron's clamp).
  const double scale = scaler_ ? double(scaler_->scale()) : 1.0;
  const std::vector<int64_t>& counts = loss_tokens(split, base);
  const auto per_token = [&](int64_t d) {
    return scale / double(std::max<int64_t>(1, counts[size_t(d)]));
  };
  mb.dloss = float(per_token(0));
  for (int64_t d = 1; d <= D; ++d)
    mb.mtp_dloss.push_back(
        float(double(a_.model.mtp_loss_scaling_factor) / double(D) * per_token(d)));
  mb.aux_weight = float(double(t.B) / double(batch_size_) * scale);
  return mb;
}

void Trainer::check_replicas() {
  for (auto* syncs : {&grad_syncs_, &expert_syncs_}) {
    for (auto& g : *syncs) {
      g->wait_all_params();
      g->gather_all_params();  // FSDP: the whole model, until the next shard_params()
    }
  }
  std::vector<std::string> bad;
  for (size_t c = 0; c < chunks_.size(); ++c) {
    const auto add = [&](const std::vector<std::string>& names, const char* group) {
      for (const std::string& n : names)
        bad.push_back(fmt::format("{} in model chunk {} (across {})", n, c, group));
    };
    add(replica_mismatches(rc_.k, chunks_[c]->params(), ps_->dp_cp()), "dp-cp");
    add(replica_mismatches(rc_.k, chunks_[c]->expert_params(), ps_->edp()), "edp");
    if (a_.test_mode) add(replica_mismatches(rc_.k, chunks_[c]->params(), ps_->tp(), true), "tp");
  }
  for (const std::string& b : bad) log_warn("[Rank {}] Hash not matching for {}", world_.rank(), b);
  int64_t n = int64_t(bad.size());
  world_.all_reduce(&n, 1, DType::kI64, ReduceOp::kSum);
  MT_CHECK(n == 0, "Parameter hashes not matching across DP replicas (", n,
           " parameter replicas differ after iteration ", iteration_, ")");
  if (world_.rank() == 0)
    log_plain(fmt::format(">>> Weight hashes match after {} iterations...", iteration_));
  for (auto& g : grad_syncs_)
    if (g->params_sharded()) g->shard_params();
}

double Trainer::evaluate(data::Split split, int64_t iters) {
  const auto& par = a_.parallel;
  MT_CHECK(datasets_[split], "no ", data::split_name(split), " data (see --split)");
  for (auto& g : grad_syncs_) g->wait_all_params();
  // Evaluation batches are --eval-global-batch-size (the next step sets its own size again).
  batch_size_ = a_.eval_global_batch_size;
  num_microbatches_ = par.num_microbatches(batch_size_);
  double loss = 0;
  int64_t tokens = 0;
  int64_t& consumed = consumed_eval_samples_[int(split)];
  for (int64_t it = 0; it < iters; ++it) {
    stages_->begin(false, split, consumed);
    parallel::run_pipeline(*stages_, ps_->pp(), int(par.vpp()), num_microbatches_,
                           par.microbatch_group(), true);
    if (ps_->is_last_pp_stage()) loss += stages_->loss_sum();
    tokens += loss_tokens(split, consumed)[0];
    consumed += batch_size_;
  }
  if (ps_->dp_cp().size() > 1) loss = ps_->dp_cp().all_reduce_sum(loss);
  if (ps_->pp().size() > 1) loss = ps_->pp().all_reduce_sum(loss);
  return loss / double(std::max<int64_t>(1, tokens));
}

StepResult Trainer::step() {
  const auto& par = a_.parallel;
  StepResult r;
  r.lr = learning_rate(lr_samples_);
  batch_size_ = a_.batches.batch_size_at(consumed_samples_);
  num_microbatches_ = par.num_microbatches(batch_size_);
  for (size_t c = 0; c < chunks_.size(); ++c) {
    grad_syncs_[c]->zero_grad();
    if (!chunks_[c]->expert_params().specs().empty()) chunks_[c]->expert_params().zero_grad();
  }

  stages_->begin(true, data::Split::kTrain, consumed_samples_);
  if (fp8_) fp8_->set_recording(true);
  const parallel::PipelineTimes pt = parallel::run_pipeline(
      *stages_, ps_->pp(), int(par.vpp()), num_microbatches_, par.microbatch_group());
  if (fp8_) {
    fp8_->set_recording(false);
    if (a_.fp8.recipe == model::Fp8Recipe::kDelayed) update_fp8_scales(*fp8_, *ps_);
  }
  if (profile_enabled()) {
    pipeline_compute_s_ += pt.compute_s;
    pipeline_wait_s_ += pt.wait_s;
  }
  finalize_model_grads(rc_, *ps_, chunks_, grad_syncs_, expert_syncs_);

  if (scaler_) optimizer_->scale_grads(scaler_->inv_scale());
  r.grad_norm = optimizer_->grad_norm(world_);
  if (scaler_) {
    scaler_->update(!std::isfinite(r.grad_norm));
    r.loss_scale = double(scaler_->scale());
  }
  r.skipped = !optimizer_->step(r.lr, r.grad_norm, decoupled_learning_rate(lr_samples_));
  if (!r.skipped) lr_samples_ += batch_size_;
  // Every rank updated its shards of the master weights: gather the whole model back (in the
  // background with --overlap-param-gather: the next forward waits bucket by bucket).
  // FSDP (ZeRO-3): each rank keeps its updated shard, the next pass gathers layer by layer.
  for (auto& g : grad_syncs_)
    par.shard_params() ? g->shard_params() : g->gather_params(par.overlap_param_gather);
  for (auto& g : expert_syncs_) g->gather_params(false);
  if (a_.model.is_moe()) moe_stats(r);
  if (a_.model.moe_router_enable_expert_bias) {
    // As Megatron, whether or not the step was skipped; one rank per stage adds its share.
    const double h = update_expert_bias(chunks_, *ps_, a_.model.moe_router_bias_update_rate);
    r.expert_bias_hash = world_.all_reduce_sum(ps_->group(GroupKind::kTPDPCP).rank() == 0 ? h : 0);
  }

  // The loss lives on the last stage; sum it over DP x CP and share it along the pipeline.
  double loss = ps_->is_last_pp_stage() ? stages_->loss_sum() : 0.0;
  loss = ps_->dp_cp().size() > 1 ? ps_->dp_cp().all_reduce_sum(loss) : loss;
  loss = ps_->pp().size() > 1 ? ps_->pp().all_reduce_sum(loss) : loss;
  const std::vector<int64_t>& tokens = loss_tokens(data::Split::kTrain, consumed_samples_);
  r.lm_loss = loss / double(std::max<int64_t>(1, tokens[0]));
  // The MTP losses likewise (the last stage's sums; zeros elsewhere).
  r.mtp_losses = stages_->mtp_loss_sum();
  if (!r.mtp_losses.empty()) {
    for (auto* g : {&ps_->dp_cp(), &ps_->pp()})
      if (g->size() > 1)
        g->all_reduce(r.mtp_losses.data(), int64_t(r.mtp_losses.size()), DType::kF64,
                      ReduceOp::kSum);
    for (size_t k = 0; k < r.mtp_losses.size(); ++k)
      r.mtp_losses[k] /= double(std::max<int64_t>(1, tokens[k + 1]));
  }
  consumed_samples_ += batch_size_;
  ++iteration_;
  return r;
}

std::vector<std::pair<std::string, double>> Trainer::aux_losses(
    double lb, double z, const std::vector<double>& mtp) const {
  // Megatron's names: the balancing loss of the configured type, the z-loss when weighted, then
  // each MTP depth's loss.
  const auto& mc = a_.model;
  std::vector<std::pair<std::string, double>> v;
  if (mc.moe_aux_loss_coeff > 0 &&
      mc.moe_router_load_balancing_type != RouterLoadBalancing::kNone) {
    const bool seq = mc.moe_router_load_balancing_type == RouterLoadBalancing::kSeqAuxLoss;
    v.emplace_back(seq ? "seq_load_balancing_loss" : "load_balancing_loss", lb);
  }
  if (mc.moe_z_loss_coeff > 0) v.emplace_back("z_loss", z);
  for (size_t k = 0; k < mtp.size(); ++k) v.emplace_back(fmt::format("mtp_{} loss", k + 1), mtp[k]);
  return v;
}

void Trainer::moe_stats(StepResult& r) const {
  const model::MoEStats& m = stages_->moe();
  double v[5] = {m.load_balancing, m.z_loss, m.dropped, m.routed_hash, m.dropped_hash};
  if (world_.size() > 1) world_.all_reduce(v, 5, DType::kF64, ReduceOp::kSum);
  // Shares summed over the world: over TP x CP they make each micro-batch's value; then
  // Megatron's mean over micro-batches (of every DP rank) and MoE layers, the MTP depths' too.
  const auto& par = a_.parallel;
  const double n = double(par.dp() * num_microbatches_ *
                          (a_.model.num_moe_layers() + a_.model.num_mtp_moe_layers()));
  r.load_balancing_loss = v[0] / n;
  r.z_loss = v[1] / n;
  r.moe = model::MoEStats{v[0], v[1], v[2], v[3], v[4]};
}

void Trainer::run() {
  const auto& par = a_.parallel;
  const bool logger = world_.rank() == world_.size() - 1;
  // MFU's denominator: the hardware catalog's peak for one rank (one piece of code with the
  // planner), at the precision the GEMMs run in: this node's share of its CPU, or the GPU's
  // catalog entry (found by its CUDA device name; MFU is 0 for a GPU the catalog lacks).
  const Precision gemm_precision = a_.precision.compute;
  const bool cuda = a_.device == Device::kCUDA;
  const std::string gpu = cuda ? kernels::device_properties(Device::kCUDA).name : "";
  const Hardware* gpu_entry = cuda ? find_hardware_by_device_name(gpu) : nullptr;
  const Hardware device = cuda ? (gpu_entry ? *gpu_entry : Hardware{})
                               : rank_device(detect_local_cpu(), ranks_per_node_);
  const double peak = device.mfu_peak_flops(gemm_precision);
  RunHeader header;
  header.mfu_against = peak > 0 ? device.peak_description(gemm_precision)
                                : "nothing: no hardware catalog entry for this GPU";
  header.where = cuda ? fmt::format("one GPU per rank, {}", gpu)
                      : fmt::format("{} threads per rank", omp_get_max_threads());
  header.optimizer_state_bytes = optimizer_->state_bytes();
  header.optimizer_host_state_bytes = optimizer_->host_state_bytes();
  if (fp8_) {
    header.fp8_layers = fp8_->size();
    header.fp8_state_bytes = fp8_->state_bytes();
  }
  for (const auto& c : chunks_) {
    for (const model::ParamSpec& s : c->expert_params().specs()) header.expert_elems += s.numel();
    for (const model::ParamSpec& s : c->params().specs()) header.params_on_rank += s.numel();
  }
  header.params_on_rank += header.expert_elems;
  header.tp_rank = ps_->tp_rank();
  header.pp_rank = ps_->pp_rank();
  header.first_of_dp_cp = ps_->dp_rank() == 0 && ps_->cp_rank() == 0;
  log_run_header(a_, world_.rank(), logger, header);

  Interval in;
  double profiled_time = 0;
  int64_t profiled_iters = 0;
  ProfileStart profile_at_start;
  bool exiting = false;
  while (iteration_ < a_.train_iters) {
    // The first iteration warms caches and allocators; profile the rest.
    profile_enable(a_.profile && iteration_ >= 1);
    if (profile_enabled() && profiled_iters++ == 0)
      profile_at_start = profile_start(*ps_, world_, a_.device);
    const double t0 = now_seconds();
    const StepResult r = step();
    const double dt = now_seconds() - t0;
    if (profile_enabled()) profiled_time += dt;
    in.add(r, dt, flops_per_iteration(a_.model, batch_size_, a_.model.padded_vocab_size(par.tp())),
           batch_size_);
    if (logger) {
      log_->step({iteration_, consumed_samples_, batch_size_, learning_rate(lr_samples_),
                  decoupled_learning_rate(lr_samples_), r.lm_loss, r.loss_scale,
                  r.logged_grad_norm(scaler_ != nullptr),
                  aux_losses(r.load_balancing_loss, r.z_loss, r.mtp_losses)});
    }
    if (iteration_ % a_.log_interval == 0 || iteration_ == a_.train_iters) {
      IterationLog l;
      l.iteration = iteration_;
      l.train_iters = a_.train_iters;
      l.consumed_samples = consumed_samples_;
      l.global_batch_size = batch_size_;
      l.learning_rate = learning_rate(lr_samples_);
      l.decoupled_learning_rate = decoupled_learning_rate(lr_samples_);
      in.report(l, r, scaler_ != nullptr, world_.size(), peak, a_.model);
      // CPU: the process's peak RSS; CUDA: the peak of the device memory tensors held.
      l.peak_memory_mb =
          double(cuda ? kernels::device_memory(Device::kCUDA).max_allocated : process_peak_rss()) /
          1048576.0;
      std::vector<double> mtp = in.mtp;
      for (double& v : mtp) v /= double(in.iters);
      l.aux_losses = aux_losses(in.load_balancing / double(in.iters), in.z / double(in.iters), mtp);
      if (logger) log_->interval(l);
      // Megatron's memory report, once, after the first logged iterations.
      if (cuda && iteration_ == a_.log_interval && (world_.rank() == 0 || logger)) {
        log_plain(
            format_memory_report(world_.rank(), iteration_, kernels::device_memory(Device::kCUDA)));
      }
      in = Interval{};
    }
    const int64_t hash_every = a_.test_mode ? 1 : a_.check_weight_hash_interval;
    if (hash_every > 0 && iteration_ % hash_every == 0) check_replicas();
    if (a_.eval_iters > 0 && datasets_.valid && iteration_ % a_.eval_interval == 0) {
      const bool was = profile_enabled();
      profile_enable(false);
      const double loss = evaluate(data::Split::kValid, a_.eval_iters);
      profile_enable(was);
      if (logger)
        log_->validation("iteration " + std::to_string(iteration_), iteration_, consumed_samples_,
                         loss);
    }
    // Saves when due; stops on --exit-* conditions (having saved), as Megatron, without the
    // final evaluation.
    if (checkpointer_->after_iteration(checkpoint_view())) {
      exiting = true;
      break;
    }
  }
  // As Megatron: once more at the end (unless this iteration was just checked).
  if (a_.check_weight_hash_interval > 0 && !a_.test_mode &&
      iteration_ % a_.check_weight_hash_interval != 0)
    check_replicas();
  checkpointer_->at_end(checkpoint_view());  // the final save (none if this iteration is saved)
  profile_enable(false);
  if (a_.profile && profiled_iters > 0) {
    log_profile(*ps_, world_, iteration_,
                {profiled_time, profiled_iters, pipeline_compute_s_, pipeline_wait_s_, a_.device},
                profile_at_start);
  }
  if (exiting) return;
  // As Megatron: a last evaluation on the validation and test splits.
  for (data::Split sp : {data::Split::kValid, data::Split::kTest}) {
    if (a_.eval_iters == 0 || !datasets_[sp]) continue;
    const double loss = evaluate(sp, a_.eval_iters);
    if (!logger) continue;
    if (sp == data::Split::kValid) {
      log_->validation("the end of training for val data", iteration_, consumed_samples_, loss);
    } else {
      log_plain(format_eval_block("the end of training for test data", loss));
    }
  }
}

}  // namespace mtron::train
