#include "mtron/plan/report.h"

#include <fmt/core.h>

#include <algorithm>

namespace mtron::plan {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::vector<std::string> cp_comm_names(const ParallelConfig& p) {
  std::vector<std::string> names;
  for (CpCommType t : p.cp_comms()) names.push_back(cp_comm_name(t));
  return names;
}

nlohmann::json layout_json(const Layout& l) {
  const ParallelConfig& p = l.parallel;
  return {{"tensor_model_parallel_size", p.tp()},
          {"pipeline_model_parallel_size", p.pp()},
          {"virtual_pipeline_model_parallel_size", p.vpp()},
          {"decoder_first_pipeline_num_layers", p.decoder_first_pipeline_num_layers},
          {"decoder_last_pipeline_num_layers", p.decoder_last_pipeline_num_layers},
          {"context_parallel_size", p.cp()},
          // --cp-comm-type: one word for every layer or one per layer (["p2p"] at CP 1)
          {"cp_comm_type", cp_comm_names(p)},
          {"hierarchical_context_parallel_sizes", p.hierarchical_context_parallel_sizes},
          {"expert_model_parallel_size", p.ep()},
          {"expert_tensor_parallel_size", p.etp()},
          {"data_parallel_size", p.dp()},
          {"sequence_parallel", p.sequence_parallel},
          {"use_distributed_optimizer", p.use_distributed_optimizer},
          {"micro_batch_size", p.micro_batch_size},
          {"global_batch_size", p.global_batch_size},
          {"num_microbatches", p.num_microbatches()},
          {"recompute_granularity", recompute_name(l.recompute)},
          // selective recompute's modules (Megatron's names); empty with the other granularities
          {"recompute_modules", l.recompute == RecomputeGranularity::kSelective
                                    ? recompute_module_list(l.recompute_modules)
                                    : std::vector<std::string_view>{}},
          {"precision", precision_name(l.precision)}};
}

nlohmann::json candidate_json(const Candidate& c) {
  const MemoryBreakdown& m = c.memory;
  const StepTime& t = c.time;
  return {{"name", layout_name(c.layout)},
          {"layout", layout_json(c.layout)},
          {"fits", c.fits},
          {"parameters_per_gpu", m.parameters},
          {"memory_stage", m.stage},
          {"memory_gib",
           {{"total", m.total() / kGiB},
            {"capacity", m.capacity / kGiB},
            {"weights", m.weights / kGiB},
            {"gradients", m.gradients / kGiB},
            {"optimizer", m.optimizer / kGiB},
            {"fp8_weights", m.fp8_weights / kGiB},
            {"fp8_state", m.fp8_state / kGiB},
            {"activations", m.activations / kGiB},
            {"transient", m.working / kGiB},
            {"overhead", m.overhead / kGiB}}},
          {"time_s",
           {{"step", t.total},
            {"gemm", t.gemm},
            {"attention", t.attention},
            {"elementwise", t.elementwise},
            {"recompute", t.recompute},
            {"tp_comm", t.tp_comm},
            {"cp_comm", t.cp_comm},
            {"ep_comm", t.ep_comm},
            {"pp_bubble", t.pp_bubble},
            {"pp_p2p", t.pp_p2p},
            {"dp_comm_exposed", t.dp_comm},
            {"dp_comm_total", t.dp_comm_total},
            {"optimizer", t.optimizer}}},
          {"tokens_per_second_per_gpu", t.tokens_per_second_per_device},
          {"tflops_per_gpu", t.tflops_per_device},
          {"mfu", t.mfu},
          {"reasons", c.reasons}};
}

// A row of the plans table; the recompute column `width` characters wide.
std::string table_row(int rank, const Candidate& c, size_t width) {
  const ParallelConfig& p = c.layout.parallel;
  return fmt::format(
      "{:>3} {:>3} {:>3} {:>3} {:>3} {:>3} {:>4} {:>4} {:>4} {:<{}} {:>8.1f} {:>9.3f} "
      "{:>10.0f} {:>8.4g} {:>5.1f}%\n",
      rank, p.tp(), p.pp(), p.vpp(), p.cp(), p.ep(), p.dp(), p.micro_batch_size,
      p.num_microbatches(), recompute_label(c.layout), width, c.memory.total() / kGiB, c.time.total,
      c.time.tokens_per_second_per_device, c.time.tflops_per_device, 100 * c.time.mfu);
}

}  // namespace

std::string cluster_summary(const Cluster& c) {
  const Hardware& h = c.hardware;
  if (h.is_cpu) {
    return fmt::format("{} MPI rank{} on {} ({:.0f} GiB, {} thread{} per rank)", c.num_devices,
                       c.num_devices == 1 ? "" : "s", h.description, h.memory_bytes / kGiB,
                       std::max<int64_t>(1, h.gpus_per_node / c.devices_per_node),
                       h.gpus_per_node / c.devices_per_node > 1 ? "s" : "");
  }
  return fmt::format("{} x {} ({} node{} of {}; NVLink {:.0f} GB/s per GPU; {} x {} per node)",
                     c.num_devices, h.description, c.nodes(), c.nodes() == 1 ? "" : "s",
                     c.devices_per_node, h.nvlink_bandwidth / 1e9, h.nics_per_node,
                     h.network.description);
}

std::string format_plans(const ModelConfig& m,
                         const Cluster& c,
                         const SearchOptions& o,
                         const SearchResult& r) {
  std::string s;
  s += fmt::format("model:   {} ({:.2f} B parameters)\n", m.summary(),
                   double(m.num_parameters(1)) / 1e9);
  s += fmt::format("cluster: {}\n", cluster_summary(c));
  s += fmt::format(
      "batch:   {} sequences x {} tokens per step, {}; {} layouts costed, {} rejected by "
      "Megatron's rules\n",
      o.global_batch_size, m.seq_length, precision_name(o.precision), r.evaluated, r.invalid);
  if (r.plans.empty()) return s;
  size_t width = 9;  // "recompute", or the longest label shown
  for (size_t i = 0; i < r.plans.size() && int(i) < o.top; ++i)
    width = std::max(width, recompute_label(r.plans[i].layout).size());
  s += fmt::format(
      "\n  #  TP  PP VPP  CP  EP  DP  mbs    m {:<{}}  mem GiB    step s  tok/s/GPU TFLOP/s   "
      "MFU\n",
      "recompute", width);
  for (size_t i = 0; i < r.plans.size() && int(i) < o.top; ++i)
    s += table_row(int(i) + 1, r.plans[i], width);
  s += fmt::format("\n(MFU against {})\n", c.device().peak_description(o.precision));
  for (size_t i = 0; i < r.plans.size() && int(i) < o.top; ++i) {
    s += fmt::format("\n#{} {}\n", i + 1, layout_name(r.plans[i].layout));
    for (const auto& why : r.plans[i].reasons) s += "  - " + why + "\n";
  }
  s += "\n#1 " + format_memory(r.plans[0].memory);
  s += "#1 " + format_step_time(r.plans[0].time);
  if (!r.alternatives.empty()) {
    s += "\nwhy not:\n";
    for (const auto& a : r.alternatives) s += "  - " + a + "\n";
  }
  return s;
}

nlohmann::json plans_json(const ModelConfig& m,
                          const Cluster& c,
                          const SearchOptions& o,
                          const SearchResult& r) {
  nlohmann::json plans = nlohmann::json::array();
  for (size_t i = 0; i < r.plans.size() && int(i) < o.top; ++i)
    plans.push_back(candidate_json(r.plans[i]));
  nlohmann::json too_big = nlohmann::json::array();
  for (size_t i = 0; i < r.too_big.size() && i < 3; ++i)
    too_big.push_back(candidate_json(r.too_big[i]));
  return {{"model",
           {{"summary", m.summary()},
            {"parameters", m.num_parameters(1)},
            {"seq_length", m.seq_length},
            {"padded_vocab_size", m.padded_vocab_size(1)}}},
          {"cluster",
           {{"hardware", c.hardware.name},
            {"description", c.hardware.description},
            {"gpus", c.num_devices},
            {"gpus_per_node", c.devices_per_node},
            {"nodes", c.nodes()},
            {"mfu_peak", c.device().peak_description(o.precision)},
            {"mfu_peak_tflops", c.device().mfu_peak_flops(o.precision) / 1e12},
            {"peak_tflops",
             {{"bf16", c.device().peak_bf16 / 1e12},
              {"fp16", c.device().peak_fp16 / 1e12},
              {"fp8", c.device().peak_fp8 / 1e12},
              {"fp32", c.device().peak_fp32 / 1e12}}}}},
          {"global_batch_size", o.global_batch_size},
          {"precision", precision_name(o.precision)},
          {"evaluated", r.evaluated},
          {"invalid", r.invalid},
          {"plans", plans},
          {"smallest_that_do_not_fit", too_big},
          {"alternatives", r.alternatives}};
}

}  // namespace mtron::plan
