#include "mtron/core/parallel_config.h"

#include <fmt/core.h>

#include "mtron/core/error.h"

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

  MT_CHECK(num_layers_per_virtual_pipeline_stage == 0 || num_virtual_stages_per_pipeline_rank == 0,
           "--num-layers-per-virtual-pipeline-stage and --num-virtual-stages-per-pipeline-rank "
           "cannot be set together");
  num_layers_ = m.num_layers;
  const bool uneven = decoder_first_pipeline_num_layers > 0 || decoder_last_pipeline_num_layers > 0;
  MT_CHECK(decoder_first_pipeline_num_layers >= 0 && decoder_last_pipeline_num_layers >= 0,
           "--decoder-first-pipeline-num-layers and --decoder-last-pipeline-num-layers must be "
           "larger than 0");
  vpp_ = 1;
  if (num_layers_per_virtual_pipeline_stage > 0) {
    MT_CHECK(!uneven,
             "please use --num-virtual-stages-per-pipeline-rank to specify virtual pipeline "
             "parallel degree when enable uneven pipeline parallelism");
    MT_CHECK(m.num_layers % pp() == 0,
             "number of layers of the model must be divisible pipeline model parallel size (",
             m.num_layers, " layers, --pipeline-model-parallel-size ", pp(), ")");
    const int64_t layers_per_stage = m.num_layers / pp();
    MT_CHECK(layers_per_stage % num_layers_per_virtual_pipeline_stage == 0,
             "number of layers per pipeline stage (", layers_per_stage,
             ") must be divisible by number of layers per virtual pipeline stage (",
             num_layers_per_virtual_pipeline_stage, ")");
    vpp_ = layers_per_stage / num_layers_per_virtual_pipeline_stage;
  } else if (num_virtual_stages_per_pipeline_rank > 0) {
    vpp_ = num_virtual_stages_per_pipeline_rank;
  }
  if (vpp_ > 1) {
    MT_CHECK(pp() > 1,
             "pipeline-model-parallel size should be greater than 1 with interleaved schedule");
  }
  if (uneven) {
    // Megatron's TransformerConfig rules for uneven pipeline parallelism.
    MT_CHECK(pp() > 1,
             "--decoder-first/last-pipeline-num-layers need "
             "--pipeline-model-parallel-size > 1");
    int64_t layers = m.num_layers, stages = pp();
    for (auto [n, which] : {std::pair{decoder_first_pipeline_num_layers, "first"},
                            std::pair{decoder_last_pipeline_num_layers, "last"}}) {
      if (n == 0) continue;
      MT_CHECK(n % vpp_ == 0, "number of layers at ", which, " stage: ", n,
               " must be divisible by virtual pipeline parallel degree ", vpp_);
      layers -= n;
      stages -= 1;
    }
    MT_CHECK((layers > 0) == (stages > 0), "Mismatch: ", layers, " middle layers remaining but ",
             stages, " middle PP stages available.");
    if (stages > 0) {
      MT_CHECK(layers % stages == 0, "number of layers at middle stage: ", layers,
               " must be divisible by the middle pipeline model parallel size ", stages);
      MT_CHECK(layers / stages % vpp_ == 0,
               "number of layers on each middle pipeline rank: ", layers / stages,
               " must be divisible by virtual pipeline parallel degree ", vpp_);
    }
  } else {
    MT_CHECK(m.num_layers % pp() == 0, "Number of layers (", m.num_layers,
             ") should be divisible by the pipeline-model-parallel size (", pp(), ")");
    MT_CHECK(m.num_layers / pp() % vpp_ == 0, "number of layers per pipeline stage (",
             m.num_layers / pp(), ") must be divisible by --num-virtual-stages-per-pipeline-rank (",
             vpp_, ")");
  }

  if (cp() > 1) {
    MT_CHECK(m.seq_length % (2 * cp()) == 0, "seq-length (", m.seq_length,
             ") should be a multiple of 2 * context-parallel-size (", 2 * cp(),
             ") if context-parallel-size > 1");
  }
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
  if (overlap_param_gather) {
    MT_CHECK(use_distributed_optimizer && overlap_grad_reduce,
             "--overlap-param-gather only supported with distributed optimizer and "
             "--overlap-grad-reduce");
  }

  if (global_batch_size == 0) global_batch_size = micro_batch_size * dp();
  positive(global_batch_size, "--global-batch-size");
  MT_CHECK(global_batch_size % (micro_batch_size * dp()) == 0, "global batch size (",
           global_batch_size, ") is not divisible by micro batch size (", micro_batch_size,
           ") times data parallel size (", dp(), ")");
  if (vpp_ > 1) {
    // The interleaved schedule groups N = PP contiguous micro-batches per virtual stage
    // (Megatron's default --microbatch-group-size-per-virtual-pipeline-stage): N <= M, and a
    // last group shorter than PP would leave dependency bubbles, so M % PP == 0.
    MT_CHECK(num_microbatches() % pp() == 0, "number of microbatches (", num_microbatches(),
             ") is not divisible by pipeline-model-parallel-size (", pp(),
             ") when using interleaved schedule");
  }
}

int64_t ParallelConfig::num_layers_in_stage(int64_t stage) const {
  MT_ASSERT(stage >= 0 && stage < pp(), "stage ", stage, " out of range");
  const int64_t first = decoder_first_pipeline_num_layers, last = decoder_last_pipeline_num_layers;
  if (first == 0 && last == 0) return num_layers_ / pp();
  if (stage == 0 && first > 0) return first;
  if (stage == pp() - 1 && last > 0) return last;
  const int64_t middle_stages = pp() - (first > 0) - (last > 0);
  return (num_layers_ - first - last) / middle_stages;
}

std::string ParallelConfig::summary() const {
  std::string s =
      fmt::format("world {} = TP {} x CP {} x DP {} x PP {}", world_size, tp(), cp(), dp(), pp());
  if (vpp() > 1) s += fmt::format(" (VPP {})", vpp());
  if (ep() > 1 || etp() != tp())
    s += fmt::format("; experts ETP {} x EP {} x EDP {}", etp(), ep(), edp());
  if (sequence_parallel) s += ", sequence parallel";
  if (use_distributed_optimizer) s += ", distributed optimizer";
  s += fmt::format("; micro-batch {}, global batch {} ({} micro-batches per DP rank)",
                   micro_batch_size, global_batch_size, num_microbatches());
  return s;
}

}  // namespace mtron
