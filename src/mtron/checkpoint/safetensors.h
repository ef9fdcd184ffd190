// defines: SafetensorsEntry, SafetensorsHeader, parse_safetensors_header, json_depth_ok,
//          DataSource, for_each_host_chunk, SafetensorsTensor, write_safetensors, SafetensorsFile
//
// The safetensors format (Hugging Face's): a little-endian u64 N, N bytes of
// UTF-8 JSON, then the data buffer. The JSON maps each tensor name to
// {"dtype", "shape", "data_offsets": [begin, end)} (offsets relative to the buffer, end
// exclusive) plus an optional "__metadata__" object of string values.
//
// Reading never trusts the file: the header is bounds-checked before it is parsed (N <= 100 MB,
// nesting depth <= 4, so a hostile header cannot exhaust the stack), every dtype must be known,
// every shape's byte size must equal its offsets' span without overflow, and the tensors must
// tile the buffer from 0 to the end of the file with no gap or overlap (the reference reader's
// rules). Every violation throws mtron::Error naming the file and the tensor. Nothing in a file
// is ever executed. Data is read with pread into the caller's memory, so a file truncated after
// it was opened gives a short read, reported as an error, never a crash.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mtron/core/tensor.h"

namespace mtron::checkpoint {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "F32", "BF16", ... as in the file
  size_t elem_size = 0;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte range in the data buffer
  int64_t numel() const { return mtron::numel(shape); }
};

struct SafetensorsHeader {
  uint64_t header_len = 0;                // N
  uint64_t data_start = 0;                // 8 + N: where the data buffer starts in the file
  std::vector<SafetensorsEntry> entries;  // sorted by begin
  std::map<std::string, std::string> metadata;
  const SafetensorsEntry* find(std::string_view name) const;
};

// Size in bytes of a safetensors dtype name, 0 if unknown.
size_t safetensors_dtype_size(std::string_view dtype);

// True when the JSON text nests no deeper than max_depth (strings and escapes are skipped).
bool json_depth_ok(std::string_view json, int max_depth);

// Validates the header of a file of `file_size` bytes whose first bytes are `prefix` (at least
// 8 + N of them, or the call throws "truncated"). `file` names the file in errors.
SafetensorsHeader parse_safetensors_header(std::span<const uint8_t> prefix,
                                           uint64_t file_size,
                                           const std::string& file);

// How a writer reaches data that is not host memory (a device buffer): copy(host_dst, src, n)
// brings n bytes at src to the host; a writer copies at most chunk_bytes at a time, through one
// host buffer, so it never holds a whole tensor on the host.
struct DataSource {
  std::function<void(void* host_dst, const void* src, uint64_t n)> copy;
  uint64_t chunk_bytes = 0;
};

// Calls f(host_bytes, n) on consecutive parts of the `bytes` bytes at `data`, in order: one call
// on the data itself when `source` is null (host memory), else chunks of source->chunk_bytes
// copied into `buf`.
void for_each_host_chunk(const DataSource* source,
                         const void* data,
                         uint64_t bytes,
                         std::vector<uint8_t>& buf,
                         const std::function<void(const void*, uint64_t)>& f);

struct SafetensorsTensor {
  std::string name;
  std::string dtype;  // "F32", "BF16", ...
  Shape shape;
  const void* data = nullptr;          // numel(shape) * dtype size bytes
  const DataSource* source = nullptr;  // null: `data` is host memory
};

struct SafetensorsWritten {
  uint64_t bytes = 0;  // file size
  std::string header;  // the JSON header as written (padding included)
};

// Writes a safetensors file (tensors in the given order, each read through its source, header
// padded with spaces to a multiple of 8). With `sync`, the file's data reaches the disk before the
// call returns.
SafetensorsWritten write_safetensors(const std::string& path,
                                     const std::vector<SafetensorsTensor>& tensors,
                                     const std::map<std::string, std::string>& metadata,
                                     bool sync);

// An open, validated safetensors file.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(std::string path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  const SafetensorsHeader& header() const { return header_; }
  // The raw header JSON bytes (for checksumming).
  const std::string& header_json() const { return header_json_; }
  // Copies bytes [offset, offset + n) of entry e's data into dst.
  void read(const SafetensorsEntry& e, uint64_t offset, uint64_t n, void* dst) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  SafetensorsHeader header_;
  std::string header_json_;
};

}  // namespace mtron::checkpoint
