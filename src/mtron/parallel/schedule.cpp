#include "mtron/parallel/schedule.h"

#include <algorithm>
#include <map>
#include <memory>

#include "mtron/core/error.h"
#include "mtron/core/tensor.h"
#include "mtron/core/timer.h"
#include "mtron/kernels/elementwise.h"

namespace mtron::parallel {

std::vector<PipelineOp> pipeline_ops(
    int rank, int pp, int vpp, int64_t M, int64_t group, bool forward_only) {
  if (vpp == 1) group = M;
  MT_ASSERT(group >= 1 && group <= M && (M % group == 0 || M % group >= pp || vpp == 1),
            "interleaved schedule: micro-batch groups of ", group, " over ", M,
            " micro-batches at PP ", pp);
  const int64_t total = M * vpp;
  // Megatron's schedule table (get_schedule_table): the chunk and micro-batch of the k-th
  // forward; micro-batches go in groups through every chunk before the next group starts, the
  // last group taking what is left. Backwards run the chunks in reverse.
  std::vector<std::pair<int, int64_t>> table;
  table.reserve(size_t(total));
  for (int64_t first = 0; first < M; first += group) {
    const int64_t end = first + group >= M ? M : first + group;
    for (int c = 0; c < vpp; ++c)
      for (int64_t mb = first; mb < end; ++mb) table.emplace_back(c, mb);
  }
  auto op = [&](int64_t k, bool forward) {
    const auto [chunk, mb] = table[size_t(k)];
    return PipelineOp{forward, forward ? chunk : vpp - 1 - chunk, mb};
  };
  int64_t warmup;
  if (forward_only) {
    warmup = total;
  } else if (vpp == 1) {
    warmup = std::min<int64_t>(pp - rank - 1, M);
  } else {
    warmup = std::min<int64_t>(int64_t(pp - rank - 1) * 2 + int64_t(vpp - 1) * group, total);
  }
  std::vector<PipelineOp> ops;
  ops.reserve(size_t(2 * total));
  for (int64_t k = 0; k < warmup; ++k) ops.push_back(op(k, true));
  for (int64_t k = 0; k < total - warmup; ++k) {
    ops.push_back(op(warmup + k, true));
    ops.push_back(op(k, false));
  }
  if (!forward_only) {
    for (int64_t k = total - warmup; k < total; ++k) ops.push_back(op(k, false));
  }
  return ops;
}

PipelineTimes run_pipeline(
    StageModel& model, Comm& pp, int vpp, int64_t M, int64_t group, bool forward_only) {
  PipelineTimes times;
  const int P = pp.size(), r = pp.rank();
  const int last_vs = P * vpp - 1;
  const int64_t n = model.message_elems();
  const kernels::Ctx k = model.ctx();
  const int64_t bytes = int64_t(sizeof(float)) * n;
  const int next = (r + 1) % P, prev = (r + P - 1) % P;
  // Tags: forward activation into virtual stage s is 2s, gradient into s is 2s + 1.
  auto fwd_tag = [](int vs) { return 2 * vs; };
  auto bwd_tag = [](int vs) { return 2 * vs + 1; };

  struct Pending {
    std::unique_ptr<Request> req;
    Tensor buf;
  };
  std::vector<Pending> sends;
  std::map<std::pair<int, int64_t>, Tensor> inputs;  // received activations until backward
  Tensor grad_in = Tensor::empty({n}, DType::kF32, k.device);

  for (const PipelineOp& op : pipeline_ops(r, P, vpp, M, group, forward_only)) {
    const int vs = op.chunk * P + r;
    const auto key = std::make_pair(op.chunk, op.microbatch);
    if (op.forward) {
      Tensor in;
      if (vs > 0) {
        in = Tensor::empty({n}, DType::kF32, k.device);
        const double t0 = now_seconds();
        pp.recv(in.f32(), n, DType::kF32, prev, fwd_tag(vs));
        times.wait_s += now_seconds() - t0;
      }
      const double t0 = now_seconds();
      const float* out = model.forward(op.chunk, op.microbatch, in.defined() ? in.f32() : nullptr);
      times.compute_s += now_seconds() - t0;
      if (in.defined() && !forward_only) inputs[key] = std::move(in);
      if (vs < last_vs) {
        Tensor buf = Tensor::empty({n}, DType::kF32, k.device);
        kernels::copy(k, buf.f32(), out, bytes);
        sends.push_back({pp.isend(buf.f32(), n, DType::kF32, next, fwd_tag(vs + 1)), buf});
      }
    } else {
      const float* dout = nullptr;
      if (vs < last_vs) {
        const double t0 = now_seconds();
        pp.recv(grad_in.f32(), n, DType::kF32, next, bwd_tag(vs));
        times.wait_s += now_seconds() - t0;
        dout = grad_in.f32();
      }
      const double t0 = now_seconds();
      const float* din = model.backward(op.chunk, op.microbatch, dout);
      times.compute_s += now_seconds() - t0;
      inputs.erase(key);
      if (vs > 0) {
        Tensor buf = Tensor::empty({n}, DType::kF32, k.device);
        kernels::copy(k, buf.f32(), din, bytes);
        sends.push_back({pp.isend(buf.f32(), n, DType::kF32, prev, bwd_tag(vs - 1)), buf});
      }
    }
    // Free the buffers of sends that completed.
    sends.erase(
        std::remove_if(sends.begin(), sends.end(), [](Pending& s) { return s.req->test(); }),
        sends.end());
  }
  const double t0 = now_seconds();
  for (Pending& s : sends) s.req->wait();
  times.wait_s += now_seconds() - t0;
  MT_ASSERT(inputs.empty(), "pipeline step ended with ", inputs.size(), " unconsumed inputs");
  return times;
}

}  // namespace mtron::parallel
