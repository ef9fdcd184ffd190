#include "mtron/model/gpt.h"

#include <fmt/core.h>

#include <algorithm>
#include <type_traits>

#include "mtron/kernels/device.h"
#include "mtron/kernels/elementwise.h"
#include "mtron/kernels/embedding.h"
#include "mtron/model/lm_head.h"

namespace mtron::model {
namespace {

// Arenas live on the device the model runs on.
void use_device(Arena& a, Device d) {
  if (a.device() != d) a = Arena(d);
}

// A copy of ids on rc's device, in `arena`, queued without waiting for it.
// A host vector copied to `arena` on the run's device (null when empty).
template <typename T>
const T* on_device(const RunCtx& rc, Arena& arena, const std::vector<T>& v) {
  if (v.empty()) return nullptr;
  T* d = arena.alloc<T>(int64_t(v.size()));
  kernels::copy_from_host_async(rc.k, d, v.data(), int64_t(sizeof(T) * v.size()));
  return d;
}

}  // namespace

std::string Recompute::describe() const {
  switch (granularity) {
    case RecomputeGranularity::kNone:
      return "none";
    case RecomputeGranularity::kSelective:
      return "selective (" + modules.describe() + ")";
    case RecomputeGranularity::kFull:
      return method == RecomputeMethod::kUniform
                 ? fmt::format("full, uniform groups of {} layer(s)", num_layers)
                 : fmt::format("full, block: the first {} layer(s) of each stage", num_layers);
  }
  MT_ASSERT(false, "bad RecomputeGranularity");
}

GPTChunk::GPTChunk(const ModelConfig& cfg,
                   ChunkPlacement place,
                   const parallel::TensorParallel& tp,
                   Recompute recompute,
                   const parallel::ExpertParallel& ep)
    : cfg_(cfg), place_(place), recompute_(recompute) {
  MT_ASSERT(place.num_layers >= 0, "negative layer count ", place.num_layers);
  const int64_t h = cfg.hidden_size;
  const int64_t V = cfg.padded_vocab_size(tp.size);
  vocab_local_ = V / tp.size;
  vocab_start_ = tp.rank * vocab_local_;
  auto word_embedding_spec = [&] {
    return ParamSpec{.name = "embedding.word_embeddings.weight",
                     .global_shape = {V, h},
                     .shard_dim = 0,
                     .shard_offset = vocab_start_,
                     .local_shape = {vocab_local_, h},
                     .init = ParamInit::kNormal,
                     .init_std = cfg.init_method_std};
  };
  // Word embeddings used on two pipeline stages: tied to the output layer, or read by the MTP
  // depths.
  const bool second_use = !cfg.untie_embeddings_and_output_weights || cfg.mtp_num_layers > 0;
  const bool cross_stage = second_use && place.has_embedding != place.has_head;
  if (place.has_embedding) {
    ParamSpec s = word_embedding_spec();
    s.cross_stage = cross_stage;
    wte_ = params_.add(s);
    if (cfg.position_embedding_type == PositionEmbedding::kLearnedAbsolute) {
      const Shape s = {cfg.max_position_embeddings, h};
      wpe_ = params_.add(ParamSpec{.name = "embedding.position_embeddings.weight",
                                   .global_shape = s,
                                   .local_shape = s,
                                   .init = ParamInit::kNormal,
                                   .init_std = cfg.init_method_std});
    }
  }
  layers_.reserve(size_t(place.num_layers));
  for (int64_t i = 0; i < place.num_layers; ++i) {
    layer_first_.push_back(int(params_.specs().size()));
    params_.begin_unit();
    layers_.emplace_back(cfg, place.first_layer + i, tp, ep, params_, expert_params_,
                         recompute.selective());
  }
  if (place.has_head) {
    head_first_ = int(params_.specs().size());
    params_.begin_unit();
    lnf_.add_params(cfg, "decoder.final_layernorm", tp.sequence_parallel, params_);
    if (cfg.untie_embeddings_and_output_weights) {
      ParamSpec s = word_embedding_spec();
      s.name = "output_layer.weight";
      out_w_ = params_.add(s);
    }
    if (wte_ < 0 && second_use) {
      // The word embeddings' second use across pipeline stages: the last stage holds a replica,
      // initialised identically (same name, same key) and kept equal by summing the two
      // gradients.
      ParamSpec s = word_embedding_spec();
      s.tied_copy = true;
      s.cross_stage = true;
      wte_ = params_.add(s);
    }
    if (!cfg.untie_embeddings_and_output_weights) out_w_ = wte_;
    mtp_.reserve(size_t(cfg.mtp_num_layers));
    for (int64_t k = 0; k < cfg.mtp_num_layers; ++k)
      mtp_.emplace_back(cfg, k, tp, ep, params_, expert_params_, recompute.selective());
  }
}

bool GPTChunk::recomputed(int64_t i) const {
  if (recompute_.granularity != RecomputeGranularity::kFull) return false;
  return recompute_.method == RecomputeMethod::kUniform || i < recompute_.num_layers;
}

int64_t GPTChunk::group_end(int64_t i) const {
  if (recompute_.method == RecomputeMethod::kBlock) return i + 1;
  const int64_t n = std::max<int64_t>(1, recompute_.num_layers);
  return std::min<int64_t>((i / n + 1) * n, place_.num_layers);
}

std::pair<int64_t, int64_t> GPTChunk::param_range(int first, int next_first) const {
  const int64_t end = next_first < 0 ? params_.size() : params_.spec(next_first).offset;
  return {params_.spec(first).offset, end};
}

void GPTChunk::use_part(const ParamsUse& params, int64_t i, PartUse use) const {
  if (!params) return;
  const int64_t L = int64_t(layers_.size());
  if (use == PartUse::kPrefetch && (i < 0 || i > L || (i == L && !place_.has_head))) return;
  for_part(i, [&](int64_t lo, int64_t hi) { params(lo, hi, use); });
}

void GPTChunk::for_part(int64_t i, const std::function<void(int64_t, int64_t)>& f) const {
  const int64_t L = int64_t(layers_.size());
  // The handle after part i's parameters (-1: the rest of the buffer).
  auto next_first = [&](int64_t j) {
    return j + 1 < L ? layer_first_[size_t(j + 1)] : head_first_;
  };
  const int first = i < 0 ? 0 : i < L ? layer_first_[size_t(i)] : head_first_;
  const auto [lo, hi] = param_range(first, i < L ? next_first(i) : -1);
  f(lo, hi);
  const bool reads_embedding = out_w_ == wte_ || !mtp_.empty();
  if (i == L && reads_embedding && wte_ >= 0 && wte_ < head_first_) {
    const ParamSpec& e = params_.spec(wte_);
    f(e.offset, e.offset + e.numel());
  }
}

float* GPTChunk::embed(const RunCtx& rc,
                       Arena& out_arena,
                       const TokenLayout& tl,
                       const int32_t* tokens,
                       const int32_t* wpe_pos,
                       int64_t layer) {
  const auto& tp = rc.tp;
  const int64_t h = cfg_.hidden_size, N = tl.rows();
  scratch_.reset();
  // The vocabulary-parallel lookup gives partial sums over the TP ranks' vocabulary shards.
  float* emb = tp.sequence_parallel ? scratch_.alloc<float>(N * h) : out_arena.alloc<float>(N * h);
  kernels::embedding_forward(rc.k, emb, tokens, params_.master(wte_), N, h, vocab_start_,
                             vocab_local_, false);
  parallel::reduce_from_tp(tp, emb, N * h);
  if (wpe_ >= 0) {
    kernels::embedding_forward(rc.k, emb, wpe_pos, params_.master(wpe_), N, h, 0,
                               cfg_.max_position_embeddings, true);
  }
  float* mine = emb;
  if (tp.sequence_parallel) {
    mine = out_arena.alloc<float>(tp.sp_rows(N) * h);
    parallel::scatter_to_sp(rc.k, tp, mine, emb, N, h);
  }
  hidden_dropout(rc, cfg_, tl, {layer, "embedding"}, mine);
  return mine;
}

void GPTChunk::embed_backward(const RunCtx& rc,
                              const TokenLayout& tl,
                              float* g,
                              const int32_t* tokens,
                              const int32_t* wpe_pos,
                              int64_t layer) {
  const auto& tp = rc.tp;
  const int64_t h = cfg_.hidden_size, N = tl.rows();
  scratch_.reset();
  hidden_dropout(rc, cfg_, tl, {layer, "embedding"}, g);
  float* dfull = g;
  if (tp.sequence_parallel) {  // conjugate of the scatter: gather the sequence back
    dfull = scratch_.alloc<float>(N * h);
    parallel::gather_from_sp(tp, dfull, g, N, h);
  }
  if (wpe_ >= 0) {
    kernels::embedding_backward(rc.k, params_.grad(wpe_), dfull, wpe_pos, N, h, 0,
                                cfg_.max_position_embeddings);
  }
  kernels::embedding_backward(rc.k, params_.grad(wte_), dfull, tokens, N, h, vocab_start_,
                              vocab_local_);
}

void GPTChunk::mtp_forward(
    const RunCtx& rc, const MicroBatch& mb, Stash& st, const TokenLayout& tl, double* mtp_loss) {
  const auto& tp = rc.tp;
  const int64_t N = tl.rows(), Nl = tp.sp_rows(N), h = cfg_.hidden_size, S = cfg_.seq_length;
  const size_t D = mtp_.size();
  MT_ASSERT(mb.mtp_tokens.size() == D * size_t(N) && mb.mtp_labels.size() == D * size_t(N) &&
                mb.mtp_dloss.size() == D,
            "a micro-batch without the tokens ahead for multi-token prediction");
  st.mtp_tokens.assign(D, nullptr);
  st.mtp.assign(D, {});
  st.mtp_dhead.assign(D, nullptr);
  const float* hid = st.lnf_out;
  for (size_t k = 0; k < D; ++k) {
    const int64_t depth = int64_t(k) + 1;
    // The rows with a target `depth` positions further lead: only the sequence's last chunk
    // (with CP, the last of CP rank 0's two) ends in positions without one.
    int64_t rows = 0;
    while (rows < N && mb.pos[size_t(rows)] + depth < S) ++rows;
    for (int64_t n = rows; n < N; ++n)
      MT_ASSERT(mb.pos[size_t(n)] + depth >= S, "rows with an MTP target after rows without");
    const auto part = [&](const auto& v) {
      using T = typename std::decay_t<decltype(v)>::value_type;
      if (v.empty()) return std::vector<T>();
      return std::vector<T>(v.begin() + int64_t(k) * N, v.begin() + (int64_t(k) + 1) * N);
    };
    st.mtp_tokens[k] = on_device(rc, st.keep, part(mb.mtp_tokens));
    const int32_t* labels = on_device(rc, st.keep, part(mb.mtp_labels));
    const float* mask = on_device(rc, st.keep, part(mb.mtp_loss_mask));
    const float* e =
        embed(rc, st.keep, tl, st.mtp_tokens[k], nullptr, cfg_.num_layers + int64_t(k));
    float* out = st.keep.alloc<float>(Nl * h);
    scratch_.reset();
    mtp_[k].forward(rc, tl, st.mtp[k], st.keep, scratch_, e, hid, out);
    if (MoELayer* moe = mtp_[k].layer().moe()) {  // (a training forward)
      st.moe.add(st.mtp[k].layer.moe.stats);
      moe->count_tokens(st.mtp[k].layer.moe);
    }
    float* full = out;
    if (tp.sequence_parallel) {
      full = scratch_.alloc<float>(N * h);
      parallel::enter_tp_forward(tp, full, out, N, h);
    }
    // The shared output layer on those rows; each of the global batch's targets whose loss
    // counts weighs the scaling factor / D / their number (MicroBatch::mtp_dloss).
    float* dh = st.keep.alloc<float>(N * h);
    kernels::fill_zero(rc.k, dh + rows * h, int64_t(sizeof(float)) * (N - rows) * h);
    LmHeadArgs a{.h = as_gemm_input(rc, scratch_, full, rows * h),
                 .w = params_.weight(out_w_),
                 .dw = params_.grad(out_w_),
                 .dh = dh,
                 .targets = labels,
                 .mask = mask,
                 .loss_sum = mtp_loss + k,
                 .N = rows,
                 .hidden = h,
                 .Vl = vocab_local_,
                 .col_start = vocab_start_,
                 .vocab_valid = cfg_.vocab_size,
                 .dloss = mb.mtp_dloss[k]};
    lm_head_loss(rc, scratch_, a);
    st.mtp_dhead[k] = dh;
    hid = out;
  }
}

void GPTChunk::mtp_backward(const RunCtx& rc, Stash& st, const TokenLayout& tl, float* dhidden) {
  const auto& tp = rc.tp;
  const int64_t N = tl.rows(), Nl = tp.sp_rows(N), h = cfg_.hidden_size;
  const int64_t bytes = int64_t(sizeof(float)) * Nl * h;
  float* from_next = nullptr;  // d(loss)/d(this depth's output) through the next depth
  for (int64_t k = int64_t(mtp_.size()) - 1; k >= 0; --k) {
    scratch_.reset();
    float* dout = st.keep.alloc<float>(Nl * h);
    float* dhead = tp.sequence_parallel ? dout : st.mtp_dhead[size_t(k)];
    parallel::enter_tp_backward(tp, dhead, st.mtp_dhead[size_t(k)], N, h);
    if (dhead != dout) kernels::copy(rc.k, dout, dhead, bytes);
    if (from_next) kernels::add(rc.k, dout, dout, from_next, Nl * h);
    float* de = st.keep.alloc<float>(Nl * h);
    float* dhid = dhidden;
    if (k > 0) {
      dhid = st.keep.alloc<float>(Nl * h);
      kernels::fill_zero(rc.k, dhid, bytes);
    }
    mtp_[size_t(k)].backward(rc, tl, st.mtp[size_t(k)], scratch_, dout, de, dhid);
    embed_backward(rc, tl, de, st.mtp_tokens[size_t(k)], nullptr, cfg_.num_layers + k);
    from_next = dhid;
  }
}

KvCache GPTChunk::make_kv_cache(const RunCtx& rc, int64_t B, int64_t capacity) const {
  const int64_t groups = B * cfg_.query_groups() / rc.tp.size;
  const bool mla = cfg_.mla.enabled;  // the compressed latent only (model/mla.h)
  const int64_t krow = mla ? B * cfg_.mla.latent_width() : groups * cfg_.qk_dim();
  const int64_t vrow = mla ? 0 : groups * cfg_.v_dim();
  KvCache c;
  c.storage = Arena(rc.k.device);
  for (size_t i = 0; i < layers_.size(); ++i) {
    c.layers.push_back({c.storage.alloc<float>(capacity * krow),
                        mla ? nullptr : c.storage.alloc<float>(capacity * vrow), capacity, 0});
  }
  return c;
}

void GPTChunk::forward_cached(
    const RunCtx& rc, const MicroBatch& mb, KvCache& cache, float* logits, int64_t rows) {
  MT_ASSERT(place_.has_embedding && place_.has_head && rc.tp.size == 1 && rc.cp.size == 1,
            "generation runs a whole model in one process");
  MT_ASSERT(cache.layers.size() == layers_.size(), "a KV cache of another model");
  for (Arena* a : {&scratch_, &cached_}) use_device(*a, rc.k.device);
  cached_.reset();
  TokenLayout tl = mb.layout();
  tl.pos = on_device(rc, cached_, mb.pos);
  tl.drop.on = false;  // generation runs without dropout
  const int64_t N = tl.rows(), h = cfg_.hidden_size;
  MT_ASSERT(rows >= 1 && rows <= N, "logits of ", rows, " of ", N, " rows");
  const float* x = embed(rc, cached_, tl, on_device(rc, cached_, mb.tokens), tl.pos);
  for (size_t i = 0; i < layers_.size(); ++i) {
    float* y = cached_.alloc<float>(N * h);
    scratch_.reset();
    layers_[i].forward(rc, tl, nullptr, scratch_, scratch_, x, y, &cache.layers[i]);
    x = y;
  }
  for (LayerKv& l : cache.layers) l.length += mb.S;
  scratch_.reset();
  float* lnf = scratch_.alloc<float>(rows * h);
  float* mean = scratch_.alloc<float>(rows);
  float* rstd = scratch_.alloc<float>(rows);
  lnf_.forward(rc, cfg_, params_, lnf, mean, rstd, x + (N - rows) * h, rows);
  linear_forward(rc, logits, as_gemm_input(rc, scratch_, lnf, rows * h), params_.weight(out_w_),
                 nullptr, rows, h, vocab_local_);
}

std::vector<MoELayer*> GPTChunk::moe_layers() {
  std::vector<MoELayer*> v;
  for (TransformerLayer& l : layers_)
    if (l.moe()) v.push_back(l.moe());
  for (MtpLayer& d : mtp_)
    if (d.layer().moe()) v.push_back(d.layer().moe());
  return v;
}

const float* GPTChunk::forward(const RunCtx& rc,
                               const MicroBatch& mb,
                               Stash& st,
                               const float* input,
                               bool train,
                               const ParamsUse& params,
                               const GradsUse& grads_use) {
  const auto& tp = rc.tp;
  for (Arena* a : {&st.keep, &scratch_, &recompute_arena_}) use_device(*a, rc.k.device);
  st.keep.reset();
  st.tokens = on_device(rc, st.keep, mb.tokens);
  st.labels = on_device(rc, st.keep, mb.labels);
  st.loss_mask = on_device(rc, st.keep, mb.loss_mask);
  st.pos = on_device(rc, st.keep, mb.pos);
  st.embed_pos = wpe_ < 0 || mb.embed_pos.empty() ? st.pos : on_device(rc, st.keep, mb.embed_pos);
  TokenLayout tl = mb.layout();
  tl.pos = st.pos;
  tl.drop.on = tl.drop.on && train;  // evaluation runs without dropout
  tl.train = train;
  const int64_t N = tl.rows(), Nl = tp.sp_rows(N), h = cfg_.hidden_size;
  st.layers.assign(layers_.size(), {});
  st.inputs.assign(layers_.size(), nullptr);
  st.loss_sum = 0;
  st.moe = MoEStats{};
  st.num_tokens = N;
  st.dhead = nullptr;
  st.mtp_loss_sum.assign(place_.has_head ? mtp_.size() : 0, 0.0);

  const float* x = input;
  if (place_.has_embedding) {
    use_part(params, -1, PartUse::kUse);
    use_part(params, 0, PartUse::kPrefetch);
    x = embed(rc, st.keep, tl, st.tokens, st.embed_pos);
    use_part(params, -1, PartUse::kRelease);
  }
  MT_ASSERT(x != nullptr, "a chunk without embeddings needs an input");

  const int64_t L = int64_t(layers_.size());
  for (int64_t i = 0; i < L; ++i) {
    use_part(params, i, PartUse::kUse);
    use_part(params, i + 1, PartUse::kPrefetch);
    st.inputs[size_t(i)] = x;
    scratch_.reset();
    float* y;
    if (recomputed(i)) {
      // Only the group's input stays; the group's inner outputs are transient.
      const bool group_start = recompute_.method == RecomputeMethod::kBlock ||
                               i % std::max<int64_t>(1, recompute_.num_layers) == 0;
      if (group_start) recompute_arena_.reset();
      const bool last_in_group = i + 1 == group_end(i);
      y = last_in_group ? st.keep.alloc<float>(Nl * h) : recompute_arena_.alloc<float>(Nl * h);
      TransformerLayer::Stash tmp;
      layers_[size_t(i)].forward(rc, tl, &tmp, recompute_arena_, scratch_, x, y);
      st.moe.add(tmp.moe.stats);
      if (train && layers_[size_t(i)].moe()) layers_[size_t(i)].moe()->count_tokens(tmp.moe);
    } else {
      y = st.keep.alloc<float>(Nl * h);
      layers_[size_t(i)].forward(rc, tl, &st.layers[size_t(i)], st.keep, scratch_, x, y);
      st.moe.add(st.layers[size_t(i)].moe.stats);
      if (train && layers_[size_t(i)].moe())
        layers_[size_t(i)].moe()->count_tokens(st.layers[size_t(i)].moe);
    }
    use_part(params, i, PartUse::kRelease);
    x = y;
  }
  st.out = x;
  if (!place_.has_head) return x;

  scratch_.reset();
  use_part(params, L, PartUse::kUse);
  if (train && grads_use) for_part(L, grads_use);
  st.lnf_mean =
      cfg_.normalization == Normalization::kLayerNorm ? st.keep.alloc<float>(Nl) : nullptr;
  st.lnf_rstd = st.keep.alloc<float>(Nl);
  // The output layer's GEMM input: in bf16 without SP and MTP written so by the norm.
  Act head_in;
  if (mtp_.empty() && !tp.sequence_parallel && bf16_gemm_inputs(rc)) {
    bf16* lnf = scratch_.alloc<bf16>(N * h);
    lnf_.forward(rc, cfg_, params_, lnf, st.lnf_mean, st.lnf_rstd, x, Nl);
    head_in = Act::of(lnf);
  } else {
    // (kept as the MTP depths' input)
    float* lnf = mtp_.empty() ? scratch_.alloc<float>(Nl * h) : st.keep.alloc<float>(Nl * h);
    st.lnf_out = lnf;
    lnf_.forward(rc, cfg_, params_, lnf, st.lnf_mean, st.lnf_rstd, x, Nl);
    float* full = lnf;
    if (tp.sequence_parallel) {
      full = scratch_.alloc<float>(N * h);
      parallel::enter_tp_forward(tp, full, lnf, N, h);
    }
    head_in = as_gemm_input(rc, scratch_, full, N * h);
  }
  if (train) st.dhead = st.keep.alloc<float>(N * h);
  double* acc = st.loss_dev;
  if (!acc) {
    acc = st.keep.alloc<double>(int64_t(1 + mtp_.size()));
    kernels::fill_zero(rc.k, acc, int64_t(sizeof(double) * (1 + mtp_.size())));
  }
  LmHeadArgs a{.h = head_in,
               .w = params_.weight(out_w_),
               .dw = train ? params_.grad(out_w_) : nullptr,
               .dh = st.dhead,
               .targets = st.labels,
               .mask = st.loss_mask,
               .loss_sum = acc,
               .logits = st.logits_out,
               .N = N,
               .hidden = h,
               .Vl = vocab_local_,
               .col_start = vocab_start_,
               .vocab_valid = cfg_.vocab_size,
               .dloss = mb.dloss};
  lm_head_loss(rc, scratch_, a);
  if (train && !mtp_.empty()) mtp_forward(rc, mb, st, tl, acc + 1);
  use_part(params, L, PartUse::kRelease);
  if (!st.loss_dev) {
    std::vector<double> sums(1 + mtp_.size());
    kernels::copy_to_host(rc.k, sums.data(), acc, int64_t(sizeof(double) * sums.size()));
    st.loss_sum = sums[0];
    std::copy(sums.begin() + 1, sums.end(), st.mtp_loss_sum.begin());
  }
  return nullptr;
}

const float* GPTChunk::backward(const RunCtx& rc,
                                const MicroBatch& mb,
                                Stash& st,
                                const float* dout,
                                const GradsReady& grads_ready,
                                const ParamsUse& params,
                                const GradsUse& grads_use) {
  auto ready = [&](int handle) {
    if (grads_ready) grads_ready(params_.spec(handle).offset);
  };
  auto write_grads = [&](int64_t part) {
    if (grads_use) for_part(part, grads_use);
  };
  const auto& tp = rc.tp;
  TokenLayout tl = mb.layout();
  tl.pos = st.pos;
  const int64_t N = tl.rows(), Nl = tp.sp_rows(N), h = cfg_.hidden_size;
  float* g = st.keep.alloc<float>(Nl * h);

  if (place_.has_head) {
    MT_ASSERT(st.dhead, "backward of the head chunk needs a training forward");
    use_part(params, int64_t(layers_.size()), PartUse::kUse);
    use_part(params, int64_t(layers_.size()) - 1, PartUse::kPrefetch);
    write_grads(int64_t(layers_.size()));
    scratch_.reset();
    float* dlnf = !tp.sequence_parallel ? st.dhead
                  : mtp_.empty()        ? scratch_.alloc<float>(Nl * h)
                                        : st.keep.alloc<float>(Nl * h);
    parallel::enter_tp_backward(tp, dlnf, st.dhead, N, h);
    if (!mtp_.empty()) mtp_backward(rc, st, tl, dlnf);
    kernels::fill_zero(rc.k, g, int64_t(sizeof(float)) * Nl * h);
    lnf_.backward(rc, cfg_, params_, g, dlnf, st.out, st.lnf_mean, st.lnf_rstd, Nl);
    use_part(params, int64_t(layers_.size()), PartUse::kRelease);
    ready(head_first_);
  } else {
    MT_ASSERT(dout, "backward of a middle chunk needs the output gradient");
    kernels::copy(rc.k, g, dout, int64_t(sizeof(float)) * Nl * h);
  }

  for (int64_t i = int64_t(layers_.size()) - 1; i >= 0; --i) {
    if (recomputed(i) && i + 1 == group_end(i)) {
      // Rebuild the whole group's stashes from its input.
      const int64_t start = recompute_.method == RecomputeMethod::kBlock
                                ? i
                                : i / std::max<int64_t>(1, recompute_.num_layers) *
                                      std::max<int64_t>(1, recompute_.num_layers);
      recompute_arena_.reset();
      const float* x = st.inputs[size_t(start)];
      for (int64_t j = start; j <= i; ++j) {
        use_part(params, j, PartUse::kUse);
        scratch_.reset();
        float* y = recompute_arena_.alloc<float>(Nl * h);
        layers_[size_t(j)].forward(rc, tl, &st.layers[size_t(j)], recompute_arena_, scratch_, x, y);
        use_part(params, j, PartUse::kRelease);
        x = y;
      }
    }
    use_part(params, i, PartUse::kUse);
    use_part(params, i - 1, PartUse::kPrefetch);
    write_grads(i);
    scratch_.reset();
    layers_[size_t(i)].backward(rc, tl, st.layers[size_t(i)], scratch_, g);
    use_part(params, i, PartUse::kRelease);
    ready(layer_first_[size_t(i)]);
  }

  if (place_.has_embedding) {
    write_grads(-1);
    embed_backward(rc, tl, g, st.tokens, st.embed_pos);
  }
  if (grads_ready) grads_ready(0);  // every gradient of the chunk (one without parts too)
  return place_.has_embedding ? nullptr : g;
}

}  // namespace mtron::model
