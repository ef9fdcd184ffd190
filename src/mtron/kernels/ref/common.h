// defines: ref::Acc, the accumulator type of the reference kernels (ref_ops.h)
#pragma once

#include <cstdint>
#include <type_traits>

#include "mtron/kernels/ops.h"

namespace mtron::kernels::ref {

// Accumulator type: wider than T.
template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, float>, double, long double>;

}  // namespace mtron::kernels::ref
