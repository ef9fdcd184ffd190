#include "mtron/plan/time_model.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "mtron/core/error.h"
#include "mtron/plan/memory_model.h"

namespace mtron::plan {
namespace {

constexpr double kGemmOverhead = 4e-6;  // seconds per GEMM launch and tail on a GPU
// Fused attention on a block of c tokens runs at c / (c + this) of its long-sequence rate
// (flash-attention kernels fill the GPU only with enough query blocks and key steps).
constexpr double kAttentionChunkOverhead = 256;
// Megatron's DDP bucket: max(40M, 1M x DP) parameters; the last bucket's reduction cannot
// overlap with backward, the first bucket's gather cannot overlap with forward.
constexpr double kBucketParams = 40e6;
// Bytes moved per parameter by the Adam step and the gradient norm: read grad, read/write
// master, m and v, write the model-precision copy, plus the norm's read and the clip's scale.
constexpr double kAdamBytesPerParam = 4 + 8 + 8 + 8 + 2 + 8;

double elem_bytes(Precision p) {
  return p == Precision::kFP32 ? 4.0 : 2.0;
}

// Time of a communication that overlaps with `window` seconds of compute: the part that does
// not fit, plus the interference it causes to the part that does.
double overlapped(double comm, double window, double interference) {
  return std::max(0.0, comm - window) + interference * std::min(comm, window);
}

// Per-micro-batch times of one pipeline stage, split by cause.
struct StageTimes {
  double gemm = 0, attention = 0, elementwise = 0, recompute = 0;
  double tp = 0, cp = 0, ep = 0, p2p = 0;
  double fwd = 0, bwd = 0;  // compute + exposed communication, forward / backward
  double total() const { return gemm + attention + elementwise + recompute + tp + cp + ep + p2p; }
};

struct LinearShape {
  double M, N, K;  // forward GEMM: [M,K] x [K,N]
};

// Latency steps of a collective over n ranks: ring steps inside a node, a tree (log steps) beyond
// a few ranks.
double latency_steps(int64_t n) {
  return std::min(double(n - 1), 2 * std::log2(double(n)) + 1);
}

}  // namespace

double collective_seconds(Collective c, double bytes, int64_t n, const Link& link) {
  if (n <= 1 || bytes <= 0) return 0;
  MT_ASSERT(link.bandwidth > 0, "collective over a link without bandwidth (", link.name, ")");
  const double frac = double(n - 1) / double(n);
  const double steps = latency_steps(n);
  switch (c) {
    case Collective::kAllReduce:
      return 2 * frac * bytes / link.bandwidth + 2 * steps * link.latency;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
      return frac * bytes / link.bandwidth + steps * link.latency;
    case Collective::kSendRecv:
      return bytes / link.bandwidth + link.latency;
  }
  MT_ASSERT(false, "bad Collective");
}

double all_to_all_seconds(const PerfParams& pp, double bytes, int64_t n, int64_t stride) {
  if (n * stride <= pp.devices_per_node) {
    return collective_seconds(Collective::kAllToAll, bytes, n, pp.link_for_group(n, stride));
  }
  // Across nodes every rank of a node sends off the node at once, each through its own adapter,
  // so no adapter carries another rank's traffic (unlike a ring, which crosses between nodes at
  // a few places: link_for_group). The part for the node's own ranks goes over NVLink (PCIe
  // beyond an NVLink domain) at the same time.
  const int64_t local =
      std::clamp<int64_t>(pp.devices_per_node / std::max<int64_t>(stride, 1), 1, n);
  const Link& in_node = local * stride <= pp.nvlink_domain ? pp.nvlink : pp.pcie;
  const double off = double(n - local) / double(n) * bytes / pp.network.bandwidth;
  const double on = double(local - 1) / double(n) * bytes / in_node.bandwidth;
  return std::max(off, on) + latency_steps(n) * pp.network.latency;
}

Link PerfParams::link_for_group(int64_t size, int64_t stride) const {
  const int64_t span = size * stride;
  if (span <= nvlink_domain) return nvlink;
  if (span <= devices_per_node) return pcie;
  // Across nodes: each member of the group in a node drives its own adapter (rail-optimised
  // rings), so the node's members share the inter-node traffic; never faster than NVLink.
  const int64_t members_per_node =
      std::clamp<int64_t>(devices_per_node / std::max<int64_t>(stride, 1), 1, size);
  Link l = network;
  l.bandwidth = std::min(nvlink.bandwidth, network.bandwidth * double(members_per_node));
  return l;
}

PerfParams perf_from_hardware(const Cluster& c, Precision p) {
  const Hardware d = c.device();
  const Achievable& a = d.achievable;
  PerfParams pp;
  pp.gemm_flops = d.peak_flops(p) * d.gemm_efficiency(p);
  MT_CHECK(pp.gemm_flops > 0, d.description, " has no ", precision_name(p),
           " peak in the hardware catalog (use another precision or add it to "
           "catalog/hardware/*.json)");
  pp.gemm_bandwidth = d.memory_bandwidth * a.memory;
  pp.gemm_overhead = d.is_cpu ? 2e-6 : kGemmOverhead;
  pp.gemm_overlaps_memory = !d.is_cpu;
  pp.gemm_k_overhead = a.gemm_k_overhead;
  pp.step_overhead = a.step_overhead;
  const Precision attn = p == Precision::kFP8 ? Precision::kBF16 : p;
  pp.attention_flops = d.peak_flops(attn) * a.attention;
  pp.fused_attention = !d.is_cpu;
  pp.fused_bias = !d.is_cpu;
  pp.memory_bandwidth = d.memory_bandwidth * a.memory;
  pp.peak_flops = d.mfu_peak_flops(p);
  pp.nvlink = {d.nvlink_bandwidth * a.nvlink, d.nvlink_latency,
               d.is_cpu ? "shared memory" : "NVLink"};
  pp.pcie = {d.pcie_bandwidth * a.nvlink, 2 * d.nvlink_latency,
             d.is_cpu ? "shared memory" : "PCIe"};
  pp.network = {d.inter_node_bandwidth() * a.network, d.network.latency, d.network.name};
  pp.nvlink_domain = d.is_cpu ? c.devices_per_node : d.nvlink_domain;
  pp.devices_per_node = c.devices_per_node;
  return pp;
}

std::pair<double, double> fused_attention_seconds(
    double flops, double tokens, double keys, double q_width, double chunk) {
  const double work = 2 * tokens * keys * q_width;  // forward, causal half counted
  const double rate = flops * chunk / (chunk + kAttentionChunkOverhead);
  return {work / rate, 2.5 * work / rate};
}

double gemm_operand_bytes(double M, double N, double K, Precision p) {
  const double e = p == Precision::kFP8 ? 1.0 : elem_bytes(p);
  return e * (M * K + K * N) + 4 * M * N;
}

double gemm_seconds(const PerfParams& pp, double M, double N, double K, Precision p) {
  if (M <= 0 || N <= 0 || K <= 0) return 0;
  const double compute = 2 * M * N * (K + pp.gemm_k_overhead) / pp.gemm_flops;
  const double memory = gemm_operand_bytes(M, N, K, p) / pp.gemm_bandwidth;
  return (pp.gemm_overlaps_memory ? std::max(compute, memory) : compute + memory) +
         pp.gemm_overhead;
}

StepTime estimate_step_time(const ModelConfig& m, const Layout& l, const PerfParams& pp) {
  const ParallelConfig& p = l.parallel;
  const Precision prec = l.precision;
  const double e = elem_bytes(prec);
  const double h = double(m.hidden_size), t = double(p.tp());
  const double st = p.sequence_parallel ? t : 1.0;
  const double b = double(p.micro_batch_size), s = double(m.seq_length);
  const double T = s * b / double(p.cp());  // tokens of one micro-batch on this rank
  const double q = double(m.q_size()), kv = double(m.kv_size());
  const double a = double(m.num_attention_heads);
  // The attention kernel's widths: QK^T over heads x qk_dim, PV into heads x v_dim (multi-latent
  // attention: qk_head_dim + qk_pos_emb_head_dim and v_head_dim, else kv_channels); the K and V
  // a CP ring passes: GQA's key/value widths, or MLA's per-head expanded K and V.
  const double qk_dim = double(m.qk_dim()), v_dim = double(m.v_dim());
  const double q_att = double(m.attention_q_width()), o_att = double(m.attention_o_width());
  const double k_ring = double(m.attention_k_width()), v_ring = double(m.attention_v_width());
  const double up = m.swiglu ? 2.0 : 1.0;
  const double F = double(m.ffn());
  const double V = double(m.padded_vocab_size(p.tp()));
  const double interf = pp.overlap_interference;
  const Link tp_link = pp.link_for_group(p.tp(), 1);
  // --tp-comm-overlap (Transformer Engine's userbuffers) works over NVLink only.
  const bool tp_overlap = l.tp_comm_overlap && p.tp() <= pp.nvlink_domain;
  const Link cp_link = pp.link_for_group(p.cp(), p.tp());

  auto fwd_bwd = [&](LinearShape g, double* fwd, double* dgrad, double* wgrad) {
    *fwd = gemm_seconds(pp, g.M, g.N, g.K, prec);
    *dgrad = gemm_seconds(pp, g.M, g.K, g.N, prec);
    *wgrad = gemm_seconds(pp, g.N, g.K, g.M, prec);
  };

  // --- One transformer layer, one micro-batch. -------------------------------------------------
  struct LayerTimes {
    double gemm_f = 0, gemm_b = 0, attn_f = 0, attn_b = 0, elem_f = 0, elem_b = 0;
    double tp_f = 0, tp_b = 0, cp_f = 0, cp_b = 0, ep_f = 0, ep_b = 0;
    // Forward seconds of the parts --recompute-modules names (included in the above), which
    // selective recompute runs again in the backward pass.
    double core_attn = 0;       // core attention (with CP its ring; unfused, the softmax passes)
    double layernorm = 0;       // the input and pre-MLP norms
    double mla_up_proj = 0;     // MLA's q and kv up projections, RoPE and the K/V expansion
    double mlp = 0;             // a dense MLP: fc1, activation, fc2 and their TP collectives
    double moe = 0;             // an MoE MLP: router, dispatch, experts, combine, shared expert
    double shared_experts = 0;  // the shared expert: fc1, activation, fc2, TP collectives
    double moe_act = 0;         // the routed experts' activation
    double selective(const RecomputeModules& r) const {
      using M = RecomputeModule;
      // Nested checkpoints (moe with shared_experts or moe_act) run the inner part again.
      return (r.has(M::kCoreAttn) ? core_attn : 0) + (r.has(M::kLayernorm) ? layernorm : 0) +
             (r.has(M::kMlaUpProj) ? mla_up_proj : 0) + (r.has(M::kMlp) ? mlp : 0) +
             (r.has(M::kMoe) ? moe : 0) + (r.has(M::kSharedExperts) ? shared_experts : 0) +
             (r.has(M::kMoeAct) ? moe_act : 0);
    }
  };
  auto layer = [&](bool moe) {
    LayerTimes x;
    double f, dg, wg;
    // TP collectives of the activations [T, h]: SP splits each all-reduce into an all-gather
    // before the column-parallel linear and a reduce-scatter after the row-parallel one.
    const double act = e * T * h;
    const double ar = collective_seconds(Collective::kAllReduce, act, p.tp(), tp_link);
    const double half = collective_seconds(Collective::kAllGather, act, p.tp(), tp_link);
    // Column-parallel (input side) then row-parallel (output side) linear of a block. Returns
    // its forward seconds: the column-parallel GEMM's, and everything's (GEMMs, TP collectives).
    struct BlockForward {
      double column = 0, total = 0;
    };
    auto block = [&](LinearShape col, LinearShape row) {
      double cf, cd, cw, rf, rd, rw;
      fwd_bwd(col, &cf, &cd, &cw);
      fwd_bwd(row, &rf, &rd, &rw);
      x.gemm_f += cf + rf;
      x.gemm_b += cd + cw + rd + rw;
      double tp_f = 0;
      if (p.tp() > 1 && p.sequence_parallel) {
        // fwd: all-gather in, reduce-scatter out. bwd: all-gather of the output gradient,
        // re-gather of the input (behind dgrad), reduce-scatter of dgrad (behind wgrad).
        tp_f = tp_overlap ? overlapped(half, cf, interf) + overlapped(half, rf, interf) : 2 * half;
        x.tp_b += (tp_overlap ? overlapped(half, rd, interf) : half) +
                  overlapped(half, cd, interf) + overlapped(half, cw, interf);
      } else if (p.tp() > 1) {
        // fwd: all-reduce after the row-parallel linear. bwd: all-reduce of the column-parallel
        // dgrad, behind its wgrad.
        tp_f = tp_overlap ? overlapped(ar, rf, interf) : ar;
        x.tp_b += overlapped(ar, cw, interf);
      }
      x.tp_f += tp_f;
      return BlockForward{cf, cf + rf + tp_f};
    };
    if (!m.mla.enabled) {
      block({T, (q + 2 * kv) / t, h}, {T, h, q / t});
    } else {
      // Multi-latent attention: the column-parallel up projection of q (or linear_q_proj)
      // pairs with linear_proj; kv_up is column-parallel too; the down projections are
      // replicated over TP (every rank computes them on all T rows, no communication).
      const MlaConfig& ml = m.mla;
      const double qr = double(ml.q_lora_rank), kvr = double(ml.kv_lora_rank);
      x.mla_up_proj += block({T, q_att / t, qr > 0 ? qr : h}, {T, h, o_att / t}).column;
      auto replicated = [&](LinearShape g) {
        fwd_bwd(g, &f, &dg, &wg);
        x.gemm_f += f;
        x.gemm_b += dg + wg;
        return f;
      };
      x.mla_up_proj += replicated({T, a * double(ml.qk_head_dim + ml.v_head_dim) / t, kvr});
      replicated({T, kvr + double(ml.qk_pos_emb_head_dim), h});  // kv_down
      if (qr > 0) replicated({T, qr, h});                        // q_down
    }
    // Core attention (causal): QK^T and PV over the whole sequence for this rank's queries.
    if (pp.fused_attention && l.fused_attention) {
      // Fused kernels lose efficiency on short blocks: with CP each ring step works on chunks
      // of s/(2 cp) tokens (Megatron's load-balanced split).
      const double chunk = p.cp() > 1 ? s / double(2 * p.cp()) : s;
      std::tie(x.attn_f, x.attn_b) =
          fused_attention_seconds(pp.attention_flops, T, s, (q_att + o_att) / (2 * t), chunk);
    } else {
      // Materialised scores: batched GEMMs over every (sequence, head) over the full square,
      // and a softmax pass over the scores.
      const double batches = b * a / t, sq = s / double(p.cp());
      const double qk = gemm_seconds(pp, sq, s, qk_dim, prec);
      const double pv = gemm_seconds(pp, sq, v_dim, s, prec);
      // GPUs launch one batched GEMM for all of them; mtron's CPU kernels one GEMM each.
      const double launches = pp.gemm_overlaps_memory ? 1 : batches;
      x.attn_f = batches * (qk + pv - 2 * pp.gemm_overhead) + launches * 2 * pp.gemm_overhead;
      x.attn_b = 2 * x.attn_f;
      const double scores = batches * sq * s;
      x.elem_f += 4 * e * scores / pp.memory_bandwidth;
      x.elem_b += 6 * e * scores / pp.memory_bandwidth;
      x.core_attn += 4 * e * scores / pp.memory_bandwidth;
    }
    x.core_attn += x.attn_f;
    // CP by --cp-comm-type (parallel/context_parallel.h), per layer the mean over the layers'
    // types. p2p: a ring of cp-1 steps passing this rank's K and V (and dK, dV backward), each
    // behind the attention of the chunk it brings. all_gather: K and V gathered (again in the
    // backward, and dK, dV reduce-scattered), exposed. a2a: q, k, v and the output exchanged
    // all-to-all over the group of a ranks, exposed; backward the output gradient there and dq,
    // dk, dv back, as much again (an a2a layer in 16-bit training keeps the head-sharded tensors,
    // as Transformer Engine does), or twice as much in fp32 and at a2a+p2p's first level, whose
    // backward sends the inputs again; a2a+p2p then runs the ring over cp / a with the same
    // blocks.
    if (p.cp() > 1) {
      const double kv_bytes = e * T * (k_ring + v_ring) / t;
      const double x_bytes = kv_bytes + e * T * (q_att + o_att) / t;
      double f = 0, b = 0;
      for (CpCommType type : p.cp_comms()) {
        const int64_t a = p.cp_a2a_size(type), n = p.cp() / a;
        const double heads = a > 1 ? all_to_all_seconds(pp, x_bytes, a, p.tp()) : 0.0;
        const bool kept = type == CpCommType::kA2A && prec != Precision::kFP32;
        f += heads;
        b += (kept ? 1 : 2) * heads;
        if (type == CpCommType::kAllGather) {
          const double ag =
              collective_seconds(Collective::kAllGather, double(n) * kv_bytes, n, cp_link);
          f += ag;
          b += 2 * ag;
        } else if (n > 1) {
          const double ring = double(n - 1) * collective_seconds(Collective::kSendRecv, kv_bytes, 2,
                                                                 pp.link_for_group(n, p.tp() * a));
          f += overlapped(ring, x.attn_f, interf);
          b += overlapped(2 * ring, x.attn_b, interf);
        }
      }
      x.cp_f = f / double(p.cp_comms().size());
      x.cp_b = b / double(p.cp_comms().size());
      x.core_attn += x.cp_f;
    }
    // MLP: dense, or routed experts plus the optional shared expert.
    const double bw = pp.memory_bandwidth;
    // Biases: added to each linear output (read + write), reduced over tokens backward (read),
    // about 1.5 passes over [T, outputs] per direction: the projection's, fc1's and fc2's.
    const bool bias_passes = !pp.fused_bias && m.add_bias_linear;
    const double proj_bias = bias_passes ? 1.5 * e * T * h / st : 0.0;
    const double mlp_bias = bias_passes ? 1.5 * e * T * (F * up / t + h / st) : 0.0;
    double mlp_elem = 0;
    if (!moe) {
      mlp_elem = (up + 1) * e * T * F / t;
      x.mlp = block({T, F * up / t, h}, {T, h, F / t}).total + (mlp_elem + mlp_bias) / bw;
    } else {
      const double E = double(m.num_experts), k = double(m.moe_router_topk);
      const double etp = double(p.etp()), Fe = double(m.moe_ffn());
      const double local_experts = E / double(p.ep());
      // Tokens this rank's experts process: its SP share of the micro-batch, top-k copies,
      // gathered over the expert-TP group (MoE with TP > 1 requires SP, so st = t).
      const double routed = T * k * etp / st;
      const double per_expert = routed / local_experts;
      fwd_bwd({T / st, E, h}, &f, &dg, &wg);  // router
      x.gemm_f += f;
      x.gemm_b += dg + wg;
      x.moe += f;
      fwd_bwd({per_expert, Fe * up / etp, h}, &f, &dg, &wg);
      x.gemm_f += local_experts * f;
      x.gemm_b += local_experts * (dg + wg);
      x.moe += local_experts * f;
      fwd_bwd({per_expert, h, Fe / etp}, &f, &dg, &wg);
      x.gemm_f += local_experts * f;
      x.gemm_b += local_experts * (dg + wg);
      x.moe += local_experts * f;
      const double act = (up + 1) * e * routed * Fe / etp;
      mlp_elem = act + 4 * e * routed * h;  // act, (un)permute
      x.moe_act = act / bw;
      x.moe += mlp_elem / bw;
      if (m.moe_shared_expert_intermediate_size > 0) {
        const double Fs = double(m.moe_shared_expert_intermediate_size);
        const double shared_act = (up + 1) * e * T * Fs / t;
        x.shared_experts = block({T, Fs * up / t, h}, {T, h, Fs / t}).total + shared_act / bw;
        x.moe += x.shared_experts;
        mlp_elem += shared_act;
      }
      if (p.ep() > 1) {  // dispatch and combine, forward and backward
        const double a2a = all_to_all_seconds(pp, e * T / st * k * h, p.ep(), p.etp());
        x.ep_f = 2 * a2a;
        x.ep_b = 2 * a2a;
        x.moe += x.ep_f;
      }
    }
    // Elementwise: two norms (read+write), two residual adds (2 reads + write), dropout
    // masks, RoPE on Q and K, the MLP activation. Backward moves about twice the bytes.
    const double norms = 4 * e * T * h / st;
    x.layernorm = norms / bw;
    double bytes = norms + 6 * e * T * h / st + mlp_elem;
    if (!pp.fused_bias && m.qkv_bias()) bytes += 1.5 * e * T * (q + 2 * kv) / t;
    bytes += proj_bias + mlp_bias;
    if (m.hidden_dropout > 0) bytes += 2 * T * h / st;
    if (!m.mla.enabled && m.position_embedding_type == PositionEmbedding::kRope)
      bytes += 2 * e * T * (q + kv) / t;
    if (m.mla.enabled) {  // RoPE on each head's rope part and the shared key, the K/V expansion
      const double dr = double(m.mla.qk_pos_emb_head_dim);
      const double rope = 2 * e * T * (a * dr / t + dr) + 2 * e * T * (q_att + o_att) / t;
      bytes += rope;
      x.mla_up_proj += rope / bw;
    }
    x.elem_f += bytes / pp.memory_bandwidth;
    x.elem_b += 2 * bytes / pp.memory_bandwidth;
    if (l.ep_comm_overlap) {
      // The interleaved 1F1B schedule runs one micro-batch's forward beside another's backward:
      // the forward's dispatch and combine behind the backward's computation, and the reverse.
      const double compute_f = x.gemm_f + x.attn_f + x.elem_f;
      const double compute_b = x.gemm_b + x.attn_b + x.elem_b;
      const double a2a_f = x.ep_f;
      x.ep_f = overlapped(a2a_f, compute_b, interf);
      x.ep_b = overlapped(x.ep_b, compute_f, interf);
    }
    return x;
  };
  const LayerTimes dense_layer = layer(false);
  const LayerTimes moe_layer = m.is_moe() ? layer(true) : dense_layer;

  // --- Stages.
  // ------------------------------------------------------------------------------------
  const double p2p_bytes = e * T * h / st;
  const Link pp_link = pp.link_for_group(2, p.tp() * p.cp() * p.dp());
  const double p2p_one = collective_seconds(Collective::kSendRecv, p2p_bytes, 2, pp_link);
  std::vector<StageTimes> stages(size_t(p.pp()));
  for (int64_t r = 0; r < p.pp(); ++r) {
    StageTimes& x = stages[size_t(r)];
    // The last stage also runs the MTP depths: a layer of the last decoder layer's kind, the
    // depth's norms and eh_proj, and a pass of the output layer and cross-entropy each.
    const double mtp = r == p.pp() - 1 ? double(m.mtp_num_layers) : 0.0;
    const double layers = double(p.num_layers_in_stage(r));
    const double moe =
        (m.is_moe() ? double(m.num_moe_layers()) * layers / double(m.num_layers) : 0.0) +
        (m.is_moe() && m.is_moe_layer(m.num_layers - 1) ? mtp : 0.0);
    const double dense = layers + mtp - moe;
    auto sum = [&](double LayerTimes::*f, double LayerTimes::*g) {
      return dense * (dense_layer.*f + dense_layer.*g) + moe * (moe_layer.*f + moe_layer.*g);
    };
    auto one = [&](double LayerTimes::*f) { return dense * dense_layer.*f + moe * moe_layer.*f; };
    x.gemm = sum(&LayerTimes::gemm_f, &LayerTimes::gemm_b);
    x.attention = sum(&LayerTimes::attn_f, &LayerTimes::attn_b);
    x.elementwise = sum(&LayerTimes::elem_f, &LayerTimes::elem_b);
    x.tp = sum(&LayerTimes::tp_f, &LayerTimes::tp_b);
    x.cp = sum(&LayerTimes::cp_f, &LayerTimes::cp_b);
    x.ep = sum(&LayerTimes::ep_f, &LayerTimes::ep_b);
    x.fwd = one(&LayerTimes::gemm_f) + one(&LayerTimes::attn_f) + one(&LayerTimes::elem_f) +
            one(&LayerTimes::tp_f) + one(&LayerTimes::cp_f) + one(&LayerTimes::ep_f);
    if (l.recompute == RecomputeGranularity::kFull) {
      x.recompute = x.fwd;
    } else if (l.recompute == RecomputeGranularity::kSelective) {
      x.recompute = dense * dense_layer.selective(l.recompute_modules) +
                    moe * moe_layer.selective(l.recompute_modules);
    }
    if (r == 0) x.elementwise += 6 * e * T * h / pp.memory_bandwidth;  // embedding lookup
    if (r == p.pp() - 1) {
      // Final norm, output layer, cross-entropy over the (TP-split) vocabulary, once for the
      // model and once per MTP depth, with each depth's eh_proj (column-parallel [h, 2h]) and
      // norms.
      double f, dg, wg;
      fwd_bwd({T, V / t, h}, &f, &dg, &wg);
      const double heads = 1 + mtp;
      x.gemm += heads * (f + dg + wg);
      x.fwd += heads * f;
      x.elementwise +=
          heads * (4 * e * T * h / st + (e + 4 + 8 + 4 + 4 + e) * T * V / t) / pp.memory_bandwidth;
      if (p.tp() > 1)
        x.tp += heads * 2 * collective_seconds(Collective::kAllGather, e * T * h, p.tp(), tp_link);
      if (mtp > 0) {
        fwd_bwd({T, h / t, 2 * h}, &f, &dg, &wg);
        x.gemm += mtp * (f + dg + wg);
        x.fwd += mtp * f;
        x.elementwise += mtp * 12 * e * T * h / st / pp.memory_bandwidth;
      }
    }
    x.bwd = x.total() - x.fwd;
    if (p.pp() > 1) {
      // One activation send and one gradient send per micro-batch and model chunk: blocking in
      // 1F1B; in the interleaved schedule overlapped with the next chunk's compute, so its
      // latency and interference remain, once per chunk.
      const double v = double(p.vpp());
      x.p2p = p.vpp() == 1
                  ? 2 * p2p_one
                  : 2 * v * (pp_link.latency + overlapped(p2p_one, x.total() / (2 * v), interf));
    }
  }

  // --- Pipeline schedule over M micro-batches. ---------------------------------------------------
  const double M = double(p.num_microbatches()), v = double(p.vpp());
  size_t slow = 0;
  double sum_tau = 0;
  for (size_t r = 0; r < stages.size(); ++r) {
    sum_tau += stages[r].total();
    if (stages[r].total() > stages[slow].total()) slow = r;
  }
  const StageTimes& x = stages[slow];
  const double pipe = (M - 1 / v) * x.total() + sum_tau / v;

  StepTime out;
  out.gemm = M * x.gemm;
  out.attention = M * x.attention;
  out.elementwise = M * x.elementwise;
  out.recompute = M * x.recompute;
  out.tp_comm = M * x.tp;
  out.cp_comm = M * x.cp;
  out.ep_comm = M * x.ep;
  out.pp_p2p = M * x.p2p;
  out.pp_bubble = pipe - M * x.total();

  // --- Data parallel and the optimizer (the stage holding the most parameters). ------------------
  double dp_exposed = 0, dp_total = 0, optimizer = 0;
  for (int64_t r = 0; r < p.pp(); ++r) {
    const StageParams sp = stage_parameters(m, p, r);
    const double dense = sp.tp_sharded + sp.replicated;
    const double grad_bytes = l.grads_fp32 || prec == Precision::kFP32 ? 4.0 : 2.0;
    const double param_bytes = prec == Precision::kFP32 ? 4.0 : l.fp8_params ? 1.0 : 2.0;
    const int64_t dpcp = p.dp() * p.cp(), edp = p.edp();
    const Link dense_link = pp.link_for_group(dpcp, p.tp());
    const Link expert_link = pp.link_for_group(edp, p.etp() * p.ep());
    double reduce = 0, gather = 0;
    if (p.use_distributed_optimizer) {
      reduce =
          collective_seconds(Collective::kReduceScatter, dense * grad_bytes, dpcp, dense_link) +
          collective_seconds(Collective::kReduceScatter, sp.expert * grad_bytes, edp, expert_link);
      gather =
          collective_seconds(Collective::kAllGather, dense * param_bytes, dpcp, dense_link) +
          collective_seconds(Collective::kAllGather, sp.expert * param_bytes, edp, expert_link);
    } else {
      reduce = collective_seconds(Collective::kAllReduce, dense * grad_bytes, dpcp, dense_link) +
               collective_seconds(Collective::kAllReduce, sp.expert * grad_bytes, edp, expert_link);
    }
    const StageTimes& st_r = stages[size_t(r)];
    const double last_bucket = std::min(1.0, kBucketParams / std::max(1.0, sp.total()));
    double exposed = 0;
    exposed += p.overlap_grad_reduce
                   ? overlapped(reduce * (1 - last_bucket), st_r.bwd, interf) + reduce * last_bucket
                   : reduce;
    exposed += p.overlap_param_gather
                   ? overlapped(gather * (1 - last_bucket), st_r.fwd, interf) + gather * last_bucket
                   : gather;
    dp_exposed = std::max(dp_exposed, exposed);
    dp_total = std::max(dp_total, reduce + gather);
    const double local_params =
        p.use_distributed_optimizer ? dense / double(dpcp) + sp.expert / double(edp) : sp.total();
    optimizer = std::max(optimizer, local_params * kAdamBytesPerParam / pp.memory_bandwidth);
  }
  out.dp_comm = dp_exposed;
  out.dp_comm_total = dp_total;
  out.optimizer = optimizer + pp.step_overhead;
  out.total = pipe + dp_exposed + out.optimizer;

  const double tokens = double(p.global_batch_size) * s;
  out.tokens_per_second = tokens / out.total;
  out.tokens_per_second_per_device = out.tokens_per_second / double(p.world_size);
  const double flops = flops_per_iteration(m, p.global_batch_size, m.padded_vocab_size(p.tp()));
  out.tflops_per_device = flops / out.total / double(p.world_size) / 1e12;
  out.mfu = out.tflops_per_device * 1e12 / pp.peak_flops;
  return out;
}

std::string format_step_time(const StepTime& t) {
  std::string s =
      fmt::format("step {:.3f} s: {:.0f} tokens/s/GPU, {:.4g} TFLOP/s/GPU, MFU {:.1f}%\n", t.total,
                  t.tokens_per_second_per_device, t.tflops_per_device, 100 * t.mfu);
  auto line = [&](const char* name, double v) {
    if (v > 0) s += fmt::format("  {:<22} {:9.4f} s {:5.1f}%\n", name, v, 100 * v / t.total);
  };
  line("GEMMs", t.gemm);
  line("attention", t.attention);
  line("elementwise", t.elementwise);
  line("recompute", t.recompute);
  line("TP communication", t.tp_comm);
  line("CP communication", t.cp_comm);
  line("EP all-to-all", t.ep_comm);
  line("pipeline bubble", t.pp_bubble);
  line("pipeline p2p", t.pp_p2p);
  line("DP communication", t.dp_comm);
  line("optimizer step", t.optimizer);
  return s;
}

}  // namespace mtron::plan
