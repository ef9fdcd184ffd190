// defines: mtron::kernels::cpu::* (the CPU implementations behind kernels/*.h), MT_CPU_EXPORT
//
// The same signatures as the public ops (kernels/op.h). OpenMP parallelises inside a call; the
// calling thread must not be inside another OpenMP region.
//
// A kernel file in cpu/ is compiled once per SIMD target (Highway's foreach_target.h; targets
// and their choice at run time: kernels/cpu_isa.h): it defines each op of its family as a
// function named by the op's id, with the op's parameters, in namespace cpu::HWY_NAMESPACE, and
// ends with `MTRON_<FAMILY>_OPS(MT_CPU_EXPORT)` in its HWY_ONCE part, which defines cpu::name
// as a call of the body compiled for the chosen target.
#pragma once

#include "mtron/kernels/ops.h"

namespace mtron::kernels::cpu {

MTRON_KERNEL_OPS(MT_OP_DECLARE)

}  // namespace mtron::kernels::cpu

#define MT_CPU_EXPORT(ret, name, id, contract, params, args) \
  HWY_EXPORT(id);                                            \
  ret name(const ::mtron::kernels::Ctx&, MT_UNPACK params) { \
    return HWY_DYNAMIC_DISPATCH(id) args;                    \
  }
