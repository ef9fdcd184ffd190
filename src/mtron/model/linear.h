// defines: RunCtx, Act, as_gemm_input, linear_forward, linear_backward
//
// A linear layer's three GEMMs in the run's precision. In bf16 mode the GEMMs read bf16
// activations and bf16 weights and write fp32 (fp32 accumulation); the fp32 master weights and
// fp32 gradients stay with the optimizer (Megatron's mixed precision). Column- and row-parallel
// layers are these same GEMMs on local shards; the TP mappings around them are the caller's
// (parallel/mappings.h).
#pragma once

#include <cstdint>

#include "mtron/core/arena.h"
#include "mtron/kernels/ctx.h"
#include "mtron/model/params.h"
#include "mtron/parallel/expert_dispatch.h"
#include "mtron/parallel/mappings.h"
#include "mtron/parallel/ring_attention.h"

namespace mtron::model {

struct RunCtx {
  kernels::Ctx k;
  Precision precision = Precision::kFP32;
  parallel::TensorParallel tp;
  parallel::ContextParallel cp;
  parallel::ExpertParallel ep;
};

// An activation as a GEMM reads it (the fp32 tensor, or its bf16 copy in bf16 mode).
struct Act {
  const float* f32 = nullptr;
  const bf16* b16 = nullptr;
};

// fp32 mode: x itself. bf16 mode: a bf16 copy of x[n] allocated in `arena`.
Act as_gemm_input(const RunCtx& rc, Arena& arena, const float* x, int64_t n);

// y[N,out] = x[N,in] W[out,in]^T + bias (bias may be null)
void linear_forward(const RunCtx& rc,
                    float* y,
                    Act x,
                    Weight w,
                    const float* bias,
                    int64_t N,
                    int64_t in,
                    int64_t out);

// dx[N,in] = dy W (written; skipped when dx is null), dw[out,in] += dy^T x,
// db[out] += column sums of dy (skipped when db is null). Temporaries come from `scratch`.
void linear_backward(const RunCtx& rc,
                     Arena& scratch,
                     float* dx,
                     float* dw,
                     float* db,
                     const float* dy,
                     Act x,
                     Weight w,
                     int64_t N,
                     int64_t in,
                     int64_t out);

}  // namespace mtron::model
