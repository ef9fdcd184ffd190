#include "mtron/train/grad_sync.h"

#include <algorithm>

#include "mtron/core/memory.h"
#include "mtron/kernels/device.h"
#include "mtron/kernels/elementwise.h"

namespace mtron::train {

GradSync::GradSync(model::ParamBuffer& params,
                   Comm& dp,
                   bool distributed_optimizer,
                   bool bf16_reduce)
    : p_(params),
      dp_(dp),
      distributed_(distributed_optimizer),
      bf16_(bf16_reduce && dp.size() > 1) {
  const size_t n = p_.buckets().size();
  launched_.assign(n, false);
  requests_.resize(n);
  gathers_.resize(n);
  // The whole-step reduction's buffers are allocated at a bucket's first launch (with FSDP's
  // sharded gradients only the deferred buckets have one).
  scattered_.resize(n);
  bf16_send_.resize(n);
  bf16_recv_.resize(n);
}

void GradSync::own_whole_params() {
  const std::vector<model::ParamSpec>& specs = p_.specs();
  const int64_t w = dp_.size();
  int64_t total = 0;
  for (const model::ParamSpec& s : specs) total += s.numel();
  // Parameter i goes to the rank whose equal share of `total` holds its middle element.
  owned_.assign(size_t(w), {p_.size(), p_.size()});
  int64_t before = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const int64_t n = specs[i].numel();
    const int64_t r = std::min(w - 1, (before + n / 2) * w / std::max<int64_t>(total, 1));
    auto& [lo, hi] = owned_[size_t(r)];
    lo = std::min(lo, specs[i].offset);
    hi = i + 1 < specs.size() ? specs[i + 1].offset : p_.size();
    before += n;
  }
  for (auto& [lo, hi] : owned_) hi = std::max(lo, hi);
}

std::vector<std::pair<int64_t, int64_t>> GradSync::shards() const {
  if (!owned_.empty()) {
    const auto& mine = owned_[size_t(dp_.rank())];
    if (mine.first == mine.second) return {};
    return {mine};
  }
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const model::Bucket& b : p_.buckets()) {
    if (distributed_) {
      const int64_t at = b.shard_begin(dp_.size(), dp_.rank());
      out.emplace_back(at, at + b.shard_len(dp_.size()));
    } else {
      out.emplace_back(b.begin, b.end);
    }
  }
  return out;
}

void GradSync::launch(size_t i) {
  launched_[i] = true;
  if (dp_.size() == 1) return;
  const model::Bucket& b = p_.buckets()[i];
  float* g = p_.grad_flat().f32() + b.begin;
  const int64_t shard = b.shard_len(dp_.size());
  const Device dev = p_.ctx().device;
  if (bf16_) {
    if (!bf16_send_[i].defined()) {
      bf16_send_[i] = Tensor::empty({b.end - b.begin}, DType::kBF16, dev);
      if (distributed_) bf16_recv_[i] = Tensor::empty({shard}, DType::kBF16, dev);
    }
    bf16* s = bf16_send_[i].bf();
    kernels::convert(p_.ctx(), s, g, b.end - b.begin);
    requests_[i] = distributed_
                       ? dp_.ireduce_scatter(s, bf16_recv_[i].bf(), b.shard_len(dp_.size()),
                                             DType::kBF16, ReduceOp::kSum)
                       : dp_.iall_reduce(s, b.end - b.begin, DType::kBF16, ReduceOp::kSum);
    return;
  }
  if (distributed_) {
    if (!scattered_[i].defined()) scattered_[i] = Tensor::empty({shard}, DType::kF32, dev);
    requests_[i] = dp_.ireduce_scatter(g, scattered_[i].f32(), shard, DType::kF32, ReduceOp::kSum);
  } else {
    requests_[i] = dp_.iall_reduce(g, b.end - b.begin, DType::kF32, ReduceOp::kSum);
  }
}

void GradSync::ready(int64_t offset) {
  const auto& buckets = p_.buckets();
  MT_ASSERT(!grads_sharded_, "sharded gradients are reduced by scatter()");
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (!launched_[i] && !buckets[i].deferred && buckets[i].begin >= offset) launch(i);
  }
  // Open MPI advances non-blocking collectives only inside MPI calls: give them a turn.
  for (auto& r : requests_) {
    if (r) r->test();
  }
}

void GradSync::finish() {
  const auto& buckets = p_.buckets();
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (grads_sharded_ && !buckets[i].deferred) {
      MT_ASSERT(summed_[i], "no micro-batch's gradients reached bucket ", i);
      const int64_t len = buckets[i].shard_len(dp_.size());
      if (!sums_.empty()) {  // bf16 reduction: the fp32 sum into the buffer's shard
        const int64_t own = buckets[i].shard_begin(dp_.size(), dp_.rank());
        p_.commit_grads(own, own + len);
        kernels::copy(p_.ctx(), p_.grad_flat().f32() + own, sums_[i].f32(),
                      int64_t(sizeof(float)) * len);
      }
      summed_[i] = reduced_[i] = false;
      continue;
    }
    if (!launched_[i]) launch(i);
    if (requests_[i]) {
      requests_[i]->wait();
      requests_[i].reset();
    }
    const int64_t len = buckets[i].shard_len(dp_.size());
    float* shard = p_.grad_flat().f32() + buckets[i].shard_begin(dp_.size(), dp_.rank());
    if (bf16_) {
      if (distributed_) {
        kernels::convert(p_.ctx(), shard, bf16_recv_[i].bf(), len);
      } else {
        kernels::convert(p_.ctx(), p_.grad_flat().f32() + buckets[i].begin, bf16_send_[i].bf(),
                         buckets[i].end - buckets[i].begin);
      }
    } else if (distributed_ && dp_.size() > 1) {
      kernels::copy(p_.ctx(), shard, scattered_[i].f32(), int64_t(sizeof(float)) * len);
    }
    launched_[i] = false;
  }
}

void GradSync::gather_params(bool overlap) {
  if (!owned_.empty() && dp_.size() > 1) {
    for (int r = 0; r < dp_.size(); ++r) {
      const auto [lo, hi] = owned_[size_t(r)];
      if (lo == hi) continue;
      dp_.broadcast(p_.master_flat().f32() + lo, hi - lo, DType::kF32, r);
      if (r != dp_.rank()) p_.refresh_compute(lo, hi);
    }
    return;
  }
  if (!distributed_ || dp_.size() == 1) return;
  for (size_t i = 0; i < p_.buckets().size(); ++i) launch_gather(i);
  pending_params_ = true;
  if (!overlap) wait_all_params();
}

void GradSync::launch_gather(size_t i) {
  const model::Bucket& b = p_.buckets()[i];
  const int64_t len = b.shard_len(dp_.size());
  float* m = p_.master_flat().f32() + b.begin;
  p_.commit_params(b.begin, b.end);
  gathers_[i] = dp_.iall_gather(m + dp_.rank() * len, m, len, DType::kF32);
}

void GradSync::complete_gather(size_t i) {
  gathers_[i]->wait();
  gathers_[i].reset();
  p_.refresh_compute(p_.buckets()[i].begin, p_.buckets()[i].end);
}

void GradSync::wait_params(int64_t begin, int64_t end) {
  if (!pending_params_) return;
  const auto& buckets = p_.buckets();
  bool any_left = false;
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (!gathers_[i]) continue;
    if (buckets[i].begin < end && begin < buckets[i].end) {
      complete_gather(i);
    } else {
      gathers_[i]->test();  // let Open MPI progress the others
      any_left = true;
    }
  }
  pending_params_ = any_left;
}

void GradSync::drop(size_t i) {
  const model::Bucket& b = p_.buckets()[i];
  const int64_t len = b.shard_len(dp_.size()), own = b.shard_begin(dp_.size(), dp_.rank());
  for (const Tensor* t : {&p_.master_flat(), &p_.compute_flat()}) {
    if (!t->defined()) continue;
    const int64_t e = int64_t(dtype_size(t->dtype()));
    char* base = static_cast<char*>(t->raw());
    device_discard(t->device(), base + b.begin * e, size_t((own - b.begin) * e));
    device_discard(t->device(), base + (own + len) * e, size_t((b.end - own - len) * e));
  }
  held_[i] = false;
}

void GradSync::shard_params() {
  MT_ASSERT(distributed_, "parameter sharding needs the distributed optimizer's shards");
  wait_all_params();
  for (size_t i = 0; i < gathers_.size(); ++i)  // prefetched, not used
    if (gathers_[i]) complete_gather(i);
  const size_t n = p_.buckets().size();
  sharded_ = true;
  hold_all_ = false;
  uses_.assign(n, 0);
  held_.assign(n, false);
  if (dp_.size() == 1) return;
  for (size_t i = 0; i < n; ++i) drop(i);
}

void GradSync::gather(const std::vector<size_t>& buckets) {
  for (size_t i : buckets)
    if (!gathers_[i]) launch_gather(i);  // else prefetched
  for (size_t i : buckets) {
    complete_gather(i);
    held_[i] = true;
  }
}

void GradSync::use_params(int64_t begin, int64_t end) {
  if (!sharded_ || dp_.size() == 1) return;
  const auto& buckets = p_.buckets();
  std::vector<size_t> missing;
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (buckets[i].begin >= end || begin >= buckets[i].end) continue;
    ++uses_[i];
    if (!held_[i]) missing.push_back(i);
  }
  gather(missing);
}

void GradSync::prefetch_params(int64_t begin, int64_t end) {
  if (!sharded_ || dp_.size() == 1) return;
  const auto& buckets = p_.buckets();
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (buckets[i].begin >= end || begin >= buckets[i].end) continue;
    if (!held_[i] && !gathers_[i]) launch_gather(i);
  }
}

void GradSync::release_params(int64_t begin, int64_t end) {
  if (!sharded_ || dp_.size() == 1) return;
  const auto& buckets = p_.buckets();
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (buckets[i].begin >= end || begin >= buckets[i].end) continue;
    MT_ASSERT(uses_[i] > 0, "parameters released more often than used");
    if (--uses_[i] == 0 && !hold_all_) drop(i);
  }
}

void GradSync::gather_all_params() {
  if (!sharded_ || dp_.size() == 1) return;
  std::vector<size_t> missing;
  for (size_t i = 0; i < held_.size(); ++i)
    if (!held_[i]) missing.push_back(i);
  gather(missing);
  hold_all_ = true;
}

void GradSync::shard_grads(bool overlap) {
  MT_ASSERT(distributed_, "gradient sharding needs the distributed optimizer's shards");
  if (dp_.size() == 1) return;
  grads_sharded_ = true;
  overlap_scatter_ = overlap;
  const auto& buckets = p_.buckets();
  const Device dev = p_.ctx().device;
  largest_ = largest_shard_ = 1;
  sums_.clear();
  for (size_t i = 0; i < buckets.size(); ++i) {
    const model::Bucket& b = buckets[i];
    const int64_t len = b.shard_len(dp_.size());
    if (bf16_) sums_.push_back(b.deferred ? Tensor() : Tensor::empty({len}, DType::kF32, dev));
    if (b.deferred) continue;
    largest_ = std::max(largest_, b.end - b.begin);
    largest_shard_ = std::max(largest_shard_, len);
  }
  summed_.assign(buckets.size(), false);
  reduced_.assign(buckets.size(), false);
}

void GradSync::zero_grads(int64_t begin, int64_t end) {
  kernels::zero_release(p_.ctx(), p_.grad_flat().f32() + begin,
                        int64_t(sizeof(float)) * (end - begin));
}

void GradSync::launch_scatter(size_t i) {
  Scatter sc;
  if (spare_.empty()) {
    const Device dev = p_.ctx().device;
    sc.part = Tensor::empty({largest_shard_}, DType::kF32, dev);
    if (bf16_) {
      sc.send16 = Tensor::empty({largest_}, DType::kBF16, dev);
      sc.recv16 = Tensor::empty({largest_shard_}, DType::kBF16, dev);
    }
  } else {
    sc = std::move(spare_.back());
    spare_.pop_back();
  }
  sc.bucket = i;
  const model::Bucket& b = p_.buckets()[i];
  const int64_t len = b.shard_len(dp_.size());
  float* g = p_.grad_flat().f32() + b.begin;
  if (!bf16_) {
    // This rank's part of the bucket holds the sum of the step's earlier micro-batches and the
    // other ranks' parts are zero there, so the reduction adds this micro-batch to the sum.
    sc.req = dp_.ireduce_scatter(g, sc.part.f32(), len, DType::kF32, ReduceOp::kSum);
  } else {
    // Rounded to bf16 for the wire: the sum over the micro-batches is kept apart, in fp32.
    kernels::convert(p_.ctx(), sc.send16.bf(), g, b.end - b.begin);
    sc.req = dp_.ireduce_scatter(sc.send16.bf(), sc.recv16.bf(), len, DType::kBF16, ReduceOp::kSum);
  }
  flying_.push_back(std::move(sc));
}

void GradSync::complete_scatter(Scatter& sc) {
  const size_t i = sc.bucket;
  const model::Bucket& b = p_.buckets()[i];
  const int64_t len = b.shard_len(dp_.size());
  const int64_t own = b.shard_begin(dp_.size(), dp_.rank());
  float* g = p_.grad_flat().f32();
  sc.req->wait();
  sc.req.reset();
  if (!bf16_) {
    kernels::copy(p_.ctx(), g + own, sc.part.f32(), int64_t(sizeof(float)) * len);
  } else {
    float* sum = sums_[i].f32();
    float* out = summed_[i] ? sc.part.f32() : sum;
    kernels::convert(p_.ctx(), out, sc.recv16.bf(), len);
    if (summed_[i]) kernels::add(p_.ctx(), sum, sum, out, len);
    zero_grads(own, own + len);
  }
  summed_[i] = true;
  zero_grads(b.begin, own);
  zero_grads(own + len, b.end);
  spare_.push_back(std::move(sc));
}

void GradSync::use_grads(int64_t begin, int64_t end) {
  if (grads_sharded_) p_.commit_grads(begin, end);
}

void GradSync::scatter(int64_t offset) {
  const auto& buckets = p_.buckets();
  const size_t before = flying_.size();  // launched by earlier calls
  bool all = true;
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (buckets[i].deferred) continue;
    if (!reduced_[i] && buckets[i].begin >= offset) {
      launch_scatter(i);
      reduced_[i] = true;
    }
    all = all && reduced_[i];
  }
  // Overlapped: the reductions launched by the last call ran while this part's backward computed;
  // this call's run during the next part's. At the end of the micro-batch every one completes.
  const size_t done = overlap_scatter_ && !all ? before : flying_.size();
  for (size_t k = 0; k < done; ++k) complete_scatter(flying_[k]);
  flying_.erase(flying_.begin(), flying_.begin() + int64_t(done));
  if (all) reduced_.assign(buckets.size(), false);  // the micro-batch's backward is complete
}

void GradSync::zero_grad() {
  if (!grads_sharded_) {
    p_.zero_grad();
    return;
  }
  float* g = p_.grad_flat().f32();
  for (const model::Bucket& b : p_.buckets()) {
    const int64_t len = b.shard_len(dp_.size());
    const int64_t at = b.deferred ? b.begin : b.shard_begin(dp_.size(), dp_.rank());
    const int64_t n = b.deferred ? b.end - b.begin : len;
    p_.commit_grads(at, at + n);
    kernels::fill_zero(p_.ctx(), g + at, int64_t(sizeof(float)) * n);
  }
}

}  // namespace mtron::train
