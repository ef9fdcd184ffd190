#include "mtron/core/parallel_config.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>

#include "mtron/core/error.h"
#include "mtron/core/pipeline_layout.h"

namespace mtron {

void ParallelConfig::finalize(const ModelConfig& m) {
  auto positive = [](int64_t v, const char* flag) {
    MT_CHECK(v >= 1, flag, " must be >= 1 (got ", v, ")");
  };
  positive(world_size, "world size");
  positive(tensor_model_parallel_size, "--tensor-model-parallel-size");
  positive(pipeline_model_parallel_size, "--pipeline-model-parallel-size");
  positive(context_parallel_size, "--context-parallel-size");
  positive(expert_model_parallel_size, "--expert-model-parallel-size");
  MT_CHECK(expert_tensor_parallel_size >= 0, "--expert-tensor-parallel-size must be >= 1 (got ",
           expert_tensor_parallel_size, ")");
  if (expert_tensor_parallel_size == 0) expert_tensor_parallel_size = tensor_model_parallel_size;
  positive(micro_batch_size, "--micro-batch-size");

  MT_CHECK(world_size % (tp() * pp() * cp()) == 0, "world_size (", world_size,
           ") is not divisible by tensor_model_parallel_size (", tp(),
           ") x pipeline_model_parallel_size (", pp(), ") x context_parallel_size (", cp(), ")");
  MT_CHECK(world_size % (etp() * ep() * pp()) == 0, "world_size (", world_size,
           ") is not divisible by expert_tensor_parallel_size (", etp(),
           ") x expert_model_parallel_size (", ep(), ") x pipeline_model_parallel_size (", pp(),
           ")");

  MT_CHECK(m.num_attention_heads % tp() == 0, "num_attention_heads (", m.num_attention_heads,
           ") must be a multiple of tensor_model_parallel_size (", tp(), ")");
  MT_CHECK(m.query_groups() % tp() == 0, "num_query_groups (", m.query_groups(),
           ") must be a multiple of tensor_model_parallel_size (", tp(), ")");
  MT_CHECK(m.ffn() % tp() == 0, "ffn_hidden_size (", m.ffn(),
           ") must be a multiple of tensor_model_parallel_size (", tp(), ")");

  if (tp() == 1 && sequence_parallel) sequence_parallel = false;  // Megatron forces SP off at TP=1
  if (sequence_parallel) {
    MT_CHECK(m.seq_length / cp() % tp() == 0,
             "--sequence-parallel needs the sequence length per "
             "context-parallel rank (",
             m.seq_length / cp(),
             ") to be a multiple of "
             "tensor_model_parallel_size (",
             tp(), ")");
  }

  split_layers(m);

  if (cp() > 1) {
    MT_CHECK(m.seq_length % (2 * cp()) == 0, "seq-length (", m.seq_length,
             ") should be a multiple of 2 * context-parallel-size (", 2 * cp(),
             ") if context-parallel-size > 1");
  }
  check_cp_comm(m);
  if (m.is_moe()) {
    MT_CHECK(m.num_experts % ep() == 0, "Number of experts (", m.num_experts,
             ") should be a multiple of expert model parallel_size (", ep(), ")");
    MT_CHECK(m.moe_ffn() % etp() == 0, "moe_ffn_hidden_size (", m.moe_ffn(),
             ") must be a multiple of expert_tensor_parallel_size (", etp(), ")");
    MT_CHECK(m.moe_shared_expert_intermediate_size % tp() == 0,
             "moe_shared_expert_intermediate_size (", m.moe_shared_expert_intermediate_size,
             ") must be a multiple of tensor_model_parallel_size (", tp(), ")");
  } else {
    MT_CHECK(ep() == 1,
             "num_experts must be non None to use expert model parallelism "
             "(--expert-model-parallel-size ",
             ep(), " needs --num-experts)");
  }
  MT_CHECK(!use_megatron_fsdp || !use_torch_fsdp2,
           "--use-megatron-fsdp and --use-torch-fsdp2 exclude each other");
  if (use_torch_fsdp2) {  // Megatron's rules (arguments.py), its words
    MT_CHECK(pp() == 1, "--use-torch-fsdp2 is not supported with pipeline parallelism");
    MT_CHECK(ep() == 1, "--use-torch-fsdp2 is not supported with expert parallelism");
    MT_CHECK(!use_distributed_optimizer,
             "--use-torch-fsdp2 is not supported with MCore's distributed optimizer");
    MT_CHECK(m.untie_embeddings_and_output_weights,
             "--use-torch-fsdp2 requires --untie-embeddings-and-output-weights");
  }
  if (use_megatron_fsdp || use_torch_fsdp2) {
    const std::string& s = data_parallel_sharding_strategy;
    MT_CHECK(s == "no_shard" || s == "optim" || s == "optim_grads" || s == "optim_grads_params",
             "--data-parallel-sharding-strategy ", s,
             ": expected no_shard, optim, optim_grads or optim_grads_params");
    // FSDP shards what the distributed optimizer shards (and more), with its shards.
    use_distributed_optimizer = use_torch_fsdp2 || s != "no_shard";
  }
  if (overlap_param_gather) {
    MT_CHECK(use_distributed_optimizer || use_megatron_fsdp,
             "--overlap-param-gather only supported with distributed optimizer, megatron fsdp, "
             "or dist_muon");
    MT_CHECK(overlap_grad_reduce, "Must use --overlap-param-gather with --overlap-grad-reduce");
  }

  if (global_batch_size == 0) global_batch_size = micro_batch_size * dp();
  positive(global_batch_size, "--global-batch-size");
  MT_CHECK(global_batch_size % (micro_batch_size * dp()) == 0, "global batch size (",
           global_batch_size, ") is not divisible by micro batch size (", micro_batch_size,
           ") times data parallel size (", dp(), ")");
  MT_CHECK(microbatch_group_size_per_vp_stage >= 0,
           "--microbatch-group-size-per-virtual-pipeline-stage must be positive (got ",
           microbatch_group_size_per_vp_stage, ")");
  check_microbatch_groups(num_microbatches());
}

const char* cp_comm_name(CpCommType t) {
  const char* names[] = {"p2p", "all_gather", "a2a", "a2a+p2p"};  // CpCommType's order
  return names[int(t)];
}

std::vector<CpCommType> parse_cp_comm_types(const std::vector<std::string>& args) {
  std::vector<CpCommType> types;
  for (const std::string& arg : args) {
    for (size_t i = 0; (i = arg.find_first_not_of(' ', i)) != std::string::npos;) {
      const size_t end = std::min(arg.find(' ', i), arg.size());
      const std::string w = arg.substr(i, end - i), name = w == "allgather" ? "all_gather" : w;
      int t = 0;
      while (t < 4 && name != cp_comm_name(CpCommType(t))) ++t;
      MT_CHECK(t < 4, "--cp-comm-type: '", w, "' is not one of p2p, all_gather, a2a, a2a+p2p");
      types.push_back(CpCommType(t));
      i = end;
    }
  }
  MT_CHECK(!types.empty(), "--cp-comm-type needs a value: p2p, all_gather, a2a or a2a+p2p");
  return types;
}

bool cp_heads_divide(const ModelConfig& m, int64_t tp, int64_t a) {
  return (m.num_attention_heads / tp) % a == 0 && (m.query_groups() / tp) % a == 0;
}

void ParallelConfig::check_cp_comm(const ModelConfig& m) {
  cp_comm_ = parse_cp_comm_types(cp_comm_type);
  const auto& hcp = hierarchical_context_parallel_sizes;
  if (!hcp.empty()) {
    int64_t product = 1;
    for (int64_t v : hcp) {
      MT_CHECK(v >= 1, "--hierarchical-context-parallel-sizes must be >= 1 (got ", v, ")");
      product *= v;
    }
    MT_CHECK(product == cp(), "--hierarchical-context-parallel-sizes (",
             fmt::format("{}", fmt::join(hcp, " x ")), " = ", product,
             ") must multiply to --context-parallel-size (", cp(), ")");
  }
  if (uses_cp_comm(CpCommType::kA2AP2P)) {
    MT_CHECK(!hcp.empty(),
             "--hierarchical-context-parallel-sizes must be set when a2a+p2p is used in cp comm");
    MT_CHECK(hcp.size() == 2,
             "--cp-comm-type a2a+p2p takes two levels (the all-to-all group, "
             "then the ring across them): --hierarchical-context-parallel-sizes has ",
             hcp.size());
  }
  if (cp() == 1) {
    cp_comm_ = {CpCommType::kP2P};  // Megatron passes no CP communication to attention at CP 1
    return;
  }
  MT_CHECK(cp_comm_.size() == 1 || int64_t(cp_comm_.size()) == m.num_layers,
           "Length of cp_comm_type (", cp_comm_.size(),
           ") should equal to the total number of transformer layers (", m.num_layers, ")!");
  const int64_t heads = m.num_attention_heads / tp(), groups = m.query_groups() / tp();
  for (CpCommType t : {CpCommType::kA2A, CpCommType::kA2AP2P}) {
    if (!uses_cp_comm(t)) continue;
    const int64_t a = cp_a2a_size(t);
    MT_CHECK(cp_heads_divide(m, tp(), a), "--cp-comm-type ", cp_comm_name(t),
             " splits the attention heads over ", a,
             " ranks (its all-to-all group): the heads per tensor-parallel rank (", heads,
             ") and the query groups per tensor-parallel rank (", groups, ") must be multiples of ",
             a);
  }
}

bool ParallelConfig::uses_cp_comm(CpCommType t) const {
  return std::find(cp_comm_.begin(), cp_comm_.end(), t) != cp_comm_.end();
}

int64_t ParallelConfig::cp_a2a_size(CpCommType t) const {
  if (t == CpCommType::kA2A) return cp();
  if (t == CpCommType::kA2AP2P) return hierarchical_context_parallel_sizes.at(0);
  return 1;
}

void ParallelConfig::check_microbatch_groups(int64_t M) const {
  if (vpp_ == 1) return;
  const int64_t N = microbatch_group();
  MT_CHECK(N >= pp() && N <= M,
           "The number of contiguous micro-batches in a virtual pipeline stage should range in "
           "[PP=",
           pp(), " , M=", M, "] (--microbatch-group-size-per-virtual-pipeline-stage ", N, ")");
  const int64_t last = M % N;
  MT_CHECK(last == 0 || last >= pp(),
           "The remainder of M (the total micro-batches) divided by N (number of contiguous "
           "micro-batches in a virtual pipeline stage) should be 0, or larger than or equal to "
           "the pipeline-parallel size, but it is ",
           last, " (M = ", M, ", N = ", N,
           "). Otherwise, it introduces dependency bubbles in the pipeline and reduces "
           "throughput.");
}

void ParallelConfig::split_layers(const ModelConfig& m) {
  const int64_t P = pp(), first = decoder_first_pipeline_num_layers,
                last = decoder_last_pipeline_num_layers;
  const int64_t e = account_for_embedding_in_pipeline_split, l = account_for_loss_in_pipeline_split;
  const bool uneven = first > 0 || last > 0, account = e + l > 0;
  const bool layout = !pipeline_model_parallel_layout.empty();
  MT_CHECK(first >= 0 && last >= 0,
           "--decoder-first-pipeline-num-layers and --decoder-last-pipeline-num-layers must be "
           "larger than 0");
  MT_CHECK(int(num_layers_per_virtual_pipeline_stage > 0) +
                   int(num_virtual_stages_per_pipeline_rank > 0) + int(layout) <=
               1,
           "No more than one of the following arguments can be set at the same time: "
           "--num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-pipeline-rank, "
           "--pipeline-model-parallel-layout");
  MT_CHECK(!layout || (!uneven && !account),
           "--pipeline-model-parallel-layout cannot be set with other pipeline layout arguments "
           "(--decoder-first/last-pipeline-num-layers, "
           "--account-for-embedding/loss-in-pipeline-split)");
  MT_CHECK(!uneven || !account,
           "--decoder-first-pipeline-num-layers and --decoder-last-pipeline-num-layers cannot be "
           "set at the same time with --account-for-embedding-in-pipeline-split and "
           "--account-for-loss-in-pipeline-split");
  // The even split's layers: the embedding and the loss count as one each when accounted for.
  const int64_t units = m.num_layers + e + l;
  std::vector<std::string> stages;
  vpp_ = 1;
  if (layout) {
    stages = parse_pipeline_layout(pipeline_model_parallel_layout);
    MT_CHECK(int64_t(stages.size()) % P == 0,
             "The length of pipeline_model_parallel_layout must be divisible by "
             "pipeline_model_parallel_size (",
             stages.size(), " stages, --pipeline-model-parallel-size ", P, ")");
    vpp_ = int64_t(stages.size()) / P;
  } else if (num_layers_per_virtual_pipeline_stage > 0) {
    MT_CHECK(!uneven,
             "please use --num-virtual-stages-per-pipeline-rank to specify virtual pipeline "
             "parallel degree when enable uneven pipeline parallelism");
    MT_CHECK(units % P == 0,
             "number of layers of the model must be divisible pipeline model parallel size (",
             units, " layers, --pipeline-model-parallel-size ", P, ")");
    MT_CHECK(units / P % num_layers_per_virtual_pipeline_stage == 0,
             "number of layers per pipeline stage (", units / P,
             ") must be divisible by number of layers per virtual pipeline stage (",
             num_layers_per_virtual_pipeline_stage, ")");
    vpp_ = units / P / num_layers_per_virtual_pipeline_stage;
  } else if (num_virtual_stages_per_pipeline_rank > 0) {
    vpp_ = num_virtual_stages_per_pipeline_rank;
  }
  if (vpp_ > 1) {
    MT_CHECK(P > 1,
             "pipeline-model-parallel size should be greater than 1 with interleaved schedule");
  }
  const int64_t S = P * vpp_;  // virtual stages
  stage_layers_.assign(size_t(S), 0);
  if (layout) {
    // Megatron's PipelineParallelLayerLayout.validate_layer_layout, in its order.
    std::string flat;
    for (const std::string& st : stages) flat += st;
    auto count = [&](char c) { return int64_t(std::count(flat.begin(), flat.end(), c)); };
    const char* flag = "--pipeline-model-parallel-layout: ";
    MT_CHECK(!flat.empty() && flat.front() == 'E', flag, "the first layer must be embedding (E)");
    MT_CHECK(flat.back() == 'L', flag, "the last layer must be loss (L)");
    MT_CHECK(count('E') == 1, flag, "embedding must be specified exactly once");
    MT_CHECK(count('L') == 1, flag, "loss must be specified exactly once");
    MT_CHECK(count('t') == m.num_layers, flag, "number of decoder layers ", count('t'),
             " must match num_layers ", m.num_layers);
    MT_CHECK(count('m') == m.mtp_num_layers, flag, "number of mtp layers ", count('m'),
             " must match --mtp-num-layers ", m.mtp_num_layers);
    const size_t first_mtp = flat.find('m');
    MT_CHECK(first_mtp == std::string::npos || flat.find('t', first_mtp) == std::string::npos, flag,
             "decoder layers must be placed before MTP layers");
    // Megatron builds the embedding on the first virtual stage and the loss on the last wherever
    // the string puts them; mtron holds the string to that.
    MT_CHECK(stages.front().find('E') != std::string::npos &&
                 stages.back().find('L') != std::string::npos,
             flag, "the embedding (E) must be in the first stage and the loss (L) in the last");
    for (int64_t vs = 0; vs < S; ++vs) {
      const std::string& st = stages[size_t(vs)];
      MT_CHECK(vs == S - 1 || st.find('m') == std::string::npos, flag,
               "MTP layers must be in the last stage together with Loss stage (stage ", vs,
               " holds '", st, "')");
      stage_layers_[size_t(vs)] = int64_t(std::count(st.begin(), st.end(), 't'));
    }
  } else if (uneven) {
    // Megatron's TransformerConfig rules for uneven pipeline parallelism.
    MT_CHECK(P > 1,
             "--decoder-first/last-pipeline-num-layers need "
             "--pipeline-model-parallel-size > 1");
    int64_t layers = m.num_layers, stages_left = P;
    for (auto [n, which] : {std::pair{first, "first"}, std::pair{last, "last"}}) {
      if (n == 0) continue;
      MT_CHECK(n % vpp_ == 0, "number of layers at ", which, " stage: ", n,
               " must be divisible by virtual pipeline parallel degree ", vpp_);
      layers -= n;
      stages_left -= 1;
    }
    // Megatron has no check for first + last > num-layers without middle stages (it would build
    // more layers than the model has).
    MT_CHECK(layers >= 0 && (layers > 0) == (stages_left > 0), "Mismatch: ", layers,
             " middle layers remaining but ", stages_left, " middle PP stages available.");
    if (stages_left > 0) {
      MT_CHECK(layers % stages_left == 0, "number of layers at middle stage: ", layers,
               " must be divisible by the middle pipeline model parallel size ", stages_left);
      MT_CHECK(layers / stages_left % vpp_ == 0,
               "number of layers on each middle pipeline rank: ", layers / stages_left,
               " must be divisible by virtual pipeline parallel degree ", vpp_);
    }
    for (int64_t vs = 0; vs < S; ++vs) {
      const int64_t s = vs % P;
      const int64_t n = s == 0 && first > 0      ? first
                        : s == P - 1 && last > 0 ? last
                                                 : layers / std::max<int64_t>(1, stages_left);
      stage_layers_[size_t(vs)] = n / vpp_;
    }
  } else {
    MT_CHECK(units % P == 0, "Number of layers (", m.num_layers, account ? " + " : "",
             account ? fmt::format("{} accounted for the embedding and loss", e + l) : "",
             ") should be divisible by the pipeline-model-parallel size (", P, ")");
    MT_CHECK(units / P % vpp_ == 0, "number of layers per pipeline stage (", units / P,
             ") must be divisible by --num-virtual-stages-per-pipeline-rank (", vpp_, ")");
    stage_layers_.assign(size_t(S), units / S);
    stage_layers_.front() -= e;
    stage_layers_.back() -= l;
  }
}

int64_t ParallelConfig::num_layers_in_stage(int64_t stage) const {
  MT_ASSERT(stage >= 0 && stage < pp(), "stage ", stage, " out of range");
  int64_t n = 0;
  for (int64_t c = 0; c < vpp_; ++c) n += stage_layers_[size_t(c * pp() + stage)];
  return n;
}

ParallelConfig::StageLayers ParallelConfig::virtual_stage_layers(int64_t vs) const {
  MT_ASSERT(vs >= 0 && vs < int64_t(stage_layers_.size()), "virtual stage ", vs, " out of range");
  int64_t first = 0;
  for (int64_t k = 0; k < vs; ++k) first += stage_layers_[size_t(k)];
  return {first, stage_layers_[size_t(vs)]};
}

bool ParallelConfig::uneven_stages() const {
  return std::adjacent_find(stage_layers_.begin(), stage_layers_.end(), std::not_equal_to<>()) !=
         stage_layers_.end();
}

std::string ParallelConfig::summary() const {
  std::string s =
      fmt::format("world {} = TP {} x CP {} x DP {} x PP {}", world_size, tp(), cp(), dp(), pp());
  if (vpp() > 1) {
    s += fmt::format(" (VPP {}{})", vpp(),
                     microbatch_group() != pp()
                         ? fmt::format(", micro-batch groups of {}", microbatch_group())
                         : "");
  }
  if (ep() > 1 || etp() != tp())
    s += fmt::format("; experts ETP {} x EP {} x EDP {}", etp(), ep(), edp());
  const std::string cp_comm = cp_comm_summary();
  if (!cp_comm.empty()) s += ", CP by " + cp_comm;
  if (sequence_parallel) s += ", sequence parallel";
  if (use_torch_fsdp2) {
    s += ", FSDP2 (parameters, gradients and optimizer state sharded)";
  } else if (use_megatron_fsdp) {
    s += ", Megatron-FSDP " + data_parallel_sharding_strategy;
  } else if (use_distributed_optimizer) {
    s += ", distributed optimizer";
  }
  s += fmt::format("; micro-batch {}, global batch {} ({} micro-batches per DP rank)",
                   micro_batch_size, global_batch_size, num_microbatches());
  return s;
}

std::string ParallelConfig::cp_comm_summary(bool brief) const {
  if (cp() == 1 || (cp_comm_.size() == 1 && cp_comm_[0] == CpCommType::kP2P)) return "";
  std::vector<std::string> names;  // runs of one type as "type*n"
  for (size_t i = 0, j = 0; i < cp_comm_.size(); i = j) {
    while (j < cp_comm_.size() && cp_comm_[j] == cp_comm_[i]) ++j;
    names.push_back(
        fmt::format("{}{}", cp_comm_name(cp_comm_[i]), j - i > 1 ? fmt::format("*{}", j - i) : ""));
  }
  std::string s = fmt::format("{}", fmt::join(names, " "));
  if (uses_cp_comm(CpCommType::kA2AP2P)) {
    const auto& hcp = hierarchical_context_parallel_sizes;
    s += brief ? fmt::format(" {}x{}", hcp[0], hcp[1])
               : fmt::format(" (all-to-all over {}, ring over {})", hcp[0], hcp[1]);
  }
  return s;
}

}  // namespace mtron
