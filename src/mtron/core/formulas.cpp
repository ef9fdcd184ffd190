#include "mtron/core/formulas.h"

#include <fmt/core.h>

#include <algorithm>

#include "mtron/core/error.h"

namespace mtron {

const std::vector<std::pair<std::string_view, RecomputeModule>>& recompute_module_names() {
  static const std::vector<std::pair<std::string_view, RecomputeModule>> names = {
      {"core_attn", RecomputeModule::kCoreAttn},
      {"moe_act", RecomputeModule::kMoeAct},
      {"layernorm", RecomputeModule::kLayernorm},
      {"mla_up_proj", RecomputeModule::kMlaUpProj},
      {"mlp", RecomputeModule::kMlp},
      {"moe", RecomputeModule::kMoe},
      {"shared_experts", RecomputeModule::kSharedExperts}};
  return names;
}

RecomputeModules parse_recompute_modules(const std::vector<std::string>& words) {
  RecomputeModules r{0};
  for (const std::string& w : words) {
    if (w.empty()) continue;  // `--recompute-modules` alone: an empty list
    const auto& names = recompute_module_names();
    const auto it =
        std::find_if(names.begin(), names.end(), [&](const auto& n) { return n.first == w; });
    if (it == names.end()) {
      std::string choices;
      for (const auto& n : names)
        choices += std::string(choices.empty() ? "" : ", ") + std::string(n.first);
      MT_CHECK(false, "--recompute-modules: invalid choice '", w, "' (choose from ", choices, ")");
    }
    r.add(it->second);
  }
  return r;
}

void check_recompute_modules(const RecomputeModules& r, const ModelConfig& m) {
  MT_CHECK(!r.has(RecomputeModule::kMlaUpProj) || m.mla.enabled,
           "mla_up_proj in recompute_modules is only supported with multi_latent_attention.");
}

std::string RecomputeModules::describe() const {
  std::string s;
  for (const auto& [name, m] : recompute_module_names()) {
    if (!has(m)) continue;
    if (!s.empty()) s += ' ';
    s += name;
  }
  return s.empty() ? "none" : s;
}

double flops_per_iteration(const ModelConfig& m, int64_t global_batch, int64_t padded_vocab) {
  const double B = double(global_batch), s = double(m.seq_length), h = double(m.hidden_size);
  // Megatron's count: each MTP depth adds a layer of the last layer's kind, its
  // norms and eh_proj (3h + 2h^2 per token) and a pass of the output layer.
  const double D = double(m.mtp_num_layers);
  const double L = double(m.num_layers) + D;
  const double q = double(m.q_size()), kv = double(m.kv_size());
  const double f = m.swiglu ? 3.0 : 2.0;
  const double L_moe = double(m.num_moe_layers() + m.num_mtp_moe_layers());
  const double L_dense = L - L_moe;
  const double mlp = h * f *
                     (double(m.ffn()) * L_dense + (double(m.moe_ffn()) * double(m.moe_router_topk) +
                                                   double(m.moe_shared_expert_intermediate_size)) *
                                                      L_moe);
  const double logits = h * double(padded_vocab) * (D + 1) + D * (3 * h + 2 * h * h);
  if (m.mla.enabled)  // Megatron's MLA branch: projections and core attention in one term
    return 6.0 * B * s * (mlp + L * m.mla.attention_flops_term(m) + logits);
  const double attn = L * (h * (q + 2 * kv) + q * h);
  return 6.0 * B * s * (mlp + attn + logits) + 6.0 * B * s * s * q * L;
}

int64_t lm_head_rows_per_chunk(int64_t vocab_local, int64_t chunk_elems) {
  return std::clamp<int64_t>(chunk_elems / std::max<int64_t>(vocab_local, 1), 16,
                             chunk_elems >> 12);
}

StateBytes state_bytes_per_parameter(Precision params,
                                     bool distributed_optimizer,
                                     int64_t shards,
                                     bool grads_fp32) {
  MT_ASSERT(shards >= 1, "shards must be >= 1");
  StateBytes b;
  switch (params) {
    case Precision::kFP32:  // fp32 params and grads; Adam m and v
      b = {4, 4, 8};
      break;
    case Precision::kBF16:
    case Precision::kFP16:
    case Precision::kFP8:  // bf16 / fp16 params, fp32 grads (accumulate/all-reduce in fp32); fp32
                           // master copy, Adam m and v
      b = {2, grads_fp32 ? 4.0 : 2.0, 12};
      break;
  }
  if (distributed_optimizer) b.optimizer /= double(shards);
  return b;
}

TheoreticalMemory megatron_theoretical_memory(const ModelConfig& m,
                                              const ParallelConfig& p,
                                              RecomputeGranularity recompute) {
  const double h = double(m.hidden_size), L = double(m.num_layers);
  const double n = double(m.num_attention_heads), g = double(m.query_groups());
  const double tp = double(p.tp()), pp = double(p.pp());
  const double gated = m.swiglu ? 1.5 : 1.0;
  const double norm = m.normalization == Normalization::kRMSNorm ? 1.0 : 2.0;
  const double V = double(m.padded_vocab_size(p.tp()));

  // Parameters, split as Megatron holds them: TP-sharded, replicated, expert-sharded; the MTP
  // depths' layers (of the last layer's kind) as their own block, on the most loaded shard.
  const double L_moe = double(m.num_moe_layers()), L_dense = L - L_moe;
  const double mtp_moe = double(m.num_mtp_moe_layers());
  const double mtp_dense = double(m.mtp_num_layers) - mtp_moe;
  const MlaConfig& a = m.mla;
  // Multi-latent attention: Megatron's term counts the latent norms with the projections.
  const double mla_q = a.q_lora_rank > 0
                           ? double(a.q_lora_rank) * (h + n * double(a.q_head_dim()) + norm)
                           : h * n * double(a.q_head_dim());
  const double attention =
      a.enabled
          ? mla_q + double(a.kv_lora_rank) * (h + n * double(a.qk_head_dim + a.v_head_dim) + norm) +
                h * double(a.qk_pos_emb_head_dim) + n * double(a.v_head_dim) * h
          : 2 * h * h * ((1 + g / n) * (double(m.q_size()) / h));
  const double dense_mlp = 2 * h * double(m.ffn()) * gated;
  const double shared_expert = 2 * h * double(m.moe_shared_expert_intermediate_size) * gated;
  const double routed_experts =
      m.is_moe() ? 2 * h * double(m.moe_ffn()) * double(m.num_experts) * gated : 0.0;
  const double layernorms = 2 * h * norm;
  const double router =
      m.is_moe() ? h * double(m.num_experts) + (m.add_bias_linear ? double(m.num_experts) : 0)
                 : 0.0;
  const double final_norm = norm * h;
  const double embedding = h * V;

  const double tp_sharded = (attention + dense_mlp) * L_dense + (attention + shared_expert) * L_moe;
  const double replicated = layernorms * L_dense + (layernorms + router) * L_moe + final_norm;
  const double expert_sharded = routed_experts * L_moe;
  const double tp_mtp = (attention + dense_mlp) * mtp_dense + (attention + shared_expert) * mtp_moe;
  const double replicated_mtp = layernorms * mtp_dense + (layernorms + router) * mtp_moe;

  double tp_on_shard = (tp_sharded / pp + tp_mtp + embedding) / tp;
  const double replicated_on_shard = replicated / pp + replicated_mtp;
  const double expert_on_shard =
      (expert_sharded / pp + routed_experts * mtp_moe) / double(p.etp() * p.ep());
  if (m.untie_embeddings_and_output_weights && p.pp() == 1) tp_on_shard += embedding / tp;

  auto bytes_per_param = [&](double dp) {
    return p.use_distributed_optimizer ? 6 + 12 / dp : 18.0;
  };
  const double dp = double(p.world_size / (p.tp() * p.pp() * p.cp()));
  const double edp = double(p.world_size / (p.etp() * p.ep() * p.pp()));
  TheoreticalMemory t;
  t.weight_and_optimizer = (tp_on_shard + replicated_on_shard) * bytes_per_param(dp) +
                           expert_on_shard * bytes_per_param(edp);

  // Activations of the first pipeline stage.
  const double s = double(m.seq_length), b = double(p.micro_batch_size);
  const double sbh = s * b * h;
  const bool sp_selective = p.sequence_parallel && recompute == RecomputeGranularity::kSelective;
  double act = sp_selective ? sbh * (18 + 4 * (double(m.ffn()) / h)) * L : sbh * (10 + 24 / tp) * L;
  act += 8 * s * b * pp;  // input to the embedding, pp micro-batches in flight
  act += sbh * pp;        // embedding dropout
  if (p.vpp() > 1) {
    act *= 1 + (pp - 1) / (pp * double(p.vpp()));
  } else if (p.pp() > 1) {
    act *= std::min(1.0, double(p.num_microbatches()) / pp);
  }
  if (sp_selective) {
    if (p.pp() == 1) act += sbh * 4 * (1 + V / h);  // inputs to the output layer and the loss
    act /= tp;
  } else {
    if (p.pp() == 1) act += (s * b * V / tp + sbh) * 2;  // logits and final norm output
    act *= 1.05;                                         // optimizer and miscellaneous temporaries
  }
  t.activation = act;
  return t;
}

std::string format_theoretical_memory(const TheoreticalMemory& t) {
  constexpr double kMB = 1024.0 * 1024.0;
  return fmt::format(
      "Theoretical memory footprints: weight and optimizer={:.2f} MB, activation={:.2f} MB, "
      "total={:.2f} MB",
      t.weight_and_optimizer / kMB, t.activation / kMB, t.total() / kMB);
}

double korthikanti_activation_bytes_per_layer(int64_t s,
                                              int64_t b,
                                              int64_t h,
                                              int64_t a,
                                              int64_t t,
                                              bool sequence_parallel,
                                              RecomputeGranularity recompute) {
  const double sbh = double(s) * double(b) * double(h);
  const double td = double(t);
  const double scores = 5.0 * double(a) * double(s) / double(h);  // 5as/h
  switch (recompute) {
    case RecomputeGranularity::kFull:
      return 2 * sbh / (sequence_parallel ? td : 1.0);
    case RecomputeGranularity::kSelective:
      return sequence_parallel ? 34 * sbh / td : sbh * (10 + 24 / td);
    case RecomputeGranularity::kNone:
      return sequence_parallel ? sbh / td * (34 + scores) : sbh * (10 + 24 / td + scores / td);
  }
  MT_ASSERT(false, "bad RecomputeGranularity");
}

}  // namespace mtron
