#include "mtron/plan/memory_model.h"

#include <fmt/core.h>

#include <algorithm>

#include "mtron/core/error.h"

namespace mtron::plan {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// Runtime memory outside the model: CUDA context, cuBLAS/cuDNN workspaces and NCCL buffers of
// the communicators on a GPU; MPI buffers and the program on a CPU rank. Allocator
// fragmentation and temporaries take a further fraction of the activations (Megatron: 5%).
constexpr double kGpuRuntime = 2.5 * kGiB;
constexpr double kCpuRuntime = 0.25 * kGiB;
constexpr double kFragmentation = 0.05;

double activation_elem_bytes(Precision p) {
  return p == Precision::kFP32 ? 4.0 : 2.0;
}

// Multi-token prediction depths on stage `stage`: all on the last stage (Megatron's placement).
double mtp_depths_in_stage(const ModelConfig& m, const ParallelConfig& p, int64_t stage) {
  return stage == p.pp() - 1 ? double(m.mtp_num_layers) : 0.0;
}

// Transformer layers of stage `stage`: its decoder layers and its MTP depths' layers.
double layers_in_stage(const ModelConfig& m, const ParallelConfig& p, int64_t stage) {
  return double(p.num_layers_in_stage(stage)) + mtp_depths_in_stage(m, p, stage);
}

// Transformer layers of stage `stage` that are MoE layers (exact for --moe-layer-freq 1;
// proportional otherwise, since interleaving scatters a rank's layers); an MTP depth's layer
// is of the last decoder layer's kind.
double moe_layers_in_stage(const ModelConfig& m, const ParallelConfig& p, int64_t stage) {
  if (!m.is_moe()) return 0;
  const double mtp = m.is_moe_layer(m.num_layers - 1) ? mtp_depths_in_stage(m, p, stage) : 0.0;
  return double(m.num_moe_layers()) * double(p.num_layers_in_stage(stage)) / double(m.num_layers) +
         mtp;
}

// Micro-batch-layers stage `stage` (of `layers` layers) holds at the peak of the 1F1B (or
// interleaved) schedule: the warm-up forwards plus the one in the steady state.
double in_flight_layers(const ParallelConfig& p, int64_t stage, double layers) {
  const int64_t pp = p.pp(), v = p.vpp(), m = p.num_microbatches();
  if (v == 1) return layers * double(std::min<int64_t>(m, pp - stage));
  const int64_t chunks = std::min<int64_t>(m * v, 2 * (pp - stage - 1) + (v - 1) * pp + 1);
  return double(chunks) * layers / double(v);
}

}  // namespace

StageParams stage_parameters(const ModelConfig& m, const ParallelConfig& p, int64_t stage) {
  const double h = double(m.hidden_size), t = double(p.tp());
  const double q = double(m.q_size()), kv = double(m.kv_size());
  const double bias = m.add_bias_linear ? 1.0 : 0.0;
  const double norm = m.normalization == Normalization::kLayerNorm ? 2 * h : h;
  const double up = m.swiglu ? 2.0 : 1.0;  // fc1 matrices (gate and up with SwiGLU)
  auto mlp = [&](double f) { return h * f * up + f * h + bias * f * up; };  // column-split part

  StageParams s;
  const double layers = layers_in_stage(m, p, stage);
  const double moe = moe_layers_in_stage(m, p, stage), dense = layers - moe;
  const double attention = m.mla.enabled
                               ? double(m.mla.tp_sharded_attention_parameters(m))
                               : h * (q + 2 * kv) + q * h + (m.qkv_bias() ? q + 2 * kv : 0);
  s.tp_sharded = (layers * attention + dense * mlp(double(m.ffn()))) / t;
  s.replicated =
      layers * (2 * norm +
                (m.mla.enabled ? double(m.mla.replicated_attention_parameters(m)) : bias * h)) +
      dense * bias * h;
  if (m.is_moe()) {
    const double E = double(m.num_experts);
    s.expert = moe * E * mlp(double(m.moe_ffn())) / double(p.ep() * p.etp()) +
               moe * E / double(p.ep()) * bias * h;
    s.replicated += moe * h * E;  // router
    if (m.moe_shared_expert_intermediate_size > 0) {
      s.tp_sharded += moe * mlp(double(m.moe_shared_expert_intermediate_size)) / t;
      s.replicated += moe * bias * h;
    }
  }
  const double vocab = double(m.padded_vocab_size(p.tp())) * h / t;
  const bool first = stage == 0, last = stage == p.pp() - 1;
  if (first) {
    s.tp_sharded += vocab;
    if (m.position_embedding_type == PositionEmbedding::kLearnedAbsolute)
      s.replicated += double(m.max_position_embeddings) * h;
  }
  if (const double mtp = mtp_depths_in_stage(m, p, stage); mtp > 0) {
    // Each depth's enorm, hnorm, final_layernorm and column-parallel eh_proj [h, 2h]; the stage
    // holds the word embeddings for the depths' inputs (a replica unless it is the first stage
    // or, tied, the output layer's copy below is that replica).
    s.replicated += mtp * 3 * norm;
    s.tp_sharded += mtp * 2 * h * h / t;
    if (!first && m.untie_embeddings_and_output_weights) s.tp_sharded += vocab;
  }
  if (last) {
    s.replicated += norm;  // final norm
    // The output layer: its own weights when untied; when tied, the last stage keeps a copy of
    // the word embeddings (kept equal by the embedding group's all-reduce) unless it is also
    // the first stage.
    if (m.untie_embeddings_and_output_weights || !first) s.tp_sharded += vocab;
  }
  return s;
}

double layer_activation_bytes(const ModelConfig& m,
                              const Layout& l,
                              bool fused_attention,
                              bool moe_layer) {
  const ParallelConfig& p = l.parallel;
  const double e = activation_elem_bytes(l.precision);
  const double h = double(m.hidden_size), t = double(p.tp());
  const double st = p.sequence_parallel ? t : 1.0;  // SP splits the norm/dropout regions
  const double T = double(m.seq_length) * double(p.micro_batch_size) / double(p.cp());
  const double s_kv = double(m.seq_length);
  const double a = double(m.num_attention_heads);
  const double q = double(m.q_size()), kv = double(m.kv_size());
  const double up = m.swiglu ? 2.0 : 1.0;
  const double mask = m.hidden_dropout > 0 ? 1.0 : 0.0;

  if (l.recompute == RecomputeGranularity::kFull) return e * T * h / st;  // the layer's input

  // Selective recompute drops what each of its modules rebuilds in the backward pass; a module
  // that has no part in this layer (mla_up_proj without MLA, mlp in an MoE layer, moe, moe_act
  // and shared_experts in a dense one) drops nothing.
  auto drops = [&](RecomputeModule x) {
    return l.recompute == RecomputeGranularity::kSelective && l.recompute_modules.has(x);
  };
  // layernorm: the input and pre-MLP norms' outputs (output-discarding recompute; their inputs
  // stay). They are the QKV (MLA: down projections') input, and the dense MLP's or the shared
  // expert's fc1 input or the checkpointed MLP's input.
  const bool norms = drops(RecomputeModule::kLayernorm);
  // Inputs saved for the GEMMs' backward: in fp8 Transformer Engine keeps the fp8 cast.
  const double ei = l.precision == Precision::kFP8 ? 1.0 : e;
  // Attention block: norm input, QKV input, Q/K/V, core attention, projection input, dropout;
  // with multi-latent attention Q/K/V at their head dims and the latents (down projections'
  // outputs and their norms' outputs, on every TP rank). mla_up_proj drops MLA's Q/K/V
  // (output-discarding; rebuilt from the latents, which stay).
  const MlaConfig& mla = m.mla;
  const double qkv = mla.enabled ? a * double(2 * mla.q_head_dim() + mla.v_head_dim) : q + 2 * kv;
  const double att = mla.enabled ? a * double(mla.v_head_dim) : q;
  const double latents = mla.enabled ? 2.0 * double(mla.q_lora_rank + mla.kv_lora_rank) : 0.0;
  const double qkv_kept = mla.enabled && drops(RecomputeModule::kMlaUpProj) ? 0.0 : qkv;
  double bytes = (e + (norms ? 0.0 : ei)) * T * h / st + e * T * qkv_kept / t + ei * T * att / t +
                 e * T * latents + mask * T * h / st;
  if (fused_attention) {
    bytes += 4 * T * a / t;                         // softmax statistics (log-sum-exp, fp32)
  } else if (!drops(RecomputeModule::kCoreAttn)) {  // core_attn drops the scores
    const double scores = a / t * T * s_kv;
    bytes += e * scores + (m.attention_dropout > 0 ? (1 + e) * scores : 0.0);
  }
  // MLP block: norm input, dropout mask, then the MLP: fc1 input (`in` bytes per element),
  // fc1 output(s) and activation output (each kept or not).
  bytes += e * T * h / st + mask * T * h / st;
  auto mlp = [&](double tokens, double f, double split, double in, bool fc1_out, bool act_out) {
    return in * tokens * h + (fc1_out ? e : 0.0) * tokens * f * up / split +
           (act_out ? ei : 0.0) * tokens * f / split;
  };
  // A checkpointed MLP (mlp, shared_experts, moe) keeps only its input, the pre-MLP norm's
  // output, as the checkpoint saves it (bf16, also in fp8 runs), unless layernorm drops that.
  const double checkpoint_input = (norms ? 0.0 : e) * T * h / st;
  if (!moe_layer) {
    // mlp drops the dense MLP's fc1 output(s) and activation output.
    bytes += drops(RecomputeModule::kMlp)
                 ? checkpoint_input
                 : mlp(T / st, double(m.ffn()), t / st, norms ? 0.0 : ei, true, true);
  } else if (drops(RecomputeModule::kMoe)) {
    bytes += checkpoint_input;  // moe: the whole MoE block but its input
  } else {
    const double E = double(m.num_experts), k = double(m.moe_router_topk);
    const double etp = double(p.etp());
    const double routed = T * k * etp / st;  // tokens a rank's experts process (balanced)
    bytes += 4 * T / st * E;                 // router logits and probabilities, fp32
    // The routed experts: permuted tokens, fc1 output(s), activation output (moe_act drops it:
    // output-discarding, rebuilt from fc1's output), and the expert outputs.
    bytes += mlp(routed, double(m.moe_ffn()), etp, ei, true, !drops(RecomputeModule::kMoeAct)) +
             e * routed * h;
    if (m.moe_shared_expert_intermediate_size > 0) {
      // shared_experts drops the shared expert's fc1 output(s) and activation output.
      bytes += drops(RecomputeModule::kSharedExperts)
                   ? checkpoint_input
                   : mlp(T / st, double(m.moe_shared_expert_intermediate_size), t / st,
                         norms ? 0.0 : ei, true, true);
    }
  }
  return bytes;
}

double cp_transient_bytes(const ModelConfig& m, const ParallelConfig& p, double T, double e) {
  if (p.cp() == 1) return 0;
  const double per_token = e * T / double(p.tp());
  const double kv = per_token * double(m.attention_k_width() + m.attention_v_width());
  const double x = kv + per_token * double(m.attention_q_width() + m.attention_o_width());
  double most = 0;
  for (CpCommType type : p.cp_comms()) {
    const int64_t a = p.cp_a2a_size(type), n = p.cp() / a;
    double bytes = a > 1 ? x : 0.0;
    if (type == CpCommType::kAllGather)
      bytes += 2 * double(n) * kv;
    else if (n > 1)
      bytes += 4 * kv;
    most = std::max(most, bytes);
  }
  return most;
}

MemoryBreakdown estimate_memory(const ModelConfig& m, const Layout& l, const Cluster& c) {
  const ParallelConfig& p = l.parallel;
  const Hardware dev = c.device();
  // Flash-style attention keeps no scores: every GPU kernel and mtron's CPU kernels
  // (kernels/attention.h); Layout::fused_attention off models kernels that materialise them.
  const bool fused_attention = l.fused_attention;
  const double e = activation_elem_bytes(l.precision);
  const double t = double(p.tp());
  const double st = p.sequence_parallel ? t : 1.0;
  const double T = double(m.seq_length) * double(p.micro_batch_size) / double(p.cp());
  const double V = double(m.padded_vocab_size(p.tp()));
  const double h = double(m.hidden_size);
  const StateBytes dense_state = state_bytes_per_parameter(l.precision, p.use_distributed_optimizer,
                                                           p.dp() * p.cp(), l.grads_fp32);
  const StateBytes expert_state =
      state_bytes_per_parameter(l.precision, p.use_distributed_optimizer, p.edp(), l.grads_fp32);

  Layout no_recompute = l;
  no_recompute.recompute = RecomputeGranularity::kNone;
  MemoryBreakdown best;
  for (int64_t stage = 0; stage < p.pp(); ++stage) {
    MemoryBreakdown b;
    b.stage = stage;
    b.capacity = dev.memory_bytes;
    const StageParams sp = stage_parameters(m, p, stage);
    const double dense = sp.tp_sharded + sp.replicated;
    b.parameters = sp.total();
    b.weights = dense * dense_state.param + sp.expert * expert_state.param;
    b.gradients = dense * dense_state.grad + sp.expert * expert_state.grad;
    b.optimizer = dense * dense_state.optimizer + sp.expert * expert_state.optimizer;
    if (l.precision == Precision::kFP8) {
      // TE's fp8 copy and transpose of each GEMM weight; with --fp8-param-gather the fp8 copy
      // is the weight itself.
      const double gemm_weights = sp.tp_sharded + sp.expert;
      b.fp8_weights = (l.fp8_params ? 1 : 2) * gemm_weights;
      if (l.fp8_params) b.weights -= gemm_weights * (dense_state.param - 1);
      // TE's fp8_meta of each GEMM module: 3 forward tensors (input, weight, output) and 2
      // backward ones (output and input gradients), each an amax history and a scale and its
      // inverse, fp32. GEMM modules: attention's 2 per layer, a dense MLP's 2, an MoE layer's
      // 2 per local expert (and a shared expert's 2).
      const double layers = layers_in_stage(m, p, stage);
      const double moe = moe_layers_in_stage(m, p, stage);
      const double shared = m.moe_shared_expert_intermediate_size > 0 ? 2.0 : 0.0;
      const double modules = 2 * layers + 2 * (layers - moe) +
                             moe * (2 * double(m.num_experts) / double(p.ep()) + shared);
      b.fp8_state = modules * 5 * (double(l.fp8_amax_history_len) + 2) * 4;
    }

    const double layers = layers_in_stage(m, p, stage);
    const double moe_fraction = layers > 0 ? moe_layers_in_stage(m, p, stage) / layers : 0;
    auto per_layer = [&](const Layout& x) {
      return (1 - moe_fraction) * layer_activation_bytes(m, x, fused_attention, false) +
             moe_fraction * layer_activation_bytes(m, x, fused_attention, true);
    };
    b.in_flight = in_flight_layers(p, stage, layers);
    b.activations = b.in_flight * per_layer(l);
    const double microbatches_in_flight = layers > 0 ? b.in_flight / layers : 1;
    if (stage == 0) {  // token ids (int64) and the embedding dropout mask
      b.activations += microbatches_in_flight * (8 * T + (m.hidden_dropout > 0 ? T * h / st : 0.0));
    }
    if (l.recompute == RecomputeGranularity::kFull) b.working = per_layer(no_recompute);
    if (l.recompute == RecomputeGranularity::kSelective) {
      // During a layer's backward pass the tensors selective recompute dropped are rebuilt: the
      // larger of what it drops from a dense and from an MoE layer of the stage.
      for (const bool moe_layer : {false, true}) {
        if (moe_layer ? moe_fraction == 0 : moe_fraction == 1) continue;
        b.working = std::max(b.working,
                             layer_activation_bytes(m, no_recompute, fused_attention, moe_layer) -
                                 layer_activation_bytes(m, l, fused_attention, moe_layer));
      }
    }
    // A layer's context-parallel buffers come on top of what its backward rebuilds.
    if (layers > 0) b.working += cp_transient_bytes(m, p, T, e);
    if (stage == p.pp() - 1) {
      // Final norm and output-layer inputs. GPUs (Megatron): fp32 logits kept for the loss,
      // and during backward the bf16 logits and their fp32 gradient at once. CPUs (mtron's
      // trainer): the fused output layer + cross-entropy holds one chunk of rows' fp32 logits
      // (and their bf16 gradient) at a time.
      b.activations += 2 * e * T * h / st;
      // Each MTP depth: its norms' inputs, eh_proj's input [T, 2h], the final norm's and the
      // output layer's inputs (and on GPUs its fp32 logits, below).
      const double mtp = mtp_depths_in_stage(m, p, stage);
      const double ei = l.precision == Precision::kFP8 ? 1.0 : e;
      b.activations += mtp * (ei * T * 2 * h + 4 * e * T * h / st);
      if (dev.is_cpu) {
        // A CPU's chunk (kernels::chunk_elems): 2^22 floats.
        const double rows = double(lm_head_rows_per_chunk(int64_t(V / t), int64_t(1) << 22));
        b.working = std::max(b.working, (4 + (e == 2 ? 2 : 0)) * std::min(rows, T) * V / t);
      } else {
        b.activations += (1 + mtp) * 4 * T * V / t;
        b.working = std::max(b.working, (e + 4) * T * V / t);
      }
    }
    b.overhead =
        (dev.is_cpu ? kCpuRuntime : kGpuRuntime) + kFragmentation * (b.activations + b.working);
    if (stage == 0 || b.total() > best.total()) best = b;
  }
  return best;
}

std::string format_memory(const MemoryBreakdown& b) {
  auto g = [](double x) { return x / kGiB; };
  std::string s =
      fmt::format("memory per GPU (stage {}, {:.3f} B parameters): {:.1f} of {:.1f} GiB\n", b.stage,
                  b.parameters / 1e9, g(b.total()), g(b.capacity));
  s += fmt::format("  weights            {:8.2f} GiB\n", g(b.weights));
  s += fmt::format("  gradients          {:8.2f} GiB\n", g(b.gradients));
  s += fmt::format("  optimizer state    {:8.2f} GiB\n", g(b.optimizer));
  if (b.fp8_weights > 0) s += fmt::format("  fp8 weight copies  {:8.2f} GiB\n", g(b.fp8_weights));
  if (b.fp8_state > 0) {
    s += fmt::format("  fp8 scaling state  {:8.2f} GiB ({:.0f} KiB of amax histories and scales)\n",
                     g(b.fp8_state), b.fp8_state / 1024);
  }
  s += fmt::format("  activations        {:8.2f} GiB ({:.0f} layer-micro-batches in flight)\n",
                   g(b.activations), b.in_flight);
  s += fmt::format("  transient          {:8.2f} GiB\n", g(b.working));
  s += fmt::format("  runtime/fragments  {:8.2f} GiB\n", g(b.overhead));
  return s;
}

}  // namespace mtron::plan
