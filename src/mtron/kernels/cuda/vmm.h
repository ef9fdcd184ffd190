// defines: vmm_alloc, vmm_free, vmm_discard, vmm_commit, vmm_reserved
//
// Discardable CUDA blocks (core/memory.h's device_alloc with `discardable`): reserved address
// ranges mapped granule by granule to physical memory, so that parts can be returned and backed
// again (vmm.cpp says how this keeps the compute stream's order).
#pragma once

#include <cstddef>
#include <cstdint>

#include "mtron/core/memory.h"

namespace mtron::kernels::cuda {

void* vmm_alloc(size_t bytes);
// Frees p if it is a discardable block: returns the bytes it held; -1 if it is not one.
int64_t vmm_free(void* p);
Discarded vmm_discard(void* p, size_t bytes);
int64_t vmm_commit(void* p, size_t bytes);
// The physical memory the discardable blocks hold, free granules' included.
int64_t vmm_reserved();

}  // namespace mtron::kernels::cuda
