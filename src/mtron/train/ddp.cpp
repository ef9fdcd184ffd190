#include "mtron/train/ddp.h"

#include <algorithm>

#include "mtron/kernels/device.h"
#include "mtron/kernels/elementwise.h"

namespace mtron::train {

namespace {

bool embedding_or_output(const model::ParamSpec& s) {
  return s.name == "embedding.word_embeddings.weight" || s.name == "output_layer.weight";
}

}  // namespace

bool muon_steps(const model::ParamSpec& s) {
  return s.name.ends_with(".weight") && s.global_shape.size() >= 2 && !embedding_or_output(s);
}

std::vector<optim::OptimRange> optim_ranges(const model::ParamBuffer& p,
                                            const ParallelState& ps,
                                            bool experts,
                                            const DdpOptions& o) {
  const bool sharded = ps.config().use_distributed_optimizer || o.layer_wise;
  const bool dp_first = experts ? ps.edp_rank() == 0 : ps.dp_rank() == 0 && ps.cp_rank() == 0;
  std::vector<optim::OptimRange> r;
  for (const model::ParamSpec& s : p.specs()) {
    const bool tp_first = experts ? (!s.tp_replicated() || ps.etp_rank() == 0)
                                  : (!s.tp_replicated() || ps.tp_rank() == 0);
    const bool counted = !s.tied_copy && tp_first && (sharded || dp_first);
    const bool qk_norm = s.name.find("q_layernorm.") != std::string::npos ||
                         s.name.find("k_layernorm.") != std::string::npos;
    r.push_back({s.offset, s.offset + s.numel(), s.weight_decay || (o.wd_qk_layernorm && qk_norm),
                 counted, !experts && o.decoupled_lr && embedding_or_output(s),
                 o.muon != nullptr && muon_steps(s)});
  }
  return r;
}

int64_t ddp_bucket_elems(int64_t flag,
                         int64_t num_buckets,
                         int64_t rank_params,
                         bool overlap_grad_reduce,
                         int64_t dp_size) {
  if (!overlap_grad_reduce) return 0;
  if (num_buckets > 0) return std::max<int64_t>(1, rank_params / num_buckets);
  if (flag > 0) return flag;
  return std::max<int64_t>(40000000, 1000000 * dp_size);
}

optim::OptimBuffer ddp_buffer(const model::RunCtx& rc,
                              const ParallelState& ps,
                              const DdpOptions& o,
                              model::ParamBuffer& p,
                              bool experts,
                              uint64_t seed,
                              std::vector<std::unique_ptr<GradSync>>& syncs) {
  const bool sharded = ps.config().use_distributed_optimizer;
  Comm& dp = experts ? ps.edp() : ps.dp_cp();
  p.allocate(rc.precision, sharded ? dp.size() : 1, o.bucket_elems, rc.k,
             o.unit_buckets && !experts, o.discardable && !experts);
  syncs.push_back(std::make_unique<GradSync>(p, dp, sharded, o.grad_reduce_in_bf16));
  p.init(seed, o.shard_params && !experts ? syncs.back()->shards()
                                          : std::vector<std::pair<int64_t, int64_t>>{});
  if (o.layer_wise) syncs.back()->own_whole_params();
  optim::OptimBuffer b{.master = p.master_flat().f32(),
                       .grad = p.grad_flat().f32(),
                       .compute = p.compute_flat().defined() ? p.compute_flat().raw() : nullptr,
                       .compute_dtype = compute_dtype(rc.precision),
                       .size = p.size(),
                       .ranges = optim_ranges(p, ps, experts, o),
                       .shards = {},
                       .muon = {}};
  for (const auto& [lo, hi] : syncs.back()->shards()) b.shards.push_back({lo, hi});
  if (!o.muon) return b;
  Comm& tp = experts ? ps.etp() : ps.tp();
  for (const model::ParamSpec& s : p.specs()) {
    if (!muon_steps(s)) continue;
    optim::MuonMatrix m{.begin = s.offset,
                        .global = s.global_shape,
                        .local = s.local_shape,
                        .shard_dim = s.shard_dim,
                        .shard_offset = s.shard_offset,
                        .group = s.tp_replicated() ? nullptr : &tp,
                        .qkv_rows = {},
                        .weight_decay = s.weight_decay};
    int64_t per_group = 0;
    for (int64_t r : o.qkv_rows) per_group += r;
    // Megatron splits a linear_qkv weight whose rows are whole query groups.
    if (o.muon->split_qkv && s.name.ends_with("linear_qkv.weight") && per_group > 0 &&
        s.global_shape[0] % per_group == 0)
      m.qkv_rows = o.qkv_rows;
    b.muon.push_back(std::move(m));
  }
  return b;
}

void finalize_model_grads(const model::RunCtx& rc,
                          const ParallelState& ps,
                          std::vector<std::unique_ptr<model::GPTChunk>>& chunks,
                          std::vector<std::unique_ptr<GradSync>>& grad_syncs,
                          std::vector<std::unique_ptr<GradSync>>& expert_syncs) {
  // Tied embeddings on different stages: both copies get the summed gradient, before the
  // data-parallel reduction (the two stages' buffers are laid out differently).
  if (ps.in_embedding_group()) {
    for (auto& c : chunks) {
      model::ParamBuffer& p = c->params();
      for (size_t i = 0; i < p.specs().size(); ++i) {
        if (p.spec(int(i)).cross_stage)
          ps.embedding().all_reduce(p.grad(int(i)), p.spec(int(i)).numel());
      }
    }
  }
  for (auto& g : grad_syncs) g->finish();
  for (auto& g : expert_syncs) g->finish();
  // TP-partial parameters (ParamSpec::sequence_parallel: under SP the norms and row-parallel
  // biases, which saw only this rank's rows; the qk norms, only its heads; MLA's down projections)
  // are summed over TP. With the distributed optimizer only the shard part of the sum is used; TP
  // ranks share the layout.
  if (rc.tp.size > 1) {
    for (size_t c = 0; c < chunks.size(); ++c) {
      model::ParamBuffer& p = chunks[c]->params();
      // Their buffer ranges; with FSDP's sharded gradients only the parts in this rank's shards,
      // the rest not being held (the same ranges on every TP rank).
      const GradSync& sync = *grad_syncs[c];
      const auto shards = sync.shards();
      std::vector<std::pair<int64_t, int64_t>> ranges;
      int64_t total = 0;
      for (const model::ParamSpec& s : p.specs()) {
        if (!s.sequence_parallel) continue;
        const int64_t lo = s.offset, hi = s.offset + s.numel();
        if (!sync.grads_sharded()) {
          ranges.emplace_back(lo, hi);
        } else {
          for (const auto& [a, b] : shards)
            if (std::max(a, lo) < std::min(b, hi))
              ranges.emplace_back(std::max(a, lo), std::min(b, hi));
        }
      }
      for (const auto& [lo, hi] : ranges) total += hi - lo;
      if (total == 0) continue;
      const Tensor packed = Tensor::empty({total}, DType::kF32, rc.k.device);
      // Packs (to_packed) or unpacks the sequence-parallel gradients.
      auto move = [&](bool to_packed) {
        int64_t at = 0;
        for (const auto& [lo, hi] : ranges) {
          float* g = p.grad_flat().f32() + lo;
          float* q = packed.f32() + at;
          kernels::copy(rc.k, to_packed ? q : g, to_packed ? g : q,
                        int64_t(sizeof(float)) * (hi - lo));
          at += hi - lo;
        }
      };
      move(true);
      ps.tp().all_reduce(packed.f32(), total);
      move(false);
    }
  }
}

}  // namespace mtron::train
