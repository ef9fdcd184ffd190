// defines: FlopsFormula, PublishedRow, published_rows, published_tokens_per_second,
//          RowPrediction, predict_row, FitParameter, fit_parameters, fit_achievable,
//          row_errors,
//          format_published
//
// Published training throughput (catalog/published/*.json, embedded at build time): the rows
// the hardware catalog's "achievable" constants are fitted to, and the rows held out from the
// fit that check the time model. A row is planned with what its source states fixed (sizes,
// precision, recompute, overlap flags) and the rest searched, as `mtron plan` would, and the
// predicted tokens/s per GPU is compared with the published one (a TFLOP/s figure is turned
// into tokens/s with the FLOPs formula its source used, so the comparison does not depend on
// how FLOPs are counted).
#pragma once

#include <string>
#include <vector>

#include "mtron/core/hardware.h"
#include "mtron/core/model_config.h"
#include "mtron/plan/search.h"

namespace mtron::plan {

enum class FlopsFormula {
  kMegatron,      // num_floating_point_operations since 2025-03 (= flops_per_iteration)
  kMegatron2024,  // the same before: attention scores counted over the whole s x s square
  kNarayanan2021  // 96 B s l h^2 (1 + s/6h + V/16lh): includes the recomputed forward
};

struct PublishedRow {
  std::string table, label, source, hardware;
  std::vector<std::string> model_args;  // Megatron model flags
  int64_t gpus = 0;
  SearchOptions options;         // what the source fixes; sizes left at 0 are searched
  double tflops = 0;             // per GPU, as published (0: not given)
  double tokens_per_second = 0;  // per GPU, as published (0: derived from tflops)
  FlopsFormula formula = FlopsFormula::kMegatron;
  bool fit = false;  // a row the hardware's constants were fitted to
  std::string name() const { return table + " " + label; }
};

const std::vector<PublishedRow>& published_rows();

// The row's model (its flags parsed as `mtron plan` parses them).
ModelConfig row_model(const PublishedRow& r);
// Tokens/s per GPU as published, or derived from the TFLOP/s figure by the row's formula.
double published_tokens_per_second(const PublishedRow& r, const ModelConfig& m);

struct RowPrediction {
  bool planned = false;  // a layout fits and is valid
  Candidate plan;        // the planner's top plan
  double predicted = 0;  // tokens/s per GPU
  double published = 0;
  double error = 0;  // predicted / published - 1
};

// Plans the row on `hw` (the catalog entry, or one with other achievable constants).
RowPrediction predict_row(const PublishedRow& r, const Hardware& hw);

// A constant of Achievable the fit may change, with the range it searches.
struct FitParameter {
  double Achievable::*field;
  const char* name;
  double lo, hi;
};

// What the fit changes for `rows`: the GEMM efficiency of each precision they ran (bf16/fp16,
// fp8), fused attention's efficiency if they used it, the memory efficiency and the GEMM
// per-tile overhead if they materialised attention scores (softmax passes, batched GEMMs of
// head-dimension K); no more parameters than rows.
std::vector<FitParameter> fit_parameters(const std::vector<const PublishedRow*>& rows);

// The constants of `base` that minimise the squared log errors over `rows` (coordinate
// descent over the parameters' ranges, then a finer step), all rows planned on `base` with
// the fitted constants. Returns the fitted hardware.
Hardware fit_achievable(const Hardware& base,
                        const std::vector<const PublishedRow*>& rows,
                        const std::vector<FitParameter>& params);

// The predictions of `rows` on their catalog hardware.
std::vector<RowPrediction> row_errors(const std::vector<const PublishedRow*>& rows);

// A table: row, hardware, fit or held out, the plan's layout, predicted and published tokens/s
// per GPU, the error, and TFLOP/s per GPU by the source's formula where it published them; then
// the median and largest error of the fitted and of the held-out rows per hardware.
std::string format_published(const std::vector<const PublishedRow*>& rows,
                             const std::vector<RowPrediction>& predictions);

}  // namespace mtron::plan
