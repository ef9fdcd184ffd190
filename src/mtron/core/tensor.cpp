#include "mtron/core/tensor.h"

#include <cstring>

#include "mtron/core/memory.h"

namespace mtron {

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

Tensor::Storage::~Storage() {
  device_free(device, ptr, bytes);
}

Tensor Tensor::allocate(const Shape& shape, DType dtype, Device device, bool discardable) {
  for (int64_t d : shape) MT_ASSERT(d >= 0, "negative dimension in ", shape_str(shape));
  Tensor t;
  t.storage_ = std::make_shared<Storage>();
  t.storage_->bytes = size_t(mtron::numel(shape)) * dtype_size(dtype);
  t.storage_->device = device;
  t.storage_->ptr = device_alloc(device, t.storage_->bytes, discardable);
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  return allocate(shape, dtype, device, false);
}

Tensor Tensor::empty_discardable(const Shape& shape, DType dtype, Device device) {
  return allocate(shape, dtype, device, true);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_zero();
  return t;
}

Tensor Tensor::view(int64_t offset, const Shape& shape) const {
  MT_ASSERT(offset >= 0 && offset + mtron::numel(shape) <= numel(), "view [", offset, ", +",
            mtron::numel(shape), ") outside tensor of ", numel(), " elements");
  Tensor t = *this;
  t.offset_bytes_ += size_t(offset) * dtype_size(dtype_);
  t.shape_ = shape;
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  MT_ASSERT(mtron::numel(shape) == numel(), "reshape ", shape_str(shape_), " to ",
            shape_str(shape));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

void Tensor::fill_zero() const {
  MT_ASSERT(device_ == Device::kCPU, "fill_zero on ", device_name(device_));
  if (defined()) std::memset(raw(), 0, nbytes());
}

void Tensor::copy_from(const Tensor& src) const {
  MT_ASSERT(device_ == Device::kCPU && src.device_ == Device::kCPU, "copy_from off the CPU");
  MT_ASSERT(src.dtype_ == dtype_ && src.numel() == numel(), "copy_from ", dtype_name(src.dtype_),
            shape_str(src.shape_), " into ", dtype_name(dtype_), shape_str(shape_));
  std::memcpy(raw(), src.raw(), nbytes());
}

}  // namespace mtron
