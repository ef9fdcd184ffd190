// defines: Precision, precision_name, parse_precision, compute_dtype
//
// The arithmetic of the matrix multiplies, the one precision type of the whole program: the
// trainer's --bf16 (Megatron: --bf16, --fp16, --fp8-format, else fp32), the model's compute
// copies and GEMMs, a checkpoint's manifest, and the planner's peak-FLOP/s tables. fp32, bf16 and
// fp16 (with loss scaling, optim/grad_scaler.h) train. An FP8 training run is kBF16 with FP8
// linear-layer GEMMs (--fp8-format: model/fp8.h, docs/precision.md); kFP8 is the planner's.
#pragma once

#include <string_view>

#include "mtron/core/dtype.h"

namespace mtron {

enum class Precision { kFP32, kBF16, kFP16, kFP8 };

// "fp32" | "bf16" | "fp16" | "fp8"
std::string_view precision_name(Precision p);
// The inverse of precision_name (any case); throws mtron::Error naming the accepted values.
Precision parse_precision(std::string_view s);
// The dtype of the compute copies of the weights and of the GEMM inputs: kF32, kBF16 or kF16
// (fp32, bf16, fp16); throws for fp8, which does not train.
DType compute_dtype(Precision p);

}  // namespace mtron
