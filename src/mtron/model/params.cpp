#include "mtron/model/params.h"

#include <algorithm>

#include "mtron/core/memory.h"
#include "mtron/core/philox.h"
#include "mtron/kernels/device.h"
#include "mtron/kernels/elementwise.h"

namespace mtron::model {

ParamSpec sharded_spec(std::string name,
                       Shape global,
                       int dim,
                       int64_t rank,
                       int64_t size,
                       float std,
                       bool weight_decay) {
  Shape local = global;
  local[size_t(dim)] /= size;
  return ParamSpec{.name = std::move(name),
                   .global_shape = global,
                   .shard_dim = dim,
                   .shard_offset = rank * local[size_t(dim)],
                   .local_shape = local,
                   .init = weight_decay ? ParamInit::kNormal : ParamInit::kZeros,
                   .init_std = std,
                   .weight_decay = weight_decay};
}

int ParamBuffer::add(ParamSpec spec) {
  MT_ASSERT(!master_.defined(), "parameter ", spec.name, " registered after allocate()");
  MT_ASSERT(spec.local_shape.size() == spec.global_shape.size(), spec.name, ": rank mismatch");
  for (size_t d = 0; d < spec.global_shape.size(); ++d) {
    if (int(d) == spec.shard_dim) {
      MT_ASSERT(spec.shard_offset + spec.local_shape[d] <= spec.global_shape[d], spec.name,
                ": shard outside the global shape");
    } else {
      MT_ASSERT(spec.local_shape[d] == spec.global_shape[d], spec.name, ": unsharded dim ", d,
                " differs from the global shape");
    }
  }
  spec.unit_start = spec.unit_start || unit_next_;
  unit_next_ = false;
  specs_.push_back(std::move(spec));
  return int(specs_.size()) - 1;
}

int ParamBuffer::find(const std::string& name) const {
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (specs_[i].name == name) return int(i);
  }
  return -1;
}

void ParamBuffer::allocate(Precision precision,
                           int64_t shards,
                           int64_t bucket_elems,
                           const kernels::Ctx& k,
                           bool unit_buckets,
                           bool discardable) {
  MT_ASSERT(precision == Precision::kFP32 || precision == Precision::kBF16 ||
                precision == Precision::kFP16,
            "parameters in fp32, bf16 or fp16, not ", precision_name(precision));
  precision_ = precision;
  ctx_ = k;
  discardable_ = discardable;
  const int64_t m = std::max<int64_t>(1, shards) * 64;
  int64_t offset = 0;
  buckets_.clear();
  auto close_bucket = [&](bool deferred) {
    const int64_t end = (offset + m - 1) / m * m;
    if (end > (buckets_.empty() ? 0 : buckets_.back().end)) {
      buckets_.push_back({buckets_.empty() ? 0 : buckets_.back().end, end, deferred});
    }
    offset = end;
  };
  for (ParamSpec& s : specs_) {
    // A cross-stage embedding is alone in its bucket; with unit buckets a unit starts one.
    if (s.cross_stage || (unit_buckets && s.unit_start)) close_bucket(false);
    s.offset = offset;
    offset += (s.numel() + 63) / 64 * 64;
    const int64_t begin = buckets_.empty() ? 0 : buckets_.back().end;
    if (s.cross_stage || (bucket_elems > 0 && offset - begin >= bucket_elems)) {
      close_bucket(s.cross_stage);
    }
  }
  close_bucket(false);
  if (buckets_.empty()) buckets_.push_back({0, m, false});
  const int64_t total = buckets_.back().end;
  // Zero, and on the CPU (or discardable) not yet backed: FSDP keeps most of it so.
  auto zeros = [&](DType t) {
    Tensor z = discardable ? Tensor::empty_discardable({total}, t, k.device)
                           : Tensor::empty({total}, t, k.device);
    kernels::zero_release(k, z.raw(), int64_t(z.nbytes()));
    return z;
  };
  master_ = zeros(DType::kF32);
  grad_ = zeros(DType::kF32);
  if (precision != Precision::kFP32) compute_ = zeros(compute_dtype(precision));
}

void ParamBuffer::init(uint64_t seed, const std::vector<std::pair<int64_t, int64_t>>& keep) {
  const std::vector<std::pair<int64_t, int64_t>> ranges =
      keep.empty() ? std::vector<std::pair<int64_t, int64_t>>{{0, size()}} : keep;
  for (const auto& [lo, hi] : ranges) commit_params(lo, hi);
  // Each parameter is drawn on the host, then the parts of it in `ranges` are copied (the buffer
  // is zero, padding included).
  const bool host = ctx_.device == Device::kCPU;
  std::vector<float> w;
  for (const ParamSpec& s : specs_) {
    const int64_t begin = s.offset, end = s.offset + s.numel();
    std::vector<std::pair<int64_t, int64_t>> parts;  // of the parameter, in `ranges`
    for (const auto& [lo, hi] : ranges)
      if (std::max(lo, begin) < std::min(hi, end))
        parts.emplace_back(std::max(lo, begin), std::min(hi, end));
    if (parts.empty()) continue;
    w.resize(size_t(s.numel()));
    switch (s.init) {
      case ParamInit::kNormal:
        fill_normal_shard(w.data(), rng_key(seed, s.name), s.init_std, s.global_shape, s.shard_dim,
                          s.shard_offset, s.shard_dim < 0 ? 0 : s.local_shape[size_t(s.shard_dim)]);
        break;
      case ParamInit::kOnes:
        std::fill(w.begin(), w.end(), 1.0f);
        break;
      case ParamInit::kZeros:
        std::fill(w.begin(), w.end(), 0.0f);
        break;
    }
    for (const auto& [lo, hi] : parts) {
      const float* from = w.data() + (lo - begin);
      if (host) {
        std::copy(from, from + (hi - lo), master_.f32() + lo);
      } else {
        kernels::copy_from_host(ctx_, master_.f32() + lo, from, int64_t(sizeof(float)) * (hi - lo));
      }
    }
  }
  for (const auto& [lo, hi] : ranges) refresh_compute(lo, hi);
}

void ParamBuffer::refresh_compute() {
  refresh_compute(0, master_.numel());
}

void ParamBuffer::refresh_compute(int64_t begin, int64_t end) {
  if (!compute_.defined()) return;
  char* at = static_cast<char*>(compute_.raw()) + begin * int64_t(dtype_size(compute_.dtype()));
  kernels::narrow_operand(ctx_, compute_.dtype(), at, master_.f32() + begin, end - begin);
}

namespace {

void commit(const Tensor& t, int64_t begin, int64_t end) {
  if (!t.defined() || end <= begin) return;
  const int64_t e = int64_t(dtype_size(t.dtype()));
  device_commit(t.device(), static_cast<char*>(t.raw()) + begin * e, size_t((end - begin) * e));
}

}  // namespace

void ParamBuffer::commit_params(int64_t begin, int64_t end) const {
  if (!discardable_) return;
  commit(master_, begin, end);
  commit(compute_, begin, end);
}

void ParamBuffer::commit_grads(int64_t begin, int64_t end) const {
  if (discardable_) commit(grad_, begin, end);
}

void ParamBuffer::zero_grad() {
  kernels::fill_zero(ctx_, grad_.raw(), int64_t(grad_.nbytes()));
}

kernels::GemmOperand ParamBuffer::weight(int h) const {
  const int64_t off = specs_[size_t(h)].offset;
  if (compute_.defined()) return kernels::GemmOperand{compute_.dtype(), compute_.raw()}.at(off);
  return kernels::GemmOperand::of(master_.f32() + off);
}

}  // namespace mtron::model
