#include "mtron/train/trainer.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "mtron/comm/single.h"
#include "mtron/core/formulas.h"
#include "mtron/core/log.h"
#include "mtron/core/memory.h"
#include "mtron/core/timer.h"

namespace mtron::train {

namespace {

// Peak FLOP/s of one device of this run, for MFU. TODO(integrator): the hardware catalog.
double device_peak_flops(bool bf16) {
  const double cores = double(omp_get_max_threads());
  const double ghz = 2.4e9;
  return cores * ghz * (bf16 ? 1024.0 : 64.0);
}

std::vector<optim::OptimRange> optim_ranges(const model::ParamBuffer& p, int64_t tp_rank) {
  std::vector<optim::OptimRange> r;
  for (const model::ParamSpec& s : p.specs()) {
    // Replicas are counted once in the global norm: TP-replicated parameters on TP rank 0 only,
    // the last stage's tied embedding copy not at all (the first stage counts it).
    const bool counted = !s.tied_copy && (!s.tp_replicated() || tp_rank == 0);
    r.push_back({s.offset, s.offset + s.numel(), s.weight_decay, counted});
  }
  return r;
}

}  // namespace

Trainer::Trainer(const TrainArgs& args, Comm& world) : a_(args), world_(world) {
  rc_.precision = a_.bf16 ? model::Precision::kBF16 : model::Precision::kFP32;
  rc_.tp = parallel::TensorParallel{&world_, 0, 1, false};
  MT_CHECK(world_.size() == 1, "multi-process training is not wired yet");
  build_model();
  if (a_.mock_data) {
    mock_ = std::make_unique<MockData>(a_.seed, a_.model.vocab_size, a_.model.seq_length);
  }
  MT_CHECK(mock_, "--data-path is not supported yet; use --mock-data");
  const std::string path = a_.metrics_file.empty() ? "mtron-metrics.jsonl" : a_.metrics_file;
  if (world_.rank() == world_.size() - 1) metrics_ = std::make_unique<MetricsWriter>(path);
}

Trainer::~Trainer() = default;

void Trainer::build_model() {
  const auto& m = a_.model;
  model::ChunkPlacement place{0, m.num_layers, true, true};
  chunks_.push_back(std::make_unique<model::GPTChunk>(m, place, rc_.tp, a_.recompute));
  std::vector<optim::OptimBuffer> bufs;
  for (auto& c : chunks_) {
    model::ParamBuffer& p = c->params();
    p.allocate(rc_.precision, 1);
    p.init(a_.seed);
    optim::OptimBuffer b{
        .master = p.master_flat().f32(),
        .grad = p.grad_flat().f32(),
        .compute = rc_.precision == model::Precision::kBF16 ? p.bf16_flat().bf() : nullptr,
        .size = p.size(),
        .ranges = optim_ranges(p, rc_.tp.rank),
        .shard_begin = 0,
        .shard_end = p.size()};
    bufs.push_back(std::move(b));
  }
  optimizer_ = std::make_unique<optim::AdamW>(std::move(bufs), a_.adam);
  stashes_.resize(1);
}

double Trainer::learning_rate(int64_t samples) const {
  const int64_t gbs = a_.parallel.global_batch_size;
  optim::LrSchedule s{.lr = a_.lr,
                      .min_lr = a_.min_lr,
                      .warmup_init = a_.lr_warmup_init,
                      .warmup_samples = a_.lr_warmup_iters * gbs,
                      .decay_samples = a_.lr_decay_iters * gbs,
                      .style = a_.lr_decay_style};
  return s.lr_at(samples);
}

model::MicroBatch Trainer::microbatch(int64_t j) const {
  const auto& par = a_.parallel;
  const int64_t B = par.micro_batch_size, S = a_.model.seq_length;
  const int64_t dp_rank = 0;
  const int64_t first = consumed_samples_ + j * B * par.dp() + dp_rank * B;
  model::MicroBatch mb;
  mb.B = B;
  mb.S = S;
  mb.tokens.resize(size_t(S * B));
  mb.labels.resize(size_t(S * B));
  mb.pos.resize(size_t(S * B));
  std::vector<int32_t> sample(size_t(S + 1));
  for (int64_t b = 0; b < B; ++b) {
    mock_->sample(first + b, sample.data());
    for (int64_t s = 0; s < S; ++s) {
      mb.tokens[size_t(s * B + b)] = sample[size_t(s)];
      mb.labels[size_t(s * B + b)] = sample[size_t(s + 1)];
      mb.pos[size_t(s * B + b)] = int32_t(s);
    }
  }
  mb.dloss = float(1.0 / double(par.global_batch_size * S));
  return mb;
}

StepResult Trainer::step() {
  const auto& par = a_.parallel;
  StepResult r;
  r.lr = learning_rate(consumed_samples_);
  for (auto& c : chunks_) c->params().zero_grad();

  double loss_sum = 0;
  auto& chunk = *chunks_.front();
  auto& st = stashes_.front();
  for (int64_t j = 0; j < par.num_microbatches(); ++j) {
    const model::MicroBatch mb = microbatch(j);
    chunk.forward(rc_, mb, st, nullptr, true);
    loss_sum += st.loss_sum;
    chunk.backward(rc_, mb, st, nullptr);
  }

  r.grad_norm = optimizer_->grad_norm(world_);
  r.skipped = !optimizer_->step(r.lr, r.grad_norm);
  r.lm_loss = loss_sum / double(par.global_batch_size * a_.model.seq_length);
  consumed_samples_ += par.global_batch_size;
  ++iteration_;
  return r;
}

void Trainer::run() {
  const auto& par = a_.parallel;
  const bool logger = world_.rank() == world_.size() - 1;
  const double flops =
      flops_per_iteration(a_.model, par.global_batch_size, a_.model.padded_vocab_size(par.tp()));
  const double peak = device_peak_flops(a_.bf16);
  log_info("model: {}", a_.model.summary());
  log_info("layout: {}", par.summary());
  log_info("parameters: {:.2f} M (padded vocab {})",
           double(a_.model.num_parameters(par.tp())) / 1e6, a_.model.padded_vocab_size(par.tp()));
  log_info("precision: {}; MFU against {:.1f} GFLOP/s per device ({} threads)",
           a_.bf16 ? "bf16 (fp32 master weights and gradients)" : "fp32", peak / 1e9,
           omp_get_max_threads());
  for (const auto& n : a_.notes) log_info("note: {}", n);

  double interval_loss = 0, interval_time = 0;
  int64_t interval_iters = 0, skipped = 0, nans = 0;
  while (iteration_ < a_.train_iters) {
    const double t0 = now_seconds();
    const StepResult r = step();
    const double dt = now_seconds() - t0;
    interval_loss += r.lm_loss;
    interval_time += dt;
    ++interval_iters;
    skipped += r.skipped;
    nans += !std::isfinite(r.grad_norm);
    if (iteration_ % a_.log_interval == 0 || iteration_ == a_.train_iters) {
      IterationLog l;
      l.iteration = iteration_;
      l.train_iters = a_.train_iters;
      l.consumed_samples = consumed_samples_;
      l.global_batch_size = par.global_batch_size;
      l.elapsed_ms = 1e3 * interval_time / double(interval_iters);
      const double per_iter = interval_time / double(interval_iters);
      l.tflops_per_device = flops / (per_iter * 1e12 * double(world_.size()));
      l.learning_rate = learning_rate(consumed_samples_);
      l.lm_loss = interval_loss / double(interval_iters);
      l.grad_norm = r.grad_norm;
      l.skipped_iterations = skipped;
      l.nan_iterations = nans;
      l.tokens_per_s_per_device =
          double(par.global_batch_size * a_.model.seq_length) / per_iter / double(world_.size());
      l.mfu = flops / per_iter / double(world_.size()) / peak;
      l.peak_memory_mb = double(process_peak_rss()) / 1048576.0;
      if (logger) {
        log_plain(format_iteration_line(l));
        metrics_->write(l);
      }
      interval_loss = interval_time = 0;
      interval_iters = skipped = nans = 0;
    }
  }
}

int train_main(int argc, char** argv) {
  std::unique_ptr<Comm> world = make_single_comm();
  log_init(world->rank(), world->size());
  try {
    TrainArgs a;
    if (!parse_train_args(argc, argv, world->size(), a)) return 0;
    Trainer t(a, *world);
    t.run();
    return 0;
  } catch (const Error& e) {
    log_error("{}", e.what());
    return 2;
  } catch (const InternalError& e) {
    log_error("{}", e.what());
    return 1;
  }
}

}  // namespace mtron::train
