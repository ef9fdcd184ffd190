#include "mtron/comm/comm.h"

namespace mtron {

double Comm::all_reduce_sum(double x) {
  all_reduce(&x, 1, DType::kF64, ReduceOp::kSum);
  return x;
}

double Comm::all_reduce_max(double x) {
  all_reduce(&x, 1, DType::kF64, ReduceOp::kMax);
  return x;
}

}  // namespace mtron
