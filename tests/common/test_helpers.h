// defines: error_of, words, model_shape, set_llama_architecture, Sizes, layout
//
// Helpers shared by the unit tests of every layer (the target mtron_test_helpers, which
// mtron_add_test links): the message of the mtron::Error a call throws, a command line's words, a
// model of a given shape and a layout given by its sizes, the rest of each config at its
// defaults.
#pragma once

#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "mtron/core/error.h"
#include "mtron/core/parallel_config.h"

namespace mtron::tests {

// The message of the mtron::Error that fn throws; "" when it throws none.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The words of a command line (split at white space; no quoting): "--lr 1e-3" -> {"--lr", "1e-3"}.
inline std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// A model with these sizes and Megatron's defaults otherwise; not finalized (set what else the
// test needs, then call finalize()).
inline ModelConfig model_shape(
    int64_t layers, int64_t hidden, int64_t heads, int64_t seq_length, int64_t vocab) {
  ModelConfig m;
  m.num_layers = layers;
  m.hidden_size = hidden;
  m.num_attention_heads = heads;
  m.seq_length = seq_length;
  m.vocab_size = vocab;
  return m;
}

// Llama's architecture on m: SwiGLU, RMSNorm, rotary positions, no biases (the rest unchanged).
inline void set_llama_architecture(ModelConfig& m) {
  m.swiglu = true;
  m.normalization = Normalization::kRMSNorm;
  m.position_embedding_type = PositionEmbedding::kRope;
  m.add_bias_linear = false;
}

// The sizes of a layout (designated initialisers: {.world = 8, .tp = 2, .mbs = 1}); etp 0 is
// TP's, vpp 0 no interleaving, gbs 0 micro-batch size x DP (ParallelConfig's meanings).
struct Sizes {
  int64_t world = 1, tp = 1, pp = 1, cp = 1, ep = 1, etp = 0, vpp = 0, mbs = 0, gbs = 0;
};

// A ParallelConfig with these sizes (vpp as --num-virtual-stages-per-pipeline-rank) and the
// defaults otherwise; not finalized.
inline ParallelConfig layout(const Sizes& s) {
  ParallelConfig p;
  p.world_size = s.world;
  p.tensor_model_parallel_size = s.tp;
  p.pipeline_model_parallel_size = s.pp;
  p.context_parallel_size = s.cp;
  p.expert_model_parallel_size = s.ep;
  p.expert_tensor_parallel_size = s.etp;
  p.num_virtual_stages_per_pipeline_rank = s.vpp;
  p.micro_batch_size = s.mbs;
  p.global_batch_size = s.gbs;
  return p;
}

}  // namespace mtron::tests
