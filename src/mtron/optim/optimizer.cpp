#include "mtron/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "mtron/core/error.h"
#include "mtron/kernels/device.h"
#include "mtron/kernels/elementwise.h"
#include "mtron/kernels/gemm_operand.h"

namespace mtron::optim {

int64_t OptimBuffer::shard_elems() const {
  int64_t n = 0;
  for (const Shard& s : shards) n += s.end - s.begin;
  return n;
}

int64_t shard_moment(const std::vector<OptimBuffer::Shard>& shards, int64_t element) {
  int64_t at = 0;
  for (const OptimBuffer::Shard& s : shards) {
    if (element >= s.begin && element < s.end) return at + (element - s.begin);
    at += s.end - s.begin;
  }
  return -1;
}

namespace {
// Calls f(lo, hi, range, moment_offset) for every piece of `b` in both a shard and a range.
template <typename F>
void for_each_piece(const OptimBuffer& b, F&& f) {
  int64_t moment = 0;
  for (const OptimBuffer::Shard& s : b.shards) {
    for (const OptimRange& r : b.ranges) {
      const int64_t lo = std::max(r.begin, s.begin), hi = std::min(r.end, s.end);
      if (lo < hi) f(lo, hi, r, moment + (lo - s.begin));
    }
    moment += s.end - s.begin;
  }
}

// The offloaded moments of `b`: its pieces' ends are the boundaries a split may take (a
// parameter's moments stay on one side); the one nearest `fraction` of the shard elements.
int64_t offloaded_elems(const OptimBuffer& b, double fraction) {
  const double want = fraction * double(b.shard_elems());
  int64_t best = 0;
  for_each_piece(b, [&](int64_t lo, int64_t hi, const OptimRange&, int64_t mo) {
    const int64_t end = mo + (hi - lo);
    if (std::abs(double(end) - want) < std::abs(double(best) - want)) best = end;
  });
  return best;
}

}  // namespace

Optimizer::Optimizer(std::vector<OptimBuffer> buffers,
                     AdamWConfig cfg,
                     const kernels::Ctx& k,
                     double offload_fraction,
                     std::optional<MuonConfig> muon)
    : buffers_(std::move(buffers)),
      cfg_(cfg),
      k_(k),
      norm_sum_(Tensor::empty({1}, DType::kF64, k.device)) {
  if (muon) {
    muon_ = std::make_unique<Muon>(*muon, k);
    MT_ASSERT(offload_fraction == 0, "Muon with optimizer offload");
  }
  const kernels::Ctx host{};
  auto zeros = [](const kernels::Ctx& ctx, int64_t n) {
    Tensor t = Tensor::empty({n}, DType::kF32, ctx.device);
    kernels::fill_zero(ctx, t.raw(), int64_t(t.nbytes()));
    return t;
  };
  for (const OptimBuffer& b : buffers_) {
    const int64_t h = offload_fraction > 0 ? offloaded_elems(b, offload_fraction) : 0;
    host_.push_back(h);
    m_.push_back(zeros(k_, b.shard_elems() - h));
    v_.push_back(zeros(k_, b.shard_elems() - h));
    mh_.push_back(zeros(host, h));
    vh_.push_back(zeros(host, h));
    grad_h_.push_back(Tensor::empty({h}, DType::kF32));
    master_h_.push_back(Tensor::empty({h}, DType::kF32));
  }
}

MomentSplit Optimizer::split(size_t i,
                             const std::vector<Tensor>& dev,
                             const std::vector<Tensor>& host) const {
  return {host[i].f32(), dev[i].f32(), host_[i]};
}

template <typename F>
void Optimizer::for_each_offloaded(size_t i, F&& f) const {
  int64_t m = 0;  // moments (and host elements) before this shard
  for (const OptimBuffer::Shard& s : buffers_[i].shards) {
    const int64_t n = std::min(s.end - s.begin, host_[i] - m);
    if (n <= 0) break;
    f(s.begin, m, n);
    m += n;
  }
}

void Optimizer::offload_copy(size_t i, float* device, float* host, bool to_host) const {
  for_each_offloaded(i, [&](int64_t begin, int64_t at, int64_t n) {
    const int64_t bytes = int64_t(sizeof(float)) * n;
    if (to_host) {
      kernels::copy_to_host(k_, host + at, device + begin, bytes);
    } else {
      kernels::copy_from_host_async(k_, device + begin, host + at, bytes);
    }
  });
}

// One sum_squares per run of counted parameters rather than one per parameter: a shard's pieces
// in buffer order, counted ones joined across the padding between them (zero:
// ParamBuffer::zero_grad clears the whole buffer), a run ending at a piece that is not counted.
// The runs add to one double on the device, read once (one host synchronisation on a GPU).
double Optimizer::grad_norm(Comm& norm_group) const {
  double* total = static_cast<double*>(norm_sum_.raw());
  kernels::fill_zero(k_, total, sizeof(double));
  for (const OptimBuffer& b : buffers_) {
    for (const OptimBuffer::Shard& s : b.shards) {
      std::vector<std::pair<int64_t, const OptimRange*>> pieces;  // (first element, range)
      for (const OptimRange& r : b.ranges) {
        if (std::max(r.begin, s.begin) < std::min(r.end, s.end))
          pieces.emplace_back(std::max(r.begin, s.begin), &r);
      }
      std::sort(pieces.begin(), pieces.end());
      int64_t lo = 0, hi = 0;  // the run
      const auto flush = [&] {
        if (hi > lo) kernels::sum_squares(k_, total, b.grad + lo, hi - lo);
        lo = hi = 0;
      };
      for (const auto& [begin, r] : pieces) {
        if (!r->count_in_norm) {
          flush();
          continue;
        }
        if (hi == lo) lo = begin;
        hi = std::min(r->end, s.end);
      }
      flush();
    }
  }
  double sumsq = 0;
  kernels::copy_to_host(k_, &sumsq, total, sizeof(double));
  if (norm_group.size() > 1) sumsq = norm_group.all_reduce_sum(sumsq);
  return std::sqrt(sumsq);
}

void Optimizer::scale_grads(float s) {
  for (const OptimBuffer& b : buffers_) {
    for (const OptimBuffer::Shard& sh : b.shards) {
      kernels::scale_inplace(k_, b.grad + sh.begin, s, sh.end - sh.begin);
    }
  }
}

bool Optimizer::step(double lr, double grad_norm, std::optional<double> decoupled_lr) {
  if (!std::isfinite(grad_norm)) return false;
  // As Megatron and torch's clip_grad_norm_: scale by max_norm / (norm + 1e-6) when below 1.
  const double coeff = cfg_.clip_grad > 0 ? cfg_.clip_grad / (grad_norm + 1e-6) : 1.0;
  const float clip = coeff < 1.0 ? float(coeff) : 1.0f;
  ++step_;
  // The offloaded parts' gradients and weights to the host first, then the device's steps are
  // queued (one multi-tensor launch per buffer), and the host's run while the device runs them.
  for (size_t i = 0; i < buffers_.size(); ++i) {
    if (host_[i] == 0) continue;
    offload_copy(i, buffers_[i].grad, grad_h_[i].f32(), true);
    offload_copy(i, buffers_[i].master, master_h_[i].f32(), true);
  }
  // The clipping factor is applied as the step reads the gradients (no pass of its own).
  const kernels::AdamWParams p{
      .beta1 = cfg_.beta1, .beta2 = cfg_.beta2, .eps = cfg_.eps, .step = step_, .grad_scale = clip};
  std::vector<std::vector<kernels::AdamWRun>> host_runs(buffers_.size());
  for (size_t i = 0; i < buffers_.size(); ++i) {
    const OptimBuffer& b = buffers_[i];
    const int64_t h = host_[i];
    std::vector<kernels::AdamWRun> runs;
    for_each_piece(b, [&](int64_t lo, int64_t hi, const OptimRange& r, int64_t mo) {
      if (r.muon) return;
      const kernels::AdamWRun run{.begin = lo,
                                  .n = hi - lo,
                                  .moment = mo - h,
                                  .lr = float(r.decoupled_lr && decoupled_lr ? *decoupled_lr : lr),
                                  .weight_decay = r.weight_decay ? cfg_.weight_decay : 0.0f};
      if (mo >= h) {
        runs.push_back(run);
      } else {  // the host copies are in moment order
        host_runs[i].push_back({mo, run.n, mo, run.lr, run.weight_decay});
      }
    });
    const bool fused = b.compute && b.compute_dtype == DType::kBF16;
    kernels::adamw_step_runs(k_, b.master, m_[i].f32(), v_[i].f32(), b.grad,
                             fused ? static_cast<bf16*>(b.compute) : nullptr, runs.data(),
                             int64_t(runs.size()), p);
    for (const MuonMatrix& mm : b.muon) {  // the matrices whole in this rank's shards
      const int64_t moment = shard_moment(b.shards, mm.begin);
      if (moment < 0) continue;  // another rank's (the layer-wise distributed optimizer)
      const int64_t last = mm.begin + numel(mm.local) - 1;
      MT_ASSERT(shard_moment(b.shards, last) == moment + (last - mm.begin),
                "a Muon matrix split between shards");
      muon_->step(mm, b.master, b.grad, b.compute, b.compute_dtype, m_[i].f32() + moment, lr,
                  cfg_.weight_decay, clip);
    }
    if (b.compute && !fused) {  // fp16: the compute copy of each shard, padding included
      for (const OptimBuffer::Shard& sh : b.shards) {
        kernels::narrow_operand(k_, b.compute_dtype, static_cast<f16*>(b.compute) + sh.begin,
                                b.master + sh.begin, sh.end - sh.begin);
      }
    }
  }
  const kernels::Ctx host{};
  for (size_t i = 0; i < buffers_.size(); ++i) {
    if (host_runs[i].empty()) continue;
    kernels::adamw_step_runs(host, master_h_[i].f32(), mh_[i].f32(), vh_[i].f32(), grad_h_[i].f32(),
                             nullptr, host_runs[i].data(), int64_t(host_runs[i].size()), p);
  }
  for (size_t i = 0; i < buffers_.size(); ++i) {
    const OptimBuffer& b = buffers_[i];
    if (host_[i] == 0) continue;
    offload_copy(i, b.master, master_h_[i].f32(), false);
    if (!b.compute) continue;
    for_each_offloaded(i, [&](int64_t begin, int64_t, int64_t n) {
      kernels::narrow_operand(k_, b.compute_dtype, static_cast<f16*>(b.compute) + begin,
                              b.master + begin, n);
    });
  }
  return true;
}

int64_t Optimizer::state_bytes() const {
  int64_t n = 0;
  for (size_t i = 0; i < m_.size(); ++i) n += int64_t(m_[i].nbytes() + v_[i].nbytes());
  return n;
}

int64_t Optimizer::host_state_bytes() const {
  int64_t n = 0;
  for (size_t i = 0; i < mh_.size(); ++i) n += int64_t(mh_[i].nbytes() + vh_[i].nbytes());
  return n;
}

}  // namespace mtron::optim
