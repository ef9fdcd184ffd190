// defines: MT_OP_DECLARE, MT_UNPACK: how a kernel op is written down once
//
// Every op of kernels/*.h is one row of its family's list macro (MTRON_NORM_OPS, ...; all of them
// together: MTRON_KERNEL_OPS in kernels/ops.h):
//
//   OP(return type, name, id, contract, (parameters after the Ctx), (argument names))
//
// - name: the function callers use, kernels::name(ctx, ...). Overloads share a name.
// - id: unique per row (the name, or name_dtype for an overload); the profile label
//   (`mtron train --profile`) and the name of the CPU kernel's per-SIMD-target body.
// - contract: a function of the arguments that checks what every backend requires of them and
//   returns the op's cost for the profile (FLOPs, bytes moved: OpCost, core/profile.h); defined
//   in contracts.h.
//
// From the rows, the rest is generated: the public declarations (MT_OP_DECLARE, here), the
// backends' declarations with the same signature (cpu/cpu_ops.h, cuda/cuda_ops.h), the dispatch on
// ctx.device (dispatch.cpp), the CPU's run-time choice of SIMD target (cpu/simd.h) and the stubs
// of a build without CUDA (cuda/no_cuda.cpp). A row whose parameter list is long (six or more)
// names it `MT_PARAMS_<id>`, defined just before the family's list, and the backends define the
// op with `MT_PARAMS(id)` as its parameters, so that the list is written once (`MT_PARAMS_OF`
// where rows differ in one tensor's type: templates over it). Adding an op means:
// its row, its CPU, CUDA and reference bodies, and its case in the op table of tests/kernels.
#pragma once

#include "mtron/kernels/ctx.h"

#define MT_UNPACK(...) __VA_ARGS__

// The parameters of op `id` as a function's parameter list (without the parentheses).
#define MT_PARAMS(id) MT_PARAMS_EXPAND(MT_PARAMS_##id)
#define MT_PARAMS_EXPAND(params) MT_UNPACK params
// The parameters of ops that differ in one tensor's type T (an fp32 or bf16 output):
// `MT_PARAMS_<id>_of(T)`, the rows' lists being MT_PARAMS_<id>_of(float) and (bf16).
#define MT_PARAMS_OF(id, T) MT_PARAMS_EXPAND(MT_PARAMS_##id##_of(T))

// `ret name(const Ctx& ctx, parameters...);` in the current namespace.
#define MT_OP_DECLARE(ret, name, id, contract, params, args) \
  ret name(const ::mtron::kernels::Ctx& ctx, MT_UNPACK params);
