// defines: replica_mismatches
//
// Megatron's check_param_hashes_across_dp_replicas (--check-weight-hash-across-dp-replicas-interval
// and, every iteration, --test-mode): each parameter's compute weights (what the forward reads:
// the bf16 or fp16 copy, else the fp32 master) hashed on this rank (64-bit FNV-1a of the bytes),
// the hashes all-gathered over the group of ranks that must hold the same values, and compared.
// A silent corruption (memory, a link, a checkpoint load) shows as a mismatch before it spreads
// through the gradient reduction.
#pragma once

#include <string>
#include <vector>

#include "mtron/comm/comm.h"
#include "mtron/kernels/ctx.h"
#include "mtron/model/params.h"

namespace mtron::train {

// Collective over `group`, whose ranks hold the same parameter list: the names of `params`'
// parameters whose hash differs between some ranks of the group (empty: all equal). replicated:
// only the parameters not sharded over TP (those every rank of a TP group holds whole).
std::vector<std::string> replica_mismatches(const kernels::Ctx& k,
                                            const model::ParamBuffer& params,
                                            Comm& group,
                                            bool replicated = false);

}  // namespace mtron::train
