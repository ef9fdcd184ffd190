#include "mtron/core/dtype.h"

#include "mtron/core/error.h"

namespace mtron {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
      return 2;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
    case DType::kU16:
      return 2;
    case DType::kU8:
      return 1;
    case DType::kF64:
      return 8;
    case DType::kF16:
      return 2;
  }
  MT_ASSERT(false, "unknown dtype ", int(t));
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "float32";
    case DType::kBF16:
      return "bfloat16";
    case DType::kI32:
      return "int32";
    case DType::kI64:
      return "int64";
    case DType::kU16:
      return "uint16";
    case DType::kU8:
      return "uint8";
    case DType::kF64:
      return "float64";
    case DType::kF16:
      return "float16";
  }
  MT_ASSERT(false, "unknown dtype ", int(t));
}

std::string_view device_name(Device d) {
  return d == Device::kCPU ? "cpu" : "cuda";
}

}  // namespace mtron
