#include "mtron/train/checkpoint_args.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
#include <vector>

#include "mtron/checkpoint/manifest.h"
#include "mtron/core/error.h"
#include "mtron/core/model_names.h"

namespace mtron::train {

namespace {

// The flags a checkpoint set, as "--flag value" (the value as the flag takes it).
class Taken {
 public:
  // Megatron's force=True: the checkpoint's value whatever the command line says.
  template <typename T>
  void force(const char* flag, T& field, const T& value) {
    if (field == value) return;
    field = value;
    set_.push_back(fmt::format("{} {}", flag, shown(value)));
  }
  template <typename E, size_t N>
  void force(const char* flag, E& field, E value, const EnumName<E> (&names)[N]) {
    if (field == value) return;
    field = value;
    set_.push_back(fmt::format("{} {}", flag, name_of(names, value)));
  }
  // Megatron's force=False: the checkpoint's value where the command line left the flag unset
  // (0 here, None there).
  void fill(const char* flag, int64_t& field, int64_t value) {
    if (field == 0) force(flag, field, value);
  }
  void fill(const char* flag, std::string& field, const std::string& value) {
    if (field.empty()) force(flag, field, value);
  }
  void note(const char* flag, const std::string& value) {
    set_.push_back(fmt::format("{} {}", flag, value));
  }
  const std::vector<std::string>& set() const { return set_; }

 private:
  static std::string shown(bool v) { return v ? "on" : "off"; }
  template <typename T>
  static std::string shown(const T& v) {
    return fmt::format("{}", v);
  }
  std::vector<std::string> set_;
};

void take_model(Taken& t, ModelConfig& m, const checkpoint::Manifest& manifest) {
  const ModelConfig& ck = manifest.model;
  t.fill("--num-layers", m.num_layers, ck.num_layers);
  t.fill("--hidden-size", m.hidden_size, ck.hidden_size);
  t.fill("--ffn-hidden-size", m.ffn_hidden_size, ck.ffn_hidden_size);
  t.fill("--seq-length", m.seq_length, ck.seq_length);
  t.fill("--num-attention-heads", m.num_attention_heads, ck.num_attention_heads);
  t.fill("--kv-channels", m.kv_channels, ck.kv_channels);
  t.fill("--max-position-embeddings", m.max_position_embeddings, ck.max_position_embeddings);
  t.force("--num-query-groups", m.num_query_groups, ck.num_query_groups);
  t.force("--group-query-attention", m.group_query_attention, ck.group_query_attention);
  t.force("--position-embedding-type", m.position_embedding_type, ck.position_embedding_type,
          kPositionEmbeddingNames);
  t.force("--add-position-embedding", m.add_position_embedding, ck.add_position_embedding);
  t.force("--rotary-base", m.rotary_base, ck.rotary_base);
  t.force("--rotary-percent", m.rotary_percent, ck.rotary_percent);
  t.force("--add-bias-linear", m.add_bias_linear, ck.add_bias_linear);
  t.force("--add-qkv-bias", m.add_qkv_bias, ck.add_qkv_bias);
  t.force("--swiglu", m.swiglu, ck.swiglu);
  t.force("--squared-relu", m.squared_relu, ck.squared_relu);
  t.force("--untie-embeddings-and-output-weights", m.untie_embeddings_and_output_weights,
          ck.untie_embeddings_and_output_weights);
  t.force("--apply-layernorm-1p", m.apply_layernorm_1p, ck.apply_layernorm_1p);
  t.force("--normalization", m.normalization, ck.normalization, kNormalizationNames);
  if (manifest.dropout_recorded) {
    t.force("--attention-dropout", m.attention_dropout, ck.attention_dropout);
    t.force("--hidden-dropout", m.hidden_dropout, ck.hidden_dropout);
  }
  t.force("--num-experts", m.num_experts, ck.num_experts);
  if (m.moe_layer_freq != ck.moe_layer_freq || m.moe_layer_pattern != ck.moe_layer_pattern) {
    m.moe_layer_freq = ck.moe_layer_freq;
    m.moe_layer_pattern = ck.moe_layer_pattern;
    t.note("--moe-layer-freq", ck.moe_layer_pattern.empty()
                                   ? std::to_string(ck.moe_layer_freq)
                                   : fmt::format("[{}]", fmt::join(ck.moe_layer_pattern, ",")));
  }
  // Megatron clears the experts' FFN size where the checkpoint has no experts.
  t.force("--moe-ffn-hidden-size", m.moe_ffn_hidden_size,
          ck.is_moe() ? ck.moe_ffn_hidden_size : int64_t(0));
  t.force("--moe-router-topk", m.moe_router_topk, ck.moe_router_topk);
  t.force("--moe-router-pre-softmax", m.moe_router_pre_softmax, ck.moe_router_pre_softmax);
  t.force("--moe-shared-expert-intermediate-size", m.moe_shared_expert_intermediate_size,
          ck.moe_shared_expert_intermediate_size);
}

}  // namespace

void apply_checkpoint_args(TrainArgs& a) {
  const checkpoint::CheckpointArgs& c = a.checkpoint;
  MT_CHECK(!c.load.empty(), "--use-checkpoint-args requires --load argument");
  const std::optional<std::string> dir = checkpoint::checkpoint_to_load(c);
  if (!dir) {
    a.notes.push_back(
        fmt::format("--use-checkpoint-args: no checkpoint in --load {} (no "
                    "latest_checkpointed_iteration.txt): using provided arguments",
                    c.load));
    return;
  }
  const checkpoint::Manifest m = checkpoint::read_manifest(*dir);
  Taken t;
  take_model(t, a.model, m);
  if (!m.tokenizer.type.empty()) {
    t.force("--tokenizer-type", a.tokenizer_type, m.tokenizer.type);
    if (c.use_tokenizer_model_from_checkpoint_args && !m.tokenizer.model.empty())
      t.force("--tokenizer-model", a.tokenizer_model, m.tokenizer.model);
    // Not Megatron's: the files the checkpoint carries, where the command line names none.
    t.fill("--vocab-file", a.vocab_file, m.tokenizer.vocab_file);
    t.fill("--merge-file", a.merge_file, m.tokenizer.merge_file);
  }
  if (c.use_mp_args_from_checkpoint_args) {
    ParallelConfig& p = a.parallel;
    t.force("--tensor-model-parallel-size", p.tensor_model_parallel_size, m.layout.tp);
    t.force("--pipeline-model-parallel-size", p.pipeline_model_parallel_size, m.layout.pp);
    if (m.layout.vpp > 1) {
      p.num_layers_per_virtual_pipeline_stage = 0;
      t.force("--num-virtual-stages-per-pipeline-rank", p.num_virtual_stages_per_pipeline_rank,
              m.layout.vpp);
    }
    t.force("--expert-model-parallel-size", p.expert_model_parallel_size, m.layout.ep);
  }
  a.notes.push_back(
      t.set().empty()
          ? fmt::format("--use-checkpoint-args: the flags agree with {}", *dir)
          : fmt::format("--use-checkpoint-args: from {}: {}", *dir, fmt::join(t.set(), ", ")));
}

}  // namespace mtron::train
