// defines: IntDType, IntArray, load_npy, save_npy
//
// IntArray: a read-only 1-D or 2-D integer array with a run-time element type, either owned
// (built in memory) or viewing a memory-mapped .npy file. The dataset indices (document, sample,
// shuffle, blending) are IntArrays so that a freshly built index and one loaded from the cache
// are used the same way, and so that they keep Megatron's element types (int32 sample index
// when it fits, uint32 shuffle index, int16 dataset index), which makes the cached .npy files
// interchangeable with numpy.
//
// load_npy validates everything (magic, version, header syntax, dtype, C order, shape, file
// size, alignment) and names the file and the problem in its error.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace mtron::data {

enum class IntDType { kInt16, kInt32, kInt64, kUInt32 };

std::size_t itemsize(IntDType t);
const char* npy_descr(IntDType t);  // "<i4" ...

class IntArray {
 public:
  IntArray() = default;
  template <typename T>
  static IntArray from_vector(std::vector<T> v, int64_t cols = 1);

  IntDType dtype() const { return dtype_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t size() const { return rows_ * cols_; }
  int ndim() const { return ndim_; }
  const void* data() const { return data_; }

  // Element i of the flattened array (row-major).
  int64_t operator[](int64_t i) const {
    switch (dtype_) {
      case IntDType::kInt16:
        return static_cast<const int16_t*>(data_)[i];
      case IntDType::kInt32:
        return static_cast<const int32_t*>(data_)[i];
      case IntDType::kInt64:
        return static_cast<const int64_t*>(data_)[i];
      case IntDType::kUInt32:
        return static_cast<const uint32_t*>(data_)[i];
    }
    return 0;
  }
  int64_t at(int64_t r, int64_t c) const { return (*this)[r * cols_ + c]; }

  // Internal: used by load_npy and from_vector.
  IntArray(std::shared_ptr<const void> owner,
           const void* data,
           IntDType dtype,
           int64_t rows,
           int64_t cols,
           int ndim)
      : owner_(std::move(owner)),
        data_(data),
        dtype_(dtype),
        rows_(rows),
        cols_(cols),
        ndim_(ndim) {}

 private:
  std::shared_ptr<const void> owner_;
  const void* data_ = nullptr;
  IntDType dtype_ = IntDType::kInt64;
  int64_t rows_ = 0, cols_ = 1;
  int ndim_ = 1;
};

template <typename T>
constexpr IntDType int_dtype_of();
template <>
constexpr IntDType int_dtype_of<int16_t>() {
  return IntDType::kInt16;
}
template <>
constexpr IntDType int_dtype_of<int32_t>() {
  return IntDType::kInt32;
}
template <>
constexpr IntDType int_dtype_of<int64_t>() {
  return IntDType::kInt64;
}
template <>
constexpr IntDType int_dtype_of<uint32_t>() {
  return IntDType::kUInt32;
}

template <typename T>
IntArray IntArray::from_vector(std::vector<T> v, int64_t cols) {
  auto owned = std::make_shared<std::vector<T>>(std::move(v));
  const int64_t n = static_cast<int64_t>(owned->size());
  const void* p = owned->data();
  return IntArray(std::move(owned), p, int_dtype_of<T>(), cols > 0 ? n / cols : 0, cols,
                  cols == 1 ? 1 : 2);
}

// Memory-maps a .npy file written by numpy.save (or save_npy) holding a C-ordered 1-D or 2-D
// array of int16/int32/int64/uint32.
IntArray load_npy(const std::string& path);

// Writes `a` as a version-1.0 .npy file exactly as numpy.save lays it out (64-byte aligned
// header); written to a temporary name and renamed, so readers never see a partial file.
void save_npy(const std::string& path, const IntArray& a);

}  // namespace mtron::data
