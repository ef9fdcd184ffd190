#include "mtron/core/precision.h"

#include <cctype>
#include <string>

#include "mtron/core/error.h"

namespace mtron {

std::string_view precision_name(Precision p) {
  switch (p) {
    case Precision::kFP32:
      return "fp32";
    case Precision::kBF16:
      return "bf16";
    case Precision::kFP16:
      return "fp16";
    case Precision::kFP8:
      return "fp8";
  }
  MT_ASSERT(false, "bad Precision");
}

DType compute_dtype(Precision p) {
  MT_CHECK(p != Precision::kFP8, "fp8 does not train in mtron (planned only)");
  return p == Precision::kBF16 ? DType::kBF16 : p == Precision::kFP16 ? DType::kF16 : DType::kF32;
}

Precision parse_precision(std::string_view s) {
  std::string l(s);
  for (char& c : l) c = char(std::tolower(static_cast<unsigned char>(c)));
  for (const Precision p : {Precision::kFP32, Precision::kBF16, Precision::kFP16, Precision::kFP8})
    if (l == precision_name(p)) return p;
  MT_CHECK(false, "unknown precision '", s, "' (known: fp32, bf16, fp16, fp8)");
}

}  // namespace mtron
