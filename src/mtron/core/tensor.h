// defines: Shape, numel, shape_str, Tensor
//
// A Tensor is a contiguous, row-major block of one dtype on one device. Storage is shared by
// reference counting, so a Tensor can be a view into a larger buffer (parameters and gradients
// live in a few flat buffers; see model/params.h). There are no strides: ops that need a
// strided reading take leading dimensions as arguments instead.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mtron/core/dtype.h"
#include "mtron/core/error.h"

namespace mtron {

using Shape = std::vector<int64_t>;

int64_t numel(const Shape& s);
std::string shape_str(const Shape& s);

class Tensor {
 public:
  Tensor() = default;

  // Uninitialised storage; zeros() fills with 0.
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::kCPU);
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::kCPU);
  // Uninitialised storage whose parts device_discard can return and device_commit back again
  // (memory.h): FSDP's sharded parameter and gradient buffers.
  static Tensor empty_discardable(const Shape& shape, DType dtype, Device device);

  // A view of numel(shape) elements starting `offset` elements into this tensor's data.
  Tensor view(int64_t offset, const Shape& shape) const;
  // The same data with another shape of equal numel.
  Tensor reshape(const Shape& shape) const;

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int ndim() const { return int(shape_.size()); }
  int64_t numel() const { return mtron::numel(shape_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }

  void* raw() const { return static_cast<char*>(storage_->ptr) + offset_bytes_; }
  // Typed access; checks the dtype so a mix-up fails loudly instead of reading garbage.
  float* f32() const { return checked<float>(DType::kF32); }
  bf16* bf() const { return checked<bf16>(DType::kBF16); }
  f16* h16() const { return checked<f16>(DType::kF16); }
  int32_t* i32() const { return checked<int32_t>(DType::kI32); }
  int64_t* i64() const { return checked<int64_t>(DType::kI64); }

  void fill_zero() const;
  // Copies `src` (same numel and dtype; CPU only) into this tensor.
  void copy_from(const Tensor& src) const;

 private:
  struct Storage {
    void* ptr = nullptr;
    size_t bytes = 0;
    Device device = Device::kCPU;
    ~Storage();
  };

  static Tensor allocate(const Shape& shape, DType dtype, Device device, bool discardable);

  template <typename T>
  T* checked(DType want) const {
    MT_ASSERT(dtype_ == want, "tensor is ", dtype_name(dtype_), ", accessed as ", dtype_name(want));
    return static_cast<T*>(raw());
  }

  std::shared_ptr<Storage> storage_;
  size_t offset_bytes_ = 0;
  Shape shape_;
  DType dtype_ = DType::kF32;
  Device device_ = Device::kCPU;
};

}  // namespace mtron
