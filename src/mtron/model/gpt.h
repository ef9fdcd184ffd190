// defines: MicroBatch, ChunkPlacement, Recompute, KvCache, GPTChunk
//
// A GPT/Llama model chunk: the part of the model one pipeline stage (or one virtual stage)
// runs. The first chunk holds the embeddings, the last the final norm and the output layer
// fused with the loss; a 1-stage model is one chunk with both. Each chunk owns one ParamBuffer.
//
// With --mtp-num-layers D the last chunk also holds the D multi-token prediction depths
// (mtp.h) and, on a pipeline of several stages, a replica of the word embeddings (their
// gradient summed with the first stage's, as tied embeddings'). In a training forward depth k
// (1-based) embeds the tokens k positions further (MicroBatch::mtp_tokens: Megatron's roll of the
// input ids, token 0 rolled in past the sequence's end, across context-parallel chunks) and feeds
// the shared output layer and cross-entropy with the labels k positions further. In
// sequence-major rows the positions with such a target lead (without CP the first (S - k) B
// rows; with CP all of a rank's rows but the last k B of CP rank 0), so the loss runs on those
// rows only: the rolled-in positions carry no loss, and by causality no gradient. Each depth's
// token losses weigh mtp_loss_scaling_factor / D / (tokens with a target in the global batch) in
// the gradient (Megatron's MTPLossAutoScaler: the reported lm loss stays the main model's);
// evaluation runs no MTP.
//
// Contract (docs/architecture.md): forward() stashes what backward() needs into the caller's
// per-micro- batch Stash, so a pipeline schedule can keep several micro-batches in flight; with
// --recompute-granularity full the stash keeps only layer-group inputs and backward rebuilds
// the rest.
//
// Generation runs the same layers (forward_cached): a whole model (embedding and head, TP 1,
// CP 1), no stash, each layer's keys and values kept in a KV cache, only the last rows' logits.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "mtron/core/arena.h"
#include "mtron/core/formulas.h"
#include "mtron/core/model_config.h"
#include "mtron/model/layer.h"
#include "mtron/model/linear.h"
#include "mtron/model/mtp.h"
#include "mtron/model/params.h"

namespace mtron::model {

// One micro-batch as this rank sees it: rows sequence-major (n = s*B + b).
struct MicroBatch {
  int64_t B = 0, S = 0;                      // S: tokens per sequence on this rank
  std::vector<int32_t> tokens, labels, pos;  // [S*B]
  // --mtp-num-layers D: the tokens and labels k = 1..D positions further, [D, S*B] (0 past the
  // sequence's end; data::TokenRows::ahead_tokens/ahead_labels).
  std::vector<int32_t> mtp_tokens, mtp_labels;
  // The learned position embedding's indices, [S*B] (data::TokenRows::embed_pos; empty: pos).
  std::vector<int32_t> embed_pos{};
  // --eod-mask-loss: 1 where a token's loss counts, 0 where it is masked, [S*B] for the loss and
  // [D, S*B] for the MTP depths' (empty: every token counts).
  std::vector<float> loss_mask{}, mtp_loss_mask{};
  float dloss =
      1.0f;  // d(loss)/d(token loss): 1 / the tokens whose loss counts in the global batch
  // d(loss)/d(token loss) of each MTP depth: --mtp-loss-scaling-factor / D / that depth's tokens
  // whose loss counts in the global batch
  std::vector<float> mtp_dloss{};
  float aux_weight = 1.0f;  // weight of per-micro-batch auxiliary losses (MoE): 1 / micro-batches
                            // in the global batch
  StepDropout drop{};       // the dropout masks' key (on only in a training forward/backward)
  TokenLayout layout() const { return {B, S, pos.data(), aux_weight, drop}; }
};

struct ChunkPlacement {
  int64_t first_layer = 0, num_layers = 0;
  bool has_embedding = false, has_head = false;
};

enum class RecomputeMethod { kUniform, kBlock };
struct Recompute {
  RecomputeGranularity granularity = RecomputeGranularity::kNone;
  RecomputeMethod method = RecomputeMethod::kUniform;
  int64_t num_layers = 1;
  RecomputeModules modules;  // --recompute-modules: what selective recompute rebuilds
  // The modules each layer rebuilds: `modules` under selective recompute, else none.
  RecomputeModules selective() const {
    return granularity == RecomputeGranularity::kSelective ? modules : RecomputeModules{0};
  }
  // "full, uniform groups of 2 layers", "selective (layernorm mlp)"; "none"
  std::string describe() const;
};

// The keys and values of every layer of a chunk for `capacity` positions of B sequences
// (make_kv_cache), on the run's device.
struct KvCache {
  Arena storage;
  std::vector<LayerKv> layers;
  int64_t length() const { return layers.empty() ? 0 : layers.front().length; }
  int64_t capacity() const { return layers.empty() ? 0 : layers.front().capacity; }
  void reset() {
    for (LayerKv& l : layers) l.length = 0;
  }
};

class GPTChunk {
 public:
  struct Stash {
    Arena keep;
    std::vector<TransformerLayer::Stash> layers;
    std::vector<const float*> inputs;  // input of each layer
    const float* out = nullptr;        // [Nl, h] chunk output (non-head chunks)
    float *lnf_mean = nullptr, *lnf_rstd = nullptr;
    float* dhead = nullptr;  // [N, h] d(loss)/d(LM-head input), from the fused loss pass
    // The head chunk's token-loss sums on this rank: [0] the LM loss, [1 + k] MTP depth k. With
    // loss_dev (device memory, [1 + MTP depths], set by the caller) forward adds to it and
    // leaves loss_sum and mtp_loss_sum at 0: the trainer points every micro-batch of a step at
    // one accumulator and reads it once. Without, forward reads them into loss_sum and
    // mtp_loss_sum (a host round trip).
    double* loss_dev = nullptr;
    double loss_sum = 0;  // sum of this micro-batch's token losses on this rank
    // Multi-token prediction, per depth (training forwards of the head chunk): the rolled
    // tokens on the device, the stashes, d(loss)/d(head input) [N, h] and the sum of the
    // token losses on this rank (zeros when the forward ran no MTP).
    const float* lnf_out = nullptr;  // [Nl, h] the decoder's output after its final norm
    std::vector<const int32_t*> mtp_tokens;
    std::vector<MtpLayer::Stash> mtp;
    std::vector<float*> mtp_dhead;
    std::vector<double> mtp_loss_sum;
    MoEStats moe;  // this rank's share of the MoE statistics, summed over layers
    // Optional outputs the caller points somewhere before forward (tests, generation, eval):
    float* logits_out = nullptr;  // [N, Vl] this rank's vocabulary shard of the logits (device)
    int64_t num_tokens = 0;
    // Copies of the micro-batch's tokens, labels and positions on the run's device, set by
    // forward.
    const int32_t *tokens = nullptr, *labels = nullptr, *pos = nullptr;
    const int32_t* embed_pos = nullptr;  // MicroBatch::embed_pos (or pos)
    const float* loss_mask = nullptr;    // MicroBatch::loss_mask (null when empty)
  };

  GPTChunk(const ModelConfig& cfg,
           ChunkPlacement place,
           const parallel::TensorParallel& tp,
           Recompute recompute,
           const parallel::ExpertParallel& ep = {});

  // Registering is done in the constructor; allocate and initialise before use.
  ParamBuffer& params() { return params_; }
  const ParamBuffer& params() const { return params_; }
  // The routed experts' parameters (empty without MoE layers): this EP rank's experts (named by
  // global expert index), sharded over ETP along shard_dim, replicated over EDP, so reduced over
  // EDP rather than DP x CP.
  ParamBuffer& expert_params() { return expert_params_; }
  const ParamBuffer& expert_params() const { return expert_params_; }
  const ChunkPlacement& placement() const { return place_; }
  // The word-embedding handle (first chunk, or the last with tied embeddings), else -1.
  int word_embedding() const { return wte_; }
  // The routed parts of this chunk's MoE layers, in layer order, then its MTP depths'.
  std::vector<MoELayer*> moe_layers();

  // params, when given, is called for each part of a pass (the embeddings, each layer, the head
  // with the word embeddings it reads) with the buffer range [begin, end) of its parameters:
  // before the part reads them (kUse) and after (kRelease), and, as the part before it starts,
  // for the part that comes next in the pass (kPrefetch: forward, the next layer or the head;
  // backward, the layer below). FSDP gathers and releases them there (and with
  // --overlap-param-gather starts the next part's gather early); the distributed optimizer's
  // --overlap-param-gather waits for their all-gather at kUse.
  enum class PartUse { kUse, kRelease, kPrefetch };
  using ParamsUse = std::function<void(int64_t begin, int64_t end, PartUse use)>;
  // grads_use, when given, is called with the buffer ranges of each part's parameters before
  // the part first writes their gradients (FSDP's sharded gradients back there what the last
  // reduce-scatter returned): in backward, and for the head in a training forward, whose output
  // layer (and MTP depths) compute their weight gradient with the loss.
  using GradsUse = std::function<void(int64_t begin, int64_t end)>;
  // input: [Nl, h] from the previous stage (null on the first chunk). Returns the output
  // [Nl, h] (null on the head chunk, which instead fills st.loss_sum and, when `train`, the
  // loss gradient in st.dhead).
  const float* forward(const RunCtx& rc,
                       const MicroBatch& mb,
                       Stash& st,
                       const float* input,
                       bool train,
                       const ParamsUse& params = nullptr,
                       const GradsUse& grads_use = nullptr);
  // dout: d(loss)/d(output) [Nl, h] (ignored on the head chunk). Returns d(loss)/d(input)
  // [Nl, h] in the stash (null on the first chunk). Parameter gradients accumulate.
  // grads_ready, when given, is called as backward proceeds with an offset in the parameter
  // buffer: this micro-batch's contributions to every parameter at or above it are complete
  // (after the head, after each layer, and with 0 at the end), for overlapping the reduction and
  // for FSDP's reduce-scatter of every micro-batch's gradients.
  using GradsReady = std::function<void(int64_t offset)>;
  const float* backward(const RunCtx& rc,
                        const MicroBatch& mb,
                        Stash& st,
                        const float* dout,
                        const GradsReady& grads_ready = nullptr,
                        const ParamsUse& params = nullptr,
                        const GradsUse& grads_use = nullptr);

  // An empty KV cache of `capacity` positions for mb.B sequences, on rc's device.
  KvCache make_kv_cache(const RunCtx& rc, int64_t B, int64_t capacity) const;
  // Generation (a whole model: embedding and head, TP 1, CP 1): the forward of mb's tokens, the
  // next mb.S positions of the cache's sequences (mb.pos), without a stash, their keys and
  // values appended to `cache`. Writes the logits of the last `rows` token rows, [rows, padded
  // vocabulary], on rc's device.
  void forward_cached(
      const RunCtx& rc, const MicroBatch& mb, KvCache& cache, float* logits, int64_t rows);

 private:
  // The embeddings of this rank's rows [Nl, h] (SP: its block of the sequence) in `out_arena`,
  // after hidden dropout (tl.drop) keyed by layer index `layer` (-1: the decoder's input, an
  // MTP depth's layer index for its embeddings). wpe_pos [N]: the rows' learned position
  // embedding indices (MicroBatch::embed_pos on the device; unused without them, as in the MTP
  // depths, which need rope or no position embedding).
  float* embed(const RunCtx& rc,
               Arena& out_arena,
               const TokenLayout& tl,
               const int32_t* tokens,
               const int32_t* wpe_pos,
               int64_t layer = -1);
  // Conjugate of embed: g [Nl, h] = d(loss)/d(embeddings) (consumed) into the embeddings'
  // gradients.
  void embed_backward(const RunCtx& rc,
                      const TokenLayout& tl,
                      float* g,
                      const int32_t* tokens,
                      const int32_t* wpe_pos,
                      int64_t layer = -1);
  // The MTP depths of a training forward, from the decoder's normed output st.lnf_out; depth k's
  // token-loss sum is added to mtp_loss[k] (device memory).
  void mtp_forward(
      const RunCtx& rc, const MicroBatch& mb, Stash& st, const TokenLayout& tl, double* mtp_loss);
  // Their backward: adds d(MTP losses)/d(hidden) to dhidden [Nl, h].
  void mtp_backward(const RunCtx& rc, Stash& st, const TokenLayout& tl, float* dhidden);
  bool recomputed(int64_t i) const;  // is local layer i in a recompute group?
  // Buffer range of parameter handles [first, next_first) (next_first < 0: to the end).
  std::pair<int64_t, int64_t> param_range(int first, int next_first) const;
  // Calls f(begin, end) for the buffer ranges of part i's parameters (-1: the embeddings;
  // layers_.size(): the head, and the word embeddings where the output layer or the MTP depths
  // read them here).
  void for_part(int64_t i, const std::function<void(int64_t, int64_t)>& f) const;
  // Calls params(range, use) for part i's parameters, if params is given (and, for kPrefetch, if
  // part i exists: i in [0, L), or L on the head chunk).
  void use_part(const ParamsUse& params, int64_t i, PartUse use) const;
  int64_t group_end(int64_t i) const;

  const ModelConfig& cfg_;
  ChunkPlacement place_;
  Recompute recompute_;
  ParamBuffer params_, expert_params_;
  std::vector<TransformerLayer> layers_;
  Norm lnf_;
  std::vector<MtpLayer> mtp_;  // head chunk only
  int wte_ = -1, wpe_ = -1, out_w_ = -1;
  std::vector<int> layer_first_;  // first parameter handle of each layer
  int head_first_ = -1;           // first parameter handle of the head (final norm)
  int64_t vocab_start_ = 0, vocab_local_ = 0;
  Arena scratch_, recompute_arena_;  // on the device of the last forward's RunCtx
  Arena cached_;                     // forward_cached's layer outputs
};

}  // namespace mtron::model
