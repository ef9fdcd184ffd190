#include "mtron/plan/search.h"

#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "mtron/core/error.h"

namespace mtron::plan {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

std::vector<int64_t> pick(int64_t fixed, const std::vector<int64_t>& all) {
  if (fixed <= 0) return all;
  if (std::find(all.begin(), all.end(), fixed) != all.end()) return {fixed};
  return {};
}

bool faster(const Candidate& a, const Candidate& b) {
  if (a.time.tokens_per_second != b.time.tokens_per_second)
    return a.time.tokens_per_second > b.time.tokens_per_second;
  return a.memory.total() < b.memory.total();
}

// a2a+p2p's levels for a layout of TP tp and CP cp: the largest all-to-all group that divides
// the heads and query groups per TP rank and stays in the NVLink domain (the ring across the
// groups takes the network).
std::vector<int64_t> nvlink_a2a_sizes(const ModelConfig& m,
                                      const PerfParams& perf,
                                      int64_t tp,
                                      int64_t cp) {
  int64_t a = 1;
  for (int64_t d : divisors(cp))
    if (cp_heads_divide(m, tp, d) && d * tp <= perf.nvlink_domain) a = d;
  return {a, cp / a};
}

// --hierarchical-context-parallel-sizes under --cp-comm-type a2a+p2p without sizes:
// nvlink_a2a_sizes; none for the other types.
std::vector<int64_t> hierarchical_cp_sizes(
    const ModelConfig& m, const SearchOptions& o, const PerfParams& perf, int64_t tp, int64_t cp) {
  const std::vector<CpCommType> types = parse_cp_comm_types(o.cp_comm_type);
  if (std::find(types.begin(), types.end(), CpCommType::kA2AP2P) == types.end()) return {};
  return nvlink_a2a_sizes(m, perf, tp, cp);
}

// The parallel shape a candidate stands for in the ranking (knobs searched within it).
using ShapeKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>;
ShapeKey shape_of(const Layout& l) {
  const ParallelConfig& p = l.parallel;
  return {p.tp(), p.cp(), p.pp(), p.ep(), p.etp()};
}

struct Shapes {
  std::map<ShapeKey, Candidate> best_fit, least_memory;
  int64_t evaluated = 0, invalid = 0;
  std::string first_invalid;
};

// Searches micro-batch size, VPP and recompute for every shape the options allow.
Shapes search_shapes(const ModelConfig& m,
                     const Cluster& c,
                     const PerfParams& perf,
                     const SearchOptions& o) {
  Shapes out;
  const int64_t world = c.num_devices;
  const bool cpu = c.hardware.is_cpu;
  using RG = RecomputeGranularity;
  std::vector<std::pair<RG, RecomputeModules>> recomputes = {
      {RG::kNone, {}}, {RG::kSelective, {}}, {RG::kFull, {}}};
  // Multi-latent attention keeps Q/K/V at their expanded head dims; rebuilding them from the
  // latents costs the two up-projection GEMMs (mla_up_proj, in Megatron-Bridge's DeepSeek
  // configs).
  if (m.mla.enabled)
    recomputes.push_back({RG::kSelective, RecomputeModules{uint32_t(RecomputeModule::kMlaUpProj)}});
  if (o.recompute) recomputes = {{*o.recompute, o.recompute_modules}};
  // A split given by the options replaces the search's even and uneven stages.
  const bool layout = !o.pipeline_layout.empty();
  const bool fixed_split = layout || o.account_for_embedding || o.account_for_loss;

  for (int64_t tp : pick(o.tp, divisors(world))) {
    if (m.num_attention_heads % tp || m.query_groups() % tp || m.ffn() % tp) continue;
    if (tp > perf.nvlink_domain && !o.allow_cross_node_tp && o.tp == 0) continue;
    for (int64_t cp : pick(o.cp, divisors(world / tp))) {
      if (cp > 1 && m.seq_length % (2 * cp)) continue;
      for (int64_t pp : pick(o.pp, divisors(world / (tp * cp)))) {
        if (pp > m.num_layers) continue;
        const int64_t dp = world / (tp * cp * pp);
        const std::vector<int64_t> eps =
            m.is_moe() ? pick(o.ep, divisors(m.num_experts)) : std::vector<int64_t>{1};
        for (int64_t ep : eps) {
          std::vector<int64_t> etps =
              o.etp > 0 ? std::vector<int64_t>{o.etp} : std::vector<int64_t>{tp};
          if (m.is_moe() && o.etp == 0 && tp > 1) etps.push_back(1);
          for (int64_t etp : etps) {
            if (world % (etp * ep * pp)) continue;
            for (int64_t mbs = 1; mbs <= o.max_micro_batch_size; mbs *= 2) {
              if (o.micro_batch_size > 0 && mbs != o.micro_batch_size) continue;
              if (o.global_batch_size % (mbs * dp)) continue;
              const int64_t M = o.global_batch_size / (mbs * dp);
              // (a layout string sets VPP itself: 0 here)
              std::vector<int64_t> vpps = {layout ? 0 : 1};
              if (pp > 1 && o.vpp != 1 && M % pp == 0 && !layout) {
                const int64_t per_stage = m.num_layers / pp;
                for (int64_t v = 2; v <= per_stage; ++v)
                  if (o.vpp == 0 || v == o.vpp) vpps.push_back(v);
              }
              if (o.vpp > 1 && !layout) vpps.erase(vpps.begin());
              for (int64_t v : vpps) {
                int64_t first = 0, last = 0;
                // Where Megatron's uneven split has no answer, a layout string balances the
                // stages (the embedding, the MTP depths and the loss counted as layers).
                std::string generated;
                if (!fixed_split && !split_pipeline_layers(m.num_layers, pp, v, &first, &last)) {
                  generated = balanced_pipeline_layout(m, pp, v);
                  if (generated.empty()) continue;
                }
                for (const auto& [rc, modules] : recomputes) {
                  Layout l;
                  ParallelConfig& p = l.parallel;
                  p.world_size = world;
                  p.tensor_model_parallel_size = tp;
                  p.pipeline_model_parallel_size = pp;
                  p.context_parallel_size = cp;
                  p.expert_model_parallel_size = ep;
                  p.expert_tensor_parallel_size = etp;
                  p.num_virtual_stages_per_pipeline_rank = v > 1 && generated.empty() ? v : 0;
                  p.decoder_first_pipeline_num_layers = first;
                  p.decoder_last_pipeline_num_layers = last;
                  p.pipeline_model_parallel_layout =
                      generated.empty() ? o.pipeline_layout : generated;
                  p.account_for_embedding_in_pipeline_split = o.account_for_embedding;
                  p.account_for_loss_in_pipeline_split = o.account_for_loss;
                  p.sequence_parallel = o.sequence_parallel && tp > 1;
                  const bool sharded = dp * cp > 1 || world / (etp * ep * pp) > 1;
                  p.use_distributed_optimizer = o.distributed_optimizer && sharded;
                  // Overlap of DP communication with compute: Megatron's flags on GPUs. mtron's
                  // CPU trainer is planned without (communication counted in full).
                  p.overlap_grad_reduce = !cpu && sharded && o.overlap_dp_comm;
                  p.overlap_param_gather = !cpu && p.use_distributed_optimizer && o.overlap_dp_comm;
                  p.micro_batch_size = mbs;
                  p.global_batch_size = o.global_batch_size;
                  p.cp_comm_type = o.cp_comm_type;
                  p.hierarchical_context_parallel_sizes =
                      o.hierarchical_cp.empty() ? hierarchical_cp_sizes(m, o, perf, tp, cp)
                                                : o.hierarchical_cp;
                  l.recompute = rc;
                  l.recompute_modules = modules;
                  l.precision = o.precision;
                  l.grads_fp32 = o.grads_fp32;
                  l.tp_comm_overlap = o.tp_comm_overlap && tp > 1 && !cpu && p.sequence_parallel;
                  l.fused_attention = o.fused_attention;
                  l.fp8_params = o.fp8_params && o.precision == Precision::kFP8;
                  l.fp8_amax_history_len = o.fp8_amax_history_len;
                  l.fp8_hybrid = o.fp8_hybrid;
                  try {
                    p.finalize(m);
                    // Megatron's MoELayer refuses to train with TP > 1 and no SP.
                    MT_CHECK(!m.is_moe() || p.tp() == 1 || p.sequence_parallel,
                             "MoE with --tensor-model-parallel-size > 1 needs "
                             "--sequence-parallel");
                  } catch (const Error& e) {
                    if (out.invalid++ == 0) out.first_invalid = e.what();
                    continue;
                  }
                  // Megatron's rules for --overlap-moe-expert-parallel-comm: EP, an interleaved
                  // schedule when pipelined, no full recompute.
                  l.ep_comm_overlap = o.ep_comm_overlap && !cpu && p.ep() > 1 &&
                                      (p.pp() == 1 || p.vpp() > 1) &&
                                      rc != RecomputeGranularity::kFull;
                  ++out.evaluated;
                  Candidate cand = evaluate_layout(m, l, c, perf, o.memory_margin);
                  const ShapeKey key = shape_of(l);
                  if (cand.fits) {
                    auto it = out.best_fit.find(key);
                    if (it == out.best_fit.end() || faster(cand, it->second))
                      out.best_fit[key] = cand;
                  } else {
                    auto it = out.least_memory.find(key);
                    if (it == out.least_memory.end() ||
                        cand.memory.total() < it->second.memory.total())
                      out.least_memory[key] = cand;
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

std::string gib(double bytes) {
  return fmt::format("{:.1f} GiB", bytes / kGiB);
}

// The non-compute costs of a step, named for people.
std::vector<std::pair<std::string, double>> overheads(const StepTime& t) {
  return {{"TP communication", t.tp_comm}, {"CP communication", t.cp_comm},
          {"EP all-to-all", t.ep_comm},    {"pipeline bubble", t.pp_bubble},
          {"pipeline p2p", t.pp_p2p},      {"exposed DP communication", t.dp_comm},
          {"recompute", t.recompute},      {"optimizer step", t.optimizer}};
}

std::string pct(double part, double whole) {
  return fmt::format("{:.1f}%", 100 * part / whole);
}

// Why `c` costs what it does, and where it loses to `best` (nullptr for the best itself).
// The pipeline stages' layer counts: "30/31", or "15/16x6/15" (the middle stages are equal).
std::string stage_sizes(const ParallelConfig& p) {
  const int64_t P = p.pp();
  std::string s = std::to_string(p.num_layers_in_stage(0));
  if (P > 2) s += fmt::format("/{}x{}", p.num_layers_in_stage(1), P - 2);
  return s + "/" + std::to_string(p.num_layers_in_stage(P - 1));
}

std::vector<std::string> explain(const ModelConfig& m,
                                 const Candidate& c,
                                 const Candidate* best,
                                 const Cluster& cluster,
                                 const PerfParams& perf,
                                 double margin) {
  std::vector<std::string> r;
  const ParallelConfig& p = c.layout.parallel;
  const StepTime& t = c.time;
  r.push_back(fmt::format("fits: {} of {} per GPU ({} free)", gib(c.memory.total()),
                          gib(c.memory.capacity),
                          pct(c.memory.capacity - c.memory.total(), c.memory.capacity)));
  if (p.tp() == 1 && p.pp() == 1 && p.cp() == 1 && p.ep() == 1)
    r.push_back("no model parallelism: every GPU runs whole layers, no TP/PP communication");
  if (p.tp() > 1) {
    const Link link = perf.link_for_group(p.tp(), 1);
    r.push_back(
        fmt::format("TP {} on {}: {} of the step{}", p.tp(), link.name, pct(t.tp_comm, t.total),
                    p.sequence_parallel ? " (sequence parallel: all-gather/reduce-scatter)" : ""));
  }
  if (p.pp() > 1) {
    r.push_back(
        fmt::format("PP {}{}: bubble (p-1)/(v*m) = {}/({}*{}) costs {}{}", p.pp(),
                    p.vpp() > 1 ? fmt::format(" interleaved x{}", p.vpp()) : "", p.pp() - 1,
                    p.vpp(), p.num_microbatches(), pct(t.pp_bubble, t.total),
                    p.uneven_stages() ? "; uneven stages " + stage_sizes(p) + " layers" : ""));
  }
  if (p.cp() > 1)
    r.push_back(fmt::format("CP {}: each GPU holds {} of the {} tokens; ring exchange {}", p.cp(),
                            m.seq_length / p.cp(), m.seq_length, pct(t.cp_comm, t.total)));
  if (p.ep() > 1)
    r.push_back(fmt::format("EP {}: {} experts per GPU; all-to-all {}", p.ep(),
                            m.num_experts / p.ep(), pct(t.ep_comm, t.total)));
  if (p.use_distributed_optimizer)
    r.push_back(fmt::format("distributed optimizer over DP x CP = {}: optimizer state {}",
                            p.dp() * p.cp(), gib(c.memory.optimizer)));
  if (t.dp_comm_total > 0)
    r.push_back(fmt::format("DP communication {:.3f} s per step, {:.3f} s exposed ({})",
                            t.dp_comm_total, t.dp_comm, pct(t.dp_comm, t.total)));
  if (c.layout.recompute != RecomputeGranularity::kNone) {
    Layout plain = c.layout;
    plain.recompute = RecomputeGranularity::kNone;
    const MemoryBreakdown mem = estimate_memory(m, plain, cluster);
    r.push_back(fmt::format(
        "{} recompute ({} of the step){}", recompute_label(c.layout), pct(t.recompute, t.total),
        mem.fits(margin) ? "" : fmt::format(": without it {} needed", gib(mem.total()))));
  }
  r.push_back(fmt::format("micro-batch {}: {} micro-batches per DP rank per step",
                          p.micro_batch_size, p.num_microbatches()));
  if (best) {
    // Every candidate runs the same global batch, so step times compare cause by cause.
    std::vector<std::pair<std::string, double>> diffs;
    auto compute = [](const StepTime& x) { return x.gemm + x.attention + x.elementwise; };
    diffs.push_back({"compute (smaller or more GEMMs per GPU)", compute(t) - compute(best->time)});
    const auto mine = overheads(t), theirs = overheads(best->time);
    for (size_t i = 0; i < mine.size(); ++i)
      diffs.push_back({mine[i].first, mine[i].second - theirs[i].second});
    std::sort(diffs.begin(), diffs.end(),
              [](const auto& x, const auto& y) { return x.second > y.second; });
    std::string why;
    for (size_t i = 0; i < diffs.size() && i < 2 && diffs[i].second > 0.005 * best->time.total; ++i)
      why += fmt::format("{}{} +{}", why.empty() ? "" : ", ", diffs[i].first,
                         pct(diffs[i].second, best->time.total));
    r.push_back(fmt::format("{:.1f}% slower than #1{}{}",
                            100 * (1 - t.tokens_per_second / best->time.tokens_per_second),
                            why.empty() ? "" : ": ", why));
  }
  return r;
}

// One alternative, costed within its shape, against the best plan.
std::string judge_alternative(const std::string& label,
                              const ModelConfig& m,
                              const Cluster& c,
                              const PerfParams& perf,
                              const SearchOptions& o,
                              const Candidate& best) {
  const Shapes s = search_shapes(m, c, perf, o);
  if (!s.best_fit.empty()) {
    const Candidate* top = nullptr;
    for (const auto& [k, cand] : s.best_fit)
      if (!top || faster(cand, *top)) top = &cand;
    const double slower = 1 - top->time.tokens_per_second / best.time.tokens_per_second;
    const ParallelConfig& p = top->layout.parallel;
    std::string why;
    if (p.tp() > perf.nvlink_domain) {
      why = fmt::format(
          "{:.1f}% slower than #1: TP={} crosses {}: an inter-node {} every layer, not "
          "overlapped ({} of the step on {})",
          100 * slower, p.tp(),
          perf.nvlink_domain < perf.devices_per_node ? "NVLink domains" : "nodes",
          p.sequence_parallel ? "all-gather/reduce-scatter" : "all-reduce",
          pct(top->time.tp_comm, top->time.total), perf.link_for_group(p.tp(), 1).name);
    } else {
      const auto r = explain(m, *top, &best, c, perf, o.memory_margin);
      why = r.back();
    }
    if (slower <= 0)
      return fmt::format("{} ({}): as fast or faster ({:.1f}%) but outside the search limits",
                         label, layout_name(top->layout), -100 * slower);
    return fmt::format("{} ({}): {}", label, layout_name(top->layout), why);
  }
  if (!s.least_memory.empty()) {
    const Candidate* least = nullptr;
    for (const auto& [k, cand] : s.least_memory)
      if (!least || cand.memory.total() < least->memory.total()) least = &cand;
    const MemoryBreakdown& b = least->memory;
    return fmt::format(
        "{}: does not fit: even {} needs {} per GPU ({} weights, gradients and optimizer state, "
        "{} activations) of {}",
        label, layout_name(least->layout), gib(b.total()), gib(b.model_state()),
        gib(b.activations + b.working), gib(b.capacity * (1 - o.memory_margin)));
  }
  return fmt::format("{}: not a valid layout here{}{}", label, s.first_invalid.empty() ? "" : ": ",
                     s.first_invalid);
}

std::vector<std::string> alternatives(const ModelConfig& m,
                                      const Cluster& c,
                                      const PerfParams& perf,
                                      const SearchOptions& o,
                                      const Candidate& best) {
  std::vector<std::string> out;
  const ParallelConfig& b = best.layout.parallel;
  const int64_t world = c.num_devices;
  auto fixed = [&](int64_t tp, int64_t pp, int64_t cp) {
    SearchOptions x = o;
    x.tp = tp;
    x.pp = pp;
    x.cp = cp;
    x.allow_cross_node_tp = true;
    return x;
  };
  auto same_shape = [&](const std::string& label, auto&& change) {
    Layout l = best.layout;
    change(l);
    try {
      l.parallel.finalize(m);
    } catch (const Error& e) {
      out.push_back(fmt::format("{}: not valid: {}", label, e.what()));
      return;
    }
    const Candidate cand = evaluate_layout(m, l, c, perf, o.memory_margin);
    if (!cand.fits) {
      out.push_back(fmt::format("{}: does not fit: needs {} per GPU of {}", label,
                                gib(cand.memory.total()),
                                gib(cand.memory.capacity * (1 - o.memory_margin))));
    } else {
      out.push_back(
          fmt::format("{}: {}", label, explain(m, cand, &best, c, perf, o.memory_margin).back()));
    }
  };

  if (b.tp() != 1 || b.pp() != 1 || b.cp() != 1)
    out.push_back(
        judge_alternative("pure data parallelism (TP1 PP1)", m, c, perf, fixed(1, 1, 1), best));
  const int64_t node_tp = std::min<int64_t>(perf.nvlink_domain, world);
  if (b.tp() != node_tp && world % node_tp == 0 && m.num_attention_heads % node_tp == 0)
    out.push_back(judge_alternative(fmt::format("TP={} (a whole NVLink domain)", node_tp), m, c,
                                    perf, fixed(node_tp, 0, 0), best));
  const int64_t cross_tp = 2 * perf.nvlink_domain;
  if (world % cross_tp == 0 && m.num_attention_heads % cross_tp == 0 &&
      m.query_groups() % cross_tp == 0)
    out.push_back(
        judge_alternative(fmt::format("TP={}", cross_tp), m, c, perf, fixed(cross_tp, 0, 0), best));
  if (b.tp() > 1)
    out.push_back(judge_alternative(
        fmt::format("pipeline instead of tensor parallelism (TP1 PP{})", b.tp() * b.pp()), m, c,
        perf, fixed(1, b.tp() * b.pp(), b.cp()), best));
  if (b.pp() > 1 && b.tp() * b.pp() <= perf.nvlink_domain)
    out.push_back(judge_alternative(
        fmt::format("tensor instead of pipeline parallelism (TP{} PP1)", b.tp() * b.pp()), m, c,
        perf, fixed(b.tp() * b.pp(), 1, b.cp()), best));
  if (b.cp() > 1)
    out.push_back(
        judge_alternative("no context parallelism (CP1)", m, c, perf, fixed(0, 0, 1), best));
  else if (m.seq_length >= 8192 && world % 2 == 0)
    out.push_back(judge_alternative("context parallelism CP2", m, c, perf, fixed(0, 0, 2), best));
  if (b.cp() > 1 && b.cp_comms() != std::vector<CpCommType>{CpCommType::kA2A}) {
    same_shape("--cp-comm-type a2a (the heads exchanged all-to-all, not hidden)", [](Layout& l) {
      l.parallel.cp_comm_type = {"a2a"};
      l.parallel.hierarchical_context_parallel_sizes.clear();
    });
  }
  // Across NVLink domains: the all-to-all inside one, the ring across.
  const std::vector<int64_t> sizes = nvlink_a2a_sizes(m, perf, b.tp(), b.cp());
  if (b.cp_comms() != std::vector<CpCommType>{CpCommType::kA2AP2P} && sizes[0] > 1 &&
      sizes[1] > 1) {
    same_shape(fmt::format("--cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes {} {} "
                           "(all-to-all in the NVLink domain, the ring across)",
                           sizes[0], sizes[1]),
               [&](Layout& l) {
                 l.parallel.cp_comm_type = {"a2a+p2p"};
                 l.parallel.hierarchical_context_parallel_sizes = sizes;
               });
  }
  if (b.use_distributed_optimizer)
    same_shape("without the distributed optimizer", [](Layout& l) {
      l.parallel.use_distributed_optimizer = false;
      l.parallel.overlap_param_gather = false;
    });
  if (best.layout.recompute != RecomputeGranularity::kNone)
    same_shape("without recompute", [](Layout& l) { l.recompute = RecomputeGranularity::kNone; });
  else
    same_shape("with full recompute", [](Layout& l) { l.recompute = RecomputeGranularity::kFull; });
  return out;
}

}  // namespace

std::string balanced_pipeline_layout(const ModelConfig& m, int64_t pp, int64_t vpp) {
  const std::string units = "E" + std::string(size_t(m.num_layers), 't') +
                            std::string(size_t(m.mtp_num_layers), 'm') + "L";
  const int64_t U = int64_t(units.size()), S = pp * vpp;
  if (U % S) return {};
  std::vector<std::string> stages;
  for (int64_t s = 0; s < S; ++s)
    stages.push_back(units.substr(size_t(s * (U / S)), size_t(U / S)));
  // Megatron keeps the MTP depths in the last stage, with the loss.
  for (int64_t s = 0; s + 1 < S; ++s)
    if (stages[size_t(s)].find('m') != std::string::npos) return {};
  std::string out;
  for (size_t s = 0; s < stages.size();) {
    size_t run = 1;
    while (s + run + 1 < stages.size() && stages[s + run] == stages[s]) ++run;
    if (s + 1 == stages.size()) {
      out += stages[s];
    } else if (run > 1) {
      out += "(" + stages[s] + "|)*" + std::to_string(run);
    } else {
      out += stages[s] + "|";
    }
    s += run;
  }
  return out;
}

bool split_pipeline_layers(int64_t layers, int64_t pp, int64_t vpp, int64_t* first, int64_t* last) {
  *first = *last = 0;
  if (layers % pp == 0) return (layers / pp) % vpp == 0;
  if (pp == 1) return false;
  for (int64_t x = layers / pp; x >= 1; --x) {
    if (x % vpp) continue;
    if (pp == 2) {
      if ((layers - x) % vpp) continue;
      *first = x;
      *last = layers - x;
      return true;
    }
    const int64_t rest = layers - 2 * x;
    if (rest % (pp - 2) || rest / (pp - 2) < x || (rest / (pp - 2)) % vpp) continue;
    *first = *last = x;
    return true;
  }
  return false;
}

Candidate evaluate_layout(const ModelConfig& m,
                          const Layout& l,
                          const Cluster& c,
                          const PerfParams& perf,
                          double memory_margin) {
  Candidate cand;
  cand.layout = l;
  cand.memory = estimate_memory(m, l, c);
  cand.time = estimate_step_time(m, l, perf);
  cand.fits = cand.memory.fits(memory_margin);
  return cand;
}

SearchResult search_layouts(const ModelConfig& m,
                            const Cluster& c,
                            const PerfParams& perf,
                            const SearchOptions& o) {
  MT_CHECK(o.global_batch_size > 0, "--global-batch-size must be positive (got ",
           o.global_batch_size, ")");
  const Shapes s = search_shapes(m, c, perf, o);
  SearchResult r;
  r.evaluated = s.evaluated;
  r.invalid = s.invalid;
  r.first_invalid_reason = s.first_invalid;
  for (const auto& [k, cand] : s.best_fit) r.plans.push_back(cand);
  std::sort(r.plans.begin(), r.plans.end(), faster);
  for (const auto& [k, cand] : s.least_memory)
    if (!s.best_fit.count(k)) r.too_big.push_back(cand);
  std::sort(r.too_big.begin(), r.too_big.end(), [](const Candidate& a, const Candidate& b) {
    return a.memory.total() < b.memory.total();
  });
  if (r.plans.empty()) return r;
  const Candidate best = r.plans[0];
  for (size_t i = 0; i < r.plans.size() && int(i) < o.top; ++i)
    r.plans[i].reasons = explain(m, r.plans[i], i == 0 ? nullptr : &best, c, perf, o.memory_margin);
  r.alternatives = alternatives(m, c, perf, o, best);
  return r;
}

}  // namespace mtron::plan
