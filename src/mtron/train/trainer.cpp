#include "mtron/train/trainer.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "mtron/comm/nccl.h"
#include "mtron/core/formulas.h"
#include "mtron/core/hardware.h"
#include "mtron/core/log.h"
#include "mtron/core/memory.h"
#include "mtron/core/profile.h"
#include "mtron/core/timer.h"
#include "mtron/core/version.h"
#include "mtron/kernels/cpu_isa.h"
#include "mtron/kernels/device.h"
#include "mtron/kernels/elementwise.h"
#include "mtron/parallel/rank_map.h"
#include "mtron/parallel/schedule.h"
#include "mtron/train/mock_data.h"

namespace mtron::train {

namespace {

// The global gradient norm sums over the world, so each replica is counted on one rank only:
// TP-replicated parameters on TP rank 0, the last stage's tied embedding copy not at all (the
// first stage counts it), and, unless the distributed optimizer shards them, parameters on
// replica 0 of their data-parallel group (DP x CP; EDP for the routed experts). With
// --decoupled-lr the word embeddings and the output layer (both copies when tied across stages)
// take the decoupled learning rate, as Megatron's is_embedding_or_output_parameter.
std::vector<optim::OptimRange> optim_ranges(const model::ParamBuffer& p,
                                            const ParallelState& ps,
                                            bool experts,
                                            bool decoupled) {
  const bool sharded = ps.config().use_distributed_optimizer;
  const bool dp_first = experts ? ps.edp_rank() == 0 : ps.dp_rank() == 0 && ps.cp_rank() == 0;
  std::vector<optim::OptimRange> r;
  for (const model::ParamSpec& s : p.specs()) {
    const bool tp_first = experts ? (!s.tp_replicated() || ps.etp_rank() == 0)
                                  : (!s.tp_replicated() || ps.tp_rank() == 0);
    const bool counted = !s.tied_copy && tp_first && (sharded || dp_first);
    const bool embedding_or_output =
        s.name == "embedding.word_embeddings.weight" || s.name == "output_layer.weight";
    r.push_back({s.offset, s.offset + s.numel(), s.weight_decay, counted,
                 decoupled && embedding_or_output});
  }
  return r;
}

}  // namespace

// The schedule's view of this rank's chunks: one stash per (chunk, micro-batch) in flight,
// taken from a pool so steady-state steps reuse their arenas.
class Trainer::Stages : public parallel::StageModel {
 public:
  explicit Stages(Trainer& t) : t_(t) {}

  // A step over the global batch at sample `base` of `split` (train: forward and backward).
  void begin(bool train, data::Split split, int64_t base) {
    train_ = train;
    split_ = split;
    base_ = base;
    loss_sum_ = 0;
    moe_ = model::MoEStats{};
    mbs_.clear();
  }
  double loss_sum() const { return loss_sum_; }
  const model::MoEStats& moe() const { return moe_; }

  const float* forward(int chunk, int64_t m, const float* input) override {
    release_pending();
    model::GPTChunk::Stash& st = acquire({chunk, m});
    model::GPTChunk& c = *t_.chunks_[size_t(chunk)];
    // --overlap-param-gather: the parameter all-gathers of the last step are still in flight.
    model::GPTChunk::ParamsNeeded need;
    GradSync* sync = t_.grad_syncs_[size_t(chunk)].get();
    if (sync->params_pending())
      need = [sync](int64_t lo, int64_t hi) { sync->wait_params(lo, hi); };
    const float* out = c.forward(t_.rc_, mb(m), st, input, train_, need);
    if (c.placement().has_head) loss_sum_ += st.loss_sum;
    moe_.add(st.moe);
    if (!train_) pending_ = {chunk, m};
    return out;
  }

  const float* backward(int chunk, int64_t m, const float* dout) override {
    release_pending();
    model::GPTChunk::Stash& st = *in_use_.at({chunk, m});
    // The last micro-batch's backward completes each gradient: start reducing buckets then.
    model::GPTChunk::GradsReady ready;
    if (t_.a_.parallel.overlap_grad_reduce && m == t_.num_microbatches_ - 1) {
      GradSync* sync = t_.grad_syncs_[size_t(chunk)].get();
      ready = [sync](int64_t offset) { sync->ready(offset); };
    }
    const float* d = t_.chunks_[size_t(chunk)]->backward(t_.rc_, mb(m), st, dout, ready);
    pending_ = {chunk, m};  // the schedule copies d before the next call
    return d;
  }

  int64_t message_elems() const override {
    const int64_t N =
        t_.a_.parallel.micro_batch_size * t_.a_.model.seq_length / t_.a_.parallel.cp();
    return t_.rc_.tp.sp_rows(N) * t_.a_.model.hidden_size;
  }
  kernels::Ctx ctx() const override { return t_.rc_.k; }

 private:
  using Key = std::pair<int, int64_t>;

  const model::MicroBatch& mb(int64_t m) {
    auto it = mbs_.find(m);
    if (it == mbs_.end()) it = mbs_.emplace(m, t_.microbatch(split_, base_, m)).first;
    return it->second;
  }
  model::GPTChunk::Stash& acquire(Key k) {
    std::unique_ptr<model::GPTChunk::Stash> s;
    if (free_.empty()) {
      s = std::make_unique<model::GPTChunk::Stash>();
    } else {
      s = std::move(free_.back());
      free_.pop_back();
    }
    auto& ref = *s;
    in_use_[k] = std::move(s);
    return ref;
  }
  void release_pending() {
    if (pending_.first < 0) return;
    auto it = in_use_.find(pending_);
    free_.push_back(std::move(it->second));
    in_use_.erase(it);
    pending_ = {-1, -1};
  }

  Trainer& t_;
  bool train_ = true;
  data::Split split_ = data::Split::kTrain;
  int64_t base_ = 0;
  double loss_sum_ = 0;
  model::MoEStats moe_;  // this rank's share, over the step's micro-batches
  std::map<int64_t, model::MicroBatch> mbs_;
  std::map<Key, std::unique_ptr<model::GPTChunk::Stash>> in_use_;
  std::vector<std::unique_ptr<model::GPTChunk::Stash>> free_;
  Key pending_{-1, -1};
};

Trainer::Trainer(const TrainArgs& args, Comm& world, int ranks_per_node)
    : a_(args), world_(world), ranks_per_node_(ranks_per_node), schedule_(args.schedule) {
  MT_CHECK(world_.size() == a_.parallel.world_size, "internal: world size mismatch");
  rc_.k.device = a_.device;
  Comm* groups_from = &world_;
  if (a_.device == Device::kCUDA) {
    // One GPU per rank: the node-local rank's (ranks are placed by node, in blocks).
    const int gpus = kernels::device_count(Device::kCUDA);
    MT_CHECK(gpus > 0, "--device cuda: ", kernels::device_unavailable(Device::kCUDA));
    const int local_rank = world_.rank() % std::max(1, ranks_per_node_);
    MT_CHECK(local_rank < gpus, "--device cuda: ", ranks_per_node_, " ranks on this node but ",
             gpus, " GPU(s) visible (one rank per GPU)");
    kernels::init_device(Device::kCUDA, local_rank);
    // The parallel groups communicate device buffers: NCCL, bootstrapped over the world. The
    // world itself (host scalars: the loss, the gradient norm) stays on the launcher's Comm.
    if (world_.size() > 1) {
      device_world_ = make_nccl_comm(world_, rc_.k.stream);
      groups_from = device_world_.get();
    }
  }
  ps_ = std::make_unique<ParallelState>(a_.parallel, *groups_from);
  rc_.precision = a_.precision.compute;
  rc_.tp = parallel::TensorParallel{&ps_->tp(), ps_->tp_rank(), ps_->tp_size(),
                                    a_.parallel.sequence_parallel};
  rc_.cp = parallel::ContextParallel{&ps_->cp(), ps_->cp_rank(), ps_->cp_size()};
  rc_.ep = parallel::ExpertParallel{.ep = &ps_->ep(),
                                    .etp = &ps_->etp(),
                                    .tokens = &ps_->tp_cp(),
                                    .ep_rank = ps_->ep_rank(),
                                    .ep_size = ps_->ep_size(),
                                    .etp_rank = ps_->etp_rank(),
                                    .etp_size = ps_->etp_size()};
  build_model();
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
        a_.train_iters, a_.parallel.global_batch_size, a_.eval_interval, a_.eval_iters,
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
  batch_size_ = a_.batches.batch_size_at(consumed_samples_);
  num_microbatches_ = batch_size_ / (a_.parallel.micro_batch_size * a_.parallel.dp());
  // The last rank logs, as Megatron's.
  if (world_.rank() == world_.size() - 1)
    log_ = std::make_unique<RunLog>(a_, world_.size(), iteration_ > 0);
}

Trainer::~Trainer() = default;

void Trainer::build_model() {
  const auto& m = a_.model;
  const auto& par = a_.parallel;
  const int64_t P = par.pp(), v = par.vpp();
  const int64_t per_chunk = m.num_layers / (P * v);
  Comm& dp = ps_->dp_cp();
  // Megatron's DDP buckets: one per chunk, or max(40M, 1M x DP) elements when overlapping.
  const int64_t bucket = a_.ddp_bucket_size > 0 ? a_.ddp_bucket_size
                         : par.overlap_grad_reduce
                             ? std::max<int64_t>(40000000, 1000000 * dp.size())
                             : 0;
  std::vector<optim::OptimBuffer> bufs;
  for (int64_t c = 0; c < v; ++c) {
    const int64_t vs = c * P + ps_->pp_rank();  // virtual stage
    model::ChunkPlacement place{vs * per_chunk, per_chunk, vs == 0, vs == P * v - 1};
    chunks_.push_back(std::make_unique<model::GPTChunk>(m, place, rc_.tp, a_.recompute, rc_.ep));
    model::ParamBuffer& p = chunks_.back()->params();
    p.allocate(rc_.precision, par.use_distributed_optimizer ? dp.size() : 1, bucket, rc_.k);
    p.init(a_.seed);
    grad_syncs_.push_back(std::make_unique<GradSync>(p, dp, par.use_distributed_optimizer,
                                                     a_.precision.grad_reduce_in_bf16));
    optim::OptimBuffer b{
        .master = p.master_flat().f32(),
        .grad = p.grad_flat().f32(),
        .compute = rc_.precision == Precision::kBF16 ? p.bf16_flat().bf() : nullptr,
        .size = p.size(),
        .ranges = optim_ranges(p, *ps_, false, a_.decoupled_lr.has_value()),
        .shards = {}};
    for (const auto& [lo, hi] : grad_syncs_.back()->shards()) b.shards.push_back({lo, hi});
    bufs.push_back(std::move(b));

    // The routed experts: their own buffer, reduced (and sharded) over expert data parallel.
    model::ParamBuffer& x = chunks_.back()->expert_params();
    if (x.specs().empty()) continue;
    Comm& edp = ps_->edp();
    x.allocate(rc_.precision, par.use_distributed_optimizer ? edp.size() : 1, bucket, rc_.k);
    x.init(a_.seed);
    expert_syncs_.push_back(std::make_unique<GradSync>(x, edp, par.use_distributed_optimizer,
                                                       a_.precision.grad_reduce_in_bf16));
    optim::OptimBuffer xb{
        .master = x.master_flat().f32(),
        .grad = x.grad_flat().f32(),
        .compute = rc_.precision == Precision::kBF16 ? x.bf16_flat().bf() : nullptr,
        .size = x.size(),
        .ranges = optim_ranges(x, *ps_, true, false),
        .shards = {}};
    for (const auto& [lo, hi] : expert_syncs_.back()->shards()) xb.shards.push_back({lo, hi});
    bufs.push_back(std::move(xb));
  }
  optimizer_ = std::make_unique<optim::AdamW>(std::move(bufs), a_.adam, rc_.k);
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
  checkpoint::TrainView v{{}, &iteration_, &consumed_samples_, optimizer_.get(), &schedule_};
  // The optimizer's buffers in build_model's order: each chunk's dense parameters, then its
  // experts (MoE).
  size_t i = 0;
  auto add = [&](model::ParamBuffer& p, bool experts) {
    checkpoint::ChunkState c{
        &p, optimizer_->exp_avg(i).f32(), optimizer_->exp_avg_sq(i).f32(), {}, experts};
    for (const auto& s : optimizer_->buffers()[i].shards) c.opt_shards.push_back({s.begin, s.end});
    v.chunks.push_back(std::move(c));
    ++i;
  };
  for (auto& chunk : chunks_) {
    add(chunk->params(), false);
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
  r.lr_schedule = a_.schedule;
  r.seed = a_.seed;
  r.tokenizer = {a_.tokenizer_type, a_.vocab_file, a_.merge_file, a_.tokenizer_model};
  return r;
}

model::MicroBatch Trainer::microbatch(data::Split split, int64_t base, int64_t j) const {
  const auto& par = a_.parallel;
  const int64_t B = par.micro_batch_size, S = a_.model.seq_length;
  const data::SampleDataset& ds = *datasets_[split];
  // Megatron's sampler: DP rank r takes [r*B, (r+1)*B) of each B*DP block of samples.
  const int64_t first = base + j * B * par.dp() + ps_->dp_rank() * B;
  // Context parallelism: this rank's two chunks of each sequence (rc_.cp.position).
  const int64_t Sl = S / par.cp();
  model::MicroBatch mb;
  mb.B = B;
  mb.S = Sl;
  mb.tokens.resize(size_t(Sl * B));
  mb.labels.resize(size_t(Sl * B));
  mb.pos.resize(size_t(Sl * B));
  std::vector<int32_t> sample(size_t(S + 1));
  for (int64_t b = 0; b < B; ++b) {
    MT_CHECK(first + b < ds.size(), "the ", data::split_name(split), " split has ", ds.size(),
             " samples; sample ", first + b, " was asked for");
    ds.get(first + b, sample.data());
    for (int64_t s = 0; s < Sl; ++s) {
      const int64_t g = rc_.cp.position(s, Sl);
      mb.tokens[size_t(s * B + b)] = sample[size_t(g)];
      mb.labels[size_t(s * B + b)] = sample[size_t(g + 1)];
      mb.pos[size_t(s * B + b)] = int32_t(g);
    }
  }
  mb.dloss = float(1.0 / double(batch_size_ * S));
  mb.aux_weight = float(double(B) / double(batch_size_));
  return mb;
}

double Trainer::evaluate(data::Split split, int64_t iters) {
  const auto& par = a_.parallel;
  MT_CHECK(datasets_[split], "no ", data::split_name(split), " data (see --split)");
  for (auto& g : grad_syncs_) g->wait_all_params();
  // Evaluation batches are --global-batch-size (the next step sets its own size again).
  batch_size_ = par.global_batch_size;
  num_microbatches_ = par.num_microbatches();
  double loss = 0;
  int64_t& consumed = consumed_eval_samples_[int(split)];
  for (int64_t it = 0; it < iters; ++it) {
    stages_->begin(false, split, consumed);
    parallel::run_pipeline(*stages_, ps_->pp(), int(par.vpp()), par.num_microbatches(), true);
    if (ps_->is_last_pp_stage()) loss += stages_->loss_sum();
    consumed += par.global_batch_size;
  }
  if (ps_->dp_cp().size() > 1) loss = ps_->dp_cp().all_reduce_sum(loss);
  if (ps_->pp().size() > 1) loss = ps_->pp().all_reduce_sum(loss);
  return loss / double(std::max<int64_t>(1, iters) * par.global_batch_size * a_.model.seq_length);
}

void Trainer::finalize_grads() {
  // Tied embeddings on different stages: both copies get the summed gradient, before the
  // data-parallel reduction (the two stages' buffers are laid out differently).
  if (ps_->in_embedding_group()) {
    for (auto& c : chunks_) {
      model::ParamBuffer& p = c->params();
      for (size_t i = 0; i < p.specs().size(); ++i) {
        if (p.spec(int(i)).cross_stage)
          ps_->embedding().all_reduce(p.grad(int(i)), p.spec(int(i)).numel());
      }
    }
  }
  for (auto& g : grad_syncs_) g->finish();
  for (auto& g : expert_syncs_) g->finish();
  // Sequence-parallel parameters (norms, row-parallel biases) saw only this rank's rows. With
  // the distributed optimizer only the shard part of the sum is used; TP ranks share the layout.
  if (rc_.tp.sequence_parallel) {
    for (auto& c : chunks_) {
      model::ParamBuffer& p = c->params();
      int64_t total = 0;
      for (const model::ParamSpec& s : p.specs()) total += s.sequence_parallel ? s.numel() : 0;
      const Tensor packed = Tensor::empty({total}, DType::kF32, rc_.k.device);
      // Packs (to_packed) or unpacks the sequence-parallel gradients.
      auto move = [&](bool to_packed) {
        int64_t at = 0;
        for (size_t i = 0; i < p.specs().size(); ++i) {
          const model::ParamSpec& s = p.spec(int(i));
          if (!s.sequence_parallel) continue;
          float* g = p.grad(int(i));
          float* q = packed.f32() + at;
          kernels::copy(rc_.k, to_packed ? q : g, to_packed ? g : q,
                        int64_t(sizeof(float)) * s.numel());
          at += s.numel();
        }
      };
      move(true);
      ps_->tp().all_reduce(packed.f32(), total);
      move(false);
    }
  }
}

StepResult Trainer::step() {
  const auto& par = a_.parallel;
  StepResult r;
  r.lr = learning_rate(consumed_samples_);
  batch_size_ = a_.batches.batch_size_at(consumed_samples_);
  num_microbatches_ = batch_size_ / (par.micro_batch_size * par.dp());
  for (auto& c : chunks_) {
    c->params().zero_grad();
    if (!c->expert_params().specs().empty()) c->expert_params().zero_grad();
  }

  stages_->begin(true, data::Split::kTrain, consumed_samples_);
  const parallel::PipelineTimes pt =
      parallel::run_pipeline(*stages_, ps_->pp(), int(par.vpp()), num_microbatches_);
  if (profile_enabled()) {
    pipeline_compute_s_ += pt.compute_s;
    pipeline_wait_s_ += pt.wait_s;
  }
  finalize_grads();

  r.grad_norm = optimizer_->grad_norm(world_);
  r.skipped = !optimizer_->step(r.lr, r.grad_norm, decoupled_learning_rate(consumed_samples_));
  // Every rank updated its shards of the master weights: gather the whole model back (in the
  // background with --overlap-param-gather: the next forward waits bucket by bucket).
  for (auto& g : grad_syncs_) g->gather_params(par.overlap_param_gather);
  for (auto& g : expert_syncs_) g->gather_params(false);
  if (a_.model.is_moe()) moe_stats(r);

  // The loss lives on the last stage; sum it over DP x CP and share it along the pipeline.
  double loss = ps_->is_last_pp_stage() ? stages_->loss_sum() : 0.0;
  loss = ps_->dp_cp().size() > 1 ? ps_->dp_cp().all_reduce_sum(loss) : loss;
  loss = ps_->pp().size() > 1 ? ps_->pp().all_reduce_sum(loss) : loss;
  r.lm_loss = loss / double(batch_size_ * a_.model.seq_length);
  consumed_samples_ += batch_size_;
  ++iteration_;
  return r;
}

std::vector<std::pair<std::string, double>> Trainer::moe_losses(double lb, double z) const {
  // Megatron's names: the balancing loss of the configured type, the z-loss when weighted.
  const auto& mc = a_.model;
  std::vector<std::pair<std::string, double>> v;
  if (mc.moe_aux_loss_coeff > 0 &&
      mc.moe_router_load_balancing_type != RouterLoadBalancing::kNone) {
    const bool seq = mc.moe_router_load_balancing_type == RouterLoadBalancing::kSeqAuxLoss;
    v.emplace_back(seq ? "seq_load_balancing_loss" : "load_balancing_loss", lb);
  }
  if (mc.moe_z_loss_coeff > 0) v.emplace_back("z_loss", z);
  return v;
}

void Trainer::moe_stats(StepResult& r) const {
  const model::MoEStats& m = stages_->moe();
  double v[5] = {m.load_balancing, m.z_loss, m.dropped, m.routed_hash, m.dropped_hash};
  if (world_.size() > 1) world_.all_reduce(v, 5, DType::kF64, ReduceOp::kSum);
  // Shares summed over the world: over TP x CP they make each micro-batch's value; then
  // Megatron's mean over micro-batches (of every DP rank) and MoE layers.
  const auto& par = a_.parallel;
  const double n = double(par.dp() * num_microbatches_ * a_.model.num_moe_layers());
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
  if (world_.rank() == 0) {
    log_info("mtron {}: {}", mtron_version(), kernels::cpu_summary());
    log_info("model: {}", a_.model.summary());
    log_info("layout: {}", par.summary());
    if (a_.batches.varies()) log_info("global batch size: {}", a_.batches.describe());
    log_info("parameters: {:.2f} M (padded vocab {})",
             double(a_.model.num_parameters(par.tp())) / 1e6, a_.model.padded_vocab_size(par.tp()));
    const std::string where = cuda ? fmt::format("one GPU per rank, {}", gpu)
                                   : fmt::format("{} threads per rank", omp_get_max_threads());
    log_info("precision: {}; MFU against {} ({})",
             a_.precision.compute == Precision::kBF16 ? "bf16 (fp32 master weights and gradients)"
                                                      : "fp32",
             peak > 0 ? device.peak_description(gemm_precision)
                      : "nothing: no hardware catalog entry for this GPU",
             where);
    log_info("{}", format_theoretical_memory(
                       megatron_theoretical_memory(a_.model, par, a_.recompute.granularity)));
    for (const auto& n : a_.notes) log_info("note: {}", n);
  }
  if (world_.rank() == 0 || logger) {
    log_info("optimizer state: {:.3f} MB ({} bytes) on this rank{}",
             double(optimizer_->state_bytes()) / 1048576.0, optimizer_->state_bytes(),
             par.use_distributed_optimizer ? " (distributed optimizer shard)" : "");
  }
  if (a_.model.is_moe() && (world_.rank() == 0 || logger)) {
    int64_t n = 0;
    for (const auto& c : chunks_)
      for (const model::ParamSpec& s : c->expert_params().specs()) n += s.numel();
    log_info(
        "expert weights on this rank: {} bytes fp32 ({} of {} experts per MoE layer, 1/{} of "
        "each by expert tensor parallelism)",
        n * int64_t(sizeof(float)), a_.model.num_experts / par.ep(), a_.model.num_experts,
        par.etp());
  }

  double interval_loss = 0, interval_time = 0, interval_flops = 0, profiled_time = 0;
  double interval_lb = 0, interval_z = 0;
  model::MoEStats interval_moe;
  int64_t interval_iters = 0, interval_samples = 0, skipped = 0, nans = 0, profiled_iters = 0;
  std::vector<int64_t> bytes_at_start;
  bool exiting = false;
  while (iteration_ < a_.train_iters) {
    // The first iteration warms caches and allocators; profile the rest.
    profile_enable(a_.profile && iteration_ >= 1);
    if (profile_enabled() && profiled_iters++ == 0) bytes_at_start = comm_bytes();
    const double t0 = now_seconds();
    const StepResult r = step();
    const double dt = now_seconds() - t0;
    if (profile_enabled()) profiled_time += dt;
    interval_loss += r.lm_loss;
    interval_lb += r.load_balancing_loss;
    interval_z += r.z_loss;
    interval_moe.add(r.moe);
    interval_time += dt;
    interval_flops +=
        flops_per_iteration(a_.model, batch_size_, a_.model.padded_vocab_size(par.tp()));
    interval_samples += batch_size_;
    ++interval_iters;
    skipped += r.skipped;
    nans += !std::isfinite(r.grad_norm);
    if (logger) {
      log_->step({iteration_, consumed_samples_, batch_size_, learning_rate(consumed_samples_),
                  decoupled_learning_rate(consumed_samples_), r.lm_loss, 1.0, r.grad_norm,
                  moe_losses(r.load_balancing_loss, r.z_loss)});
    }
    if (iteration_ % a_.log_interval == 0 || iteration_ == a_.train_iters) {
      IterationLog l;
      l.iteration = iteration_;
      l.train_iters = a_.train_iters;
      l.consumed_samples = consumed_samples_;
      l.global_batch_size = batch_size_;
      const double per_iter = interval_time / double(interval_iters);
      const double flops = interval_flops / double(interval_iters);
      l.elapsed_ms = 1e3 * per_iter;
      l.tflops_per_device = flops / (per_iter * 1e12 * double(world_.size()));
      l.learning_rate = learning_rate(consumed_samples_);
      l.decoupled_learning_rate = decoupled_learning_rate(consumed_samples_);
      l.lm_loss = interval_loss / double(interval_iters);
      l.grad_norm = r.grad_norm;
      l.skipped_iterations = skipped;
      l.nan_iterations = nans;
      l.tokens_per_s_per_device =
          double(interval_samples * a_.model.seq_length) / interval_time / double(world_.size());
      l.mfu = peak > 0 ? flops / per_iter / double(world_.size()) / peak : 0.0;
      // CPU: the process's peak RSS; CUDA: the peak of the device memory tensors held.
      l.peak_memory_mb =
          double(cuda ? kernels::device_memory(Device::kCUDA).max_allocated : process_peak_rss()) /
          1048576.0;
      const auto& mc = a_.model;
      l.moe_losses =
          moe_losses(interval_lb / double(interval_iters), interval_z / double(interval_iters));
      if (mc.is_moe()) l.extra.emplace_back("moe_routing_hash", interval_moe.routed_hash);
      if (mc.is_moe() && mc.moe_expert_capacity_factor > 0) {
        l.extra.emplace_back("moe_dropped_pairs", interval_moe.dropped);
        l.extra.emplace_back("moe_dropped_hash", interval_moe.dropped_hash);
      }
      if (logger) log_->interval(l);
      // Megatron's memory report, once, after the first logged iterations.
      if (cuda && iteration_ == a_.log_interval && (world_.rank() == 0 || logger)) {
        log_plain(
            format_memory_report(world_.rank(), iteration_, kernels::device_memory(Device::kCUDA)));
      }
      interval_loss = interval_time = interval_flops = 0;
      interval_lb = interval_z = 0;
      interval_moe = model::MoEStats{};
      interval_iters = interval_samples = skipped = nans = 0;
    }
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
  checkpointer_->at_end(checkpoint_view());  // the final save (none if this iteration is saved)
  profile_enable(false);
  if (a_.profile && profiled_iters > 0) log_profile(profiled_time, profiled_iters, bytes_at_start);
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

std::vector<int64_t> Trainer::comm_bytes() const {
  std::vector<int64_t> b;
  for (GroupKind k : kProfiledGroups) {
    b.push_back(
        k == GroupKind::kEmbedding && !ps_->in_embedding_group() ? 0 : ps_->group(k).bytes_sent());
  }
  b.push_back(world_.bytes_sent());
  return b;
}

void Trainer::log_profile(double seconds, int64_t iters, const std::vector<int64_t>& bytes0) const {
  const auto& par = a_.parallel;
  const bool logger = world_.rank() == world_.size() - 1;
  if (world_.rank() == 0 || logger) {
    log_info("profile of iterations 2-{} on this rank ({:.3f} s):\n{}", iteration_, seconds,
             format_profile(profile_report(), seconds));
  }
  // Every rank: bytes it sent per step by group, and its pipeline compute/wait split.
  const std::vector<int64_t> bytes1 = comm_bytes();
  std::string line;
  for (size_t i = 0; i < bytes1.size(); ++i) {
    const char* name =
        i < std::size(kProfiledGroups) ? group_name(kProfiledGroups[i]).data() : "world";
    line += fmt::format(" {} {}", name, (bytes1[i] - bytes0[i]) / iters);
  }
  log_info("bytes sent per step:{}", line);
  const double ideal = double(par.pp() - 1) / double(par.vpp() * par.num_microbatches());
  log_info(
      "pipeline per step: compute {:.4f} s, waiting {:.4f} s, bubble {:.3f} (ideal "
      "(p-1)/(v m) = {:.3f})",
      pipeline_compute_s_ / double(iters), pipeline_wait_s_ / double(iters),
      pipeline_wait_s_ / pipeline_compute_s_, ideal);
}

}  // namespace mtron::train
