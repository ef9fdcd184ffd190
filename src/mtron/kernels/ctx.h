// defines: kernels::Ctx
//
// Where an op runs. Every op in kernels/*.h takes a Ctx first and dispatches on ctx.device with
// a switch (dispatch.cpp); only kernels/cuda and the dispatch code mention CUDA.
#pragma once

#include "mtron/core/dtype.h"

namespace mtron::kernels {

struct Ctx {
  Device device = Device::kCPU;
  void* stream = nullptr;  // cudaStream_t on CUDA; unused on the CPU
};

}  // namespace mtron::kernels
