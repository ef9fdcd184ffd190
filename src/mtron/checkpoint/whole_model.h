// defines: WholeModel, load_whole_model
//
// A checkpoint's model as one process holds it whole (TP 1, EP 1: one chunk with embedding,
// head and every expert), rebuilt from the manifest alone: what `mtron generate`, `mtron export`
// and tests need. The weights are read under this layout from whatever layout saved them.
#pragma once

#include <memory>
#include <string>

#include "mtron/checkpoint/manifest.h"
#include "mtron/model/gpt.h"

namespace mtron::checkpoint {

struct WholeModel {
  std::string dir;  // the checkpoint directory read
  Manifest manifest;
  ModelConfig cfg;  // manifest.model (the chunk keeps a reference to it)
  std::unique_ptr<model::GPTChunk> chunk;
  model::ParamBuffer& params() { return chunk->params(); }
  model::ParamBuffer& expert_params() { return chunk->expert_params(); }  // empty when dense
};

// load_dir: a --load directory (its latest checkpoint) or a checkpoint directory.
std::unique_ptr<WholeModel> load_whole_model(const std::string& load_dir);

}  // namespace mtron::checkpoint
