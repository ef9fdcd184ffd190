// defines: embedding_forward, embedding_backward
//
// A (possibly vocab-parallel) lookup. The table holds rows [row_start, row_start + rows) of the
// global table; an id outside that range gives a zero row (the TP all-reduce that follows adds
// the owner's row). The same op serves token and learned position embeddings.
#pragma once

#include <cstdint>

#include "mtron/kernels/op.h"

namespace mtron::kernels {

// embedding_forward:  out[n, :] (= or += when accumulate) table[ids[n] - row_start, :]
//                     out: [N, C]
// embedding_backward: dtable[ids[n] - row_start, :] += dout[n, :] for ids in range.
//                     Deterministic (the order of additions into a row does not depend on the
//                     thread count).
#define MT_PARAMS_embedding_forward                                                             \
  (float* out, const int32_t* ids, const float* table, int64_t N, int64_t C, int64_t row_start, \
   int64_t rows, bool accumulate)
#define MT_PARAMS_embedding_backward                                                              \
  (float* dtable, const float* dout, const int32_t* ids, int64_t N, int64_t C, int64_t row_start, \
   int64_t rows)
#define MTRON_EMBEDDING_OPS(OP)                                                         \
  OP(void, embedding_forward, embedding_forward, embedding_forward_contract,            \
     MT_PARAMS_embedding_forward, (out, ids, table, N, C, row_start, rows, accumulate)) \
  OP(void, embedding_backward, embedding_backward, embedding_backward_contract,         \
     MT_PARAMS_embedding_backward, (dtable, dout, ids, N, C, row_start, rows))
MTRON_EMBEDDING_OPS(MT_OP_DECLARE)

}  // namespace mtron::kernels
