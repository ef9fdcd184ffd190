// defines: mtron::kernels::cuda::* (the CUDA implementations behind kernels/*.h)
//
// The ops of kernels/*.h with the same signatures (kernels/op.h; the Ctx carries the stream) and,
// without the Device argument, of kernels/device.h. A build without CUDA links cuda/no_cuda.cpp,
// whose functions throw mtron::Error (device_count returns 0).
#pragma once

#include <cstdint>
#include <string>

#include "mtron/kernels/ctx.h"
#include "mtron/kernels/device.h"
#include "mtron/kernels/ops.h"

namespace mtron::kernels::cuda {

MTRON_KERNEL_OPS(MT_OP_DECLARE)

// attention.h's attention_max_head_dim
int64_t attention_max_head_dim();

// device.h
int device_count();
std::string device_unavailable();
void init_device(int ordinal);
DeviceProperties device_properties();
DeviceMemory device_memory();
void reset_peak_memory();
void* default_stream();
void* create_stream();
void destroy_stream(void* stream);
void synchronize(const Ctx& ctx);
void copy_to_host(const Ctx& ctx, void* host_dst, const void* src, int64_t bytes);
void copy_from_host(const Ctx& ctx, void* dst, const void* host_src, int64_t bytes);
void copy_from_host_async(const Ctx& ctx, void* dst, const void* host_src, int64_t bytes);
DeviceWork device_work();

}  // namespace mtron::kernels::cuda
