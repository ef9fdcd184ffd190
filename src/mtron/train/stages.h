// defines: Trainer::Stages
//
// The pipeline schedule's view of a trainer's chunks (parallel::StageModel): each forward and
// backward of a (chunk, micro-batch) runs on the trainer's chunk with its own stash, taken from
// a pool so steady-state steps reuse their arenas; a step's micro-batches are built once
// (Trainer::microbatch). It waits for the parameter all-gathers still in flight
// (--overlap-param-gather) before a forward needs them, and starts the gradient buckets'
// reduction during the last micro-batch's backward (--overlap-grad-reduce). The head chunk adds
// every micro-batch's token losses to one accumulator on the device, read once per step (the
// first loss_sum or mtp_loss_sum after it), so the losses cost one host synchronisation a step.
#pragma once

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "mtron/core/arena.h"
#include "mtron/kernels/device.h"
#include "mtron/kernels/elementwise.h"
#include "mtron/parallel/schedule.h"
#include "mtron/train/trainer.h"

namespace mtron::train {

// The schedule's view of this rank's chunks: one stash per (chunk, micro-batch) in flight,
// taken from a pool so steady-state steps reuse their arenas.
class Trainer::Stages : public parallel::StageModel {
 public:
  explicit Stages(Trainer& t) : t_(t), loss_arena_(t.rc_.k.device) {
    loss_dev_ = loss_arena_.alloc<double>(1 + t_.a_.model.mtp_num_layers);
    for (const auto& c : t_.chunks_) has_head_ = has_head_ || c->placement().has_head;
  }

  // A step over the global batch at sample `base` of `split` (train: forward and backward).
  void begin(bool train, data::Split split, int64_t base) {
    train_ = train;
    split_ = split;
    base_ = base;
    kernels::fill_zero(t_.rc_.k, loss_dev_,
                       int64_t(sizeof(double)) * (1 + t_.a_.model.mtp_num_layers));
    losses_read_ = false;
    moe_ = model::MoEStats{};
    mbs_.clear();
  }
  // This rank's sum of the step's token losses (the last stage's; 0 elsewhere).
  double loss_sum() { return read_losses()[0]; }
  // Per MTP depth, this rank's sum of the token losses (the last stage's; zeros elsewhere).
  std::vector<double> mtp_loss_sum() {
    const std::vector<double>& s = read_losses();
    return std::vector<double>(s.begin() + 1, s.end());
  }
  const model::MoEStats& moe() const { return moe_; }

  const float* forward(int chunk, int64_t m, const float* input) override {
    release_pending();
    model::GPTChunk::Stash& st = acquire({chunk, m});
    model::GPTChunk& c = *t_.chunks_[size_t(chunk)];
    st.loss_dev = loss_dev_;
    const float* out =
        c.forward(t_.rc_, mb(m), st, input, train_, params_use(chunk), grads_use(chunk));
    moe_.add(st.moe);
    if (!train_) pending_ = {chunk, m};
    return out;
  }

  const float* backward(int chunk, int64_t m, const float* dout) override {
    release_pending();
    model::GPTChunk::Stash& st = *in_use_.at({chunk, m});
    // FSDP's sharded gradients: every micro-batch's are reduce-scattered as backward completes
    // them. Otherwise the last micro-batch's backward completes each gradient: start reducing
    // buckets then.
    model::GPTChunk::GradsReady ready;
    GradSync* sync = t_.grad_syncs_[size_t(chunk)].get();
    if (sync->grads_sharded()) {
      ready = [sync](int64_t offset) { sync->scatter(offset); };
    } else if (t_.a_.parallel.overlap_grad_reduce && m == t_.num_microbatches_ - 1) {
      ready = [sync](int64_t offset) { sync->ready(offset); };
    }
    const float* d = t_.chunks_[size_t(chunk)]->backward(t_.rc_, mb(m), st, dout, ready,
                                                         params_use(chunk), grads_use(chunk));
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

  // FSDP (ZeRO-3): each part's parameters gathered before it and dropped after, with
  // --overlap-param-gather the next part's gather started as a part begins; otherwise with
  // --overlap-param-gather: the parameter all-gathers of the last step may still be in flight.
  model::GPTChunk::ParamsUse params_use(int chunk) const {
    using U = model::GPTChunk::PartUse;
    GradSync* sync = t_.grad_syncs_[size_t(chunk)].get();
    if (sync->params_sharded()) {
      const bool prefetch = t_.a_.parallel.overlap_param_gather;
      return [sync, prefetch](int64_t lo, int64_t hi, U use) {
        if (use == U::kUse) sync->use_params(lo, hi);
        if (use == U::kRelease) sync->release_params(lo, hi);
        if (use == U::kPrefetch && prefetch) sync->prefetch_params(lo, hi);
      };
    }
    if (!sync->params_pending()) return nullptr;
    return [sync](int64_t lo, int64_t hi, U use) {
      if (use == U::kUse) sync->wait_params(lo, hi);
    };
  }
  // FSDP's sharded gradients: each part's backed before the part writes them.
  model::GPTChunk::GradsUse grads_use(int chunk) const {
    GradSync* sync = t_.grad_syncs_[size_t(chunk)].get();
    if (!sync->grads_sharded()) return nullptr;
    return [sync](int64_t lo, int64_t hi) { sync->use_grads(lo, hi); };
  }
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
  // The step's loss sums, copied from the device once (zeros on a rank without the head).
  const std::vector<double>& read_losses() {
    if (!losses_read_) {
      losses_.assign(size_t(1 + t_.a_.model.mtp_num_layers), 0.0);
      if (has_head_) {
        kernels::copy_to_host(t_.rc_.k, losses_.data(), loss_dev_,
                              int64_t(sizeof(double) * losses_.size()));
      }
      losses_read_ = true;
    }
    return losses_;
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
  Arena loss_arena_;            // on the run's device
  double* loss_dev_ = nullptr;  // [1 + MTP depths] the step's token-loss sums
  bool has_head_ = false, losses_read_ = false;
  std::vector<double> losses_;
  model::MoEStats moe_;  // this rank's share, over the step's micro-batches
  std::map<int64_t, model::MicroBatch> mbs_;
  std::map<Key, std::unique_ptr<model::GPTChunk::Stash>> in_use_;
  std::vector<std::unique_ptr<model::GPTChunk::Stash>> free_;
  Key pending_{-1, -1};
};

}  // namespace mtron::train
