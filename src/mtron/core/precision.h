// defines: Precision, precision_name, parse_precision
//
// The arithmetic of the matrix multiplies, the one precision type of the whole program: the
// trainer's --bf16 (Megatron: --bf16, --fp16, --fp8-format, else fp32), the model's compute
// copies and GEMMs, a checkpoint's manifest, and the planner's peak-FLOP/s tables. fp32 and bf16
// train; fp16 and fp8 are planned only.
#pragma once

#include <string_view>

namespace mtron {

enum class Precision { kFP32, kBF16, kFP16, kFP8 };

// "fp32" | "bf16" | "fp16" | "fp8"
std::string_view precision_name(Precision p);
// The inverse of precision_name (any case); throws mtron::Error naming the accepted values.
Precision parse_precision(std::string_view s);

}  // namespace mtron
