// defines: FileRecord, LayoutRecord, TokenizerRecord, Manifest, manifest_to_json,
//          manifest_from_json, model_config_to_json, model_config_from_json
//
// manifest.json, the description of one checkpoint directory (iter_NNNNNNN/): what was trained
// (the model configuration, enough to rebuild the model without any flags: `mtron generate` and
// `mtron export` need nothing else), how (layout, precision, optimizer and learning-rate
// schedule, seed), where training stood (iteration, consumed samples, optimizer steps), and the
// safetensors files with their sizes and header checksums (each tensor's own CRC-32C is in its
// file's header). Written last, so a directory with a manifest is complete.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "mtron/core/model_config.h"
#include "mtron/core/precision.h"
#include "mtron/optim/grad_scaler.h"
#include "mtron/optim/lr_schedule.h"
#include "mtron/optim/optimizer.h"

namespace mtron::checkpoint {

inline constexpr int kFormatVersion = 1;

struct FileRecord {
  std::string name;  // relative to the checkpoint directory
  uint64_t bytes = 0;
  uint32_t header_crc32c = 0;  // of the file's JSON header
  int64_t tensors = 0;
};

// The parallel layout the checkpoint was saved under (informational: any layout loads it).
struct LayoutRecord {
  int64_t world_size = 1, tp = 1, pp = 1, cp = 1, ep = 1, etp = 1, dp = 1, vpp = 1;
  bool sequence_parallel = false, distributed_optimizer = false;
};

// The tokenizer flags of the run, so export and generate can find the tokenizer. A checkpoint
// carries the files (in its tokenizer/ folder) and names them relative to its directory;
// manifest_from_json resolves relative names against the manifest's folder.
struct TokenizerRecord {
  std::string type, vocab_file, merge_file, model;
};

struct Manifest {
  int format_version = kFormatVersion;
  std::string mtron_version;
  int64_t iteration = 0;
  int64_t consumed_samples = 0;
  ModelConfig model;
  // Whether model's hidden_dropout and attention_dropout are the run's (manifests written before
  // they were recorded read 0).
  bool dropout_recorded = true;
  LayoutRecord layout;
  Precision precision = Precision::kFP32;  // the weights are fp32 masters either way
  // Optimizer state (per-parameter exp_avg / exp_avg_sq tensors in the files); absent for
  // imported models.
  bool has_optimizer = false;
  int64_t optimizer_steps = 0;
  optim::AdamWConfig adam;
  // Muon's settings when it stepped the matrices (optimizer.type "muon"; their exp_avg tensors
  // hold its momenta, their exp_avg_sq zeros), else AdamW alone (type "adamw").
  std::optional<optim::MuonConfig> muon;
  // A dynamic loss scaler's state (optimizer.grad_scaler; --fp16), saved with the optimizer.
  std::optional<optim::GradScalerState> grad_scaler;
  std::optional<optim::LrSchedule> lr_schedule;
  // The samples of the steps taken, where the schedule stands (lr_scheduler.num_samples; older
  // checkpoints: consumed_samples).
  int64_t lr_samples = 0;
  std::optional<uint64_t> seed;  // the Philox seed (all randomness is keyed by it)
  TokenizerRecord tokenizer;
  std::vector<FileRecord> files;
  std::string saved_at;  // UTC, ISO 8601
};

nlohmann::ordered_json model_config_to_json(const ModelConfig& m);
// Throws mtron::Error naming `file` when a field is missing or invalid; the result is finalized.
ModelConfig model_config_from_json(const nlohmann::json& j, const std::string& file);

std::string manifest_to_json(const Manifest& m);
// Parses and validates; `file` names the manifest in errors.
Manifest manifest_from_json(std::string_view text, const std::string& file);
// The manifest.json of checkpoint directory `dir`, read and parsed (errors name the file).
Manifest read_manifest(const std::string& dir);

std::string lr_style_name(optim::LrDecayStyle s);
std::string wsd_style_name(optim::WsdDecayStyle s);

}  // namespace mtron::checkpoint
