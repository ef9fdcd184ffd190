// defines: MappedFile
//
// A read-only memory map of a whole file (RAII). The bytes stay valid while the object lives;
// moving it transfers the mapping. An empty file maps to an empty span (mmap of 0 bytes is an
// error on Linux, so nothing is mapped). Errors name the file: "cannot open X: reason".
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace mtron::data {

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }
  const std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  void release();

  std::string path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

// Reads a whole (small) file into a string; errors name the file.
std::string read_file(const std::string& path);

}  // namespace mtron::data
