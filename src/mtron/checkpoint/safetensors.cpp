#include "mtron/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "mtron/checkpoint/file_io.h"

namespace mtron::checkpoint {

namespace {

// The reference implementation's limit on N.
constexpr uint64_t kMaxHeader = 100'000'000;

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

const SafetensorsEntry* SafetensorsHeader::find(std::string_view name) const {
  for (const SafetensorsEntry& e : entries) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

size_t safetensors_dtype_size(std::string_view d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "BOOL" || d == "U8" || d == "I8" || d == "F8_E5M2" || d == "F8_E4M3") return 1;
  return 0;
}

bool json_depth_ok(std::string_view json, int max_depth) {
  int depth = 0;
  bool in_string = false, escape = false;
  for (char c : json) {
    if (in_string) {
      if (escape) {
        escape = false;
      } else if (c == '\\') {
        escape = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) return false;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return true;
}

SafetensorsHeader parse_safetensors_header(std::span<const uint8_t> prefix,
                                           uint64_t file_size,
                                           const std::string& file) {
  using nlohmann::json;
  MT_CHECK(file_size >= 8 && prefix.size() >= 8, file,
           ": not a safetensors file (shorter than its 8-byte header length)");
  SafetensorsHeader h;
  h.header_len = read_u64_le(prefix.data());
  MT_CHECK(h.header_len <= kMaxHeader, file, ": safetensors header length ", h.header_len,
           " exceeds the limit of ", kMaxHeader, " bytes");
  MT_CHECK(8 + h.header_len <= file_size, file, ": file is truncated (header of ", h.header_len,
           " bytes, file of ", file_size, ")");
  MT_CHECK(8 + h.header_len <= prefix.size(), file, ": header is truncated");
  h.data_start = 8 + h.header_len;
  const std::string_view text(reinterpret_cast<const char*>(prefix.data() + 8), h.header_len);
  MT_CHECK(!text.empty() && text.front() == '{', file,
           ": safetensors header does not start with '{'");
  MT_CHECK(json_depth_ok(text, 4), file, ": safetensors header nests too deeply");
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  MT_CHECK(!j.is_discarded() && j.is_object(), file, ": safetensors header is not a JSON object");

  const uint64_t buffer = file_size - h.data_start;
  for (const auto& [name, v] : j.items()) {
    if (name == "__metadata__") {
      MT_CHECK(v.is_object(), file, ": __metadata__ is not an object");
      for (const auto& [k, s] : v.items()) {
        MT_CHECK(s.is_string(), file, ": __metadata__ value of '", k, "' is not a string");
        h.metadata[k] = s.get<std::string>();
      }
      continue;
    }
    const std::string where = file + ": tensor '" + name + "'";
    MT_CHECK(v.is_object() && v.size() == 3 && v.contains("dtype") && v.contains("shape") &&
                 v.contains("data_offsets"),
             where, ": expected exactly {dtype, shape, data_offsets}");
    SafetensorsEntry e;
    e.name = name;
    const json& dt = v["dtype"];
    MT_CHECK(dt.is_string(), where, ": dtype is not a string");
    e.dtype = dt.get<std::string>();
    e.elem_size = safetensors_dtype_size(e.dtype);
    MT_CHECK(e.elem_size > 0, where, ": unknown dtype '", e.dtype, "'");
    const json& sh = v["shape"];
    MT_CHECK(sh.is_array() && sh.size() <= 8, where, ": shape is not an array of at most 8 dims");
    uint64_t bytes = e.elem_size;
    for (const json& d : sh) {
      MT_CHECK(d.is_number_unsigned(), where, ": shape entries must be non-negative integers");
      const uint64_t n = d.get<uint64_t>();
      MT_CHECK(n <= uint64_t(INT64_MAX) && !__builtin_mul_overflow(bytes, n, &bytes), where,
               ": shape overflows");
      e.shape.push_back(int64_t(n));
    }
    const json& off = v["data_offsets"];
    MT_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() &&
                 off[1].is_number_unsigned(),
             where, ": data_offsets must be two non-negative integers");
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    MT_CHECK(e.begin <= e.end && e.end <= buffer, where, ": data_offsets [", e.begin, ", ", e.end,
             ") outside the data buffer of ", buffer, " bytes");
    MT_CHECK(e.end - e.begin == bytes, where, ": data_offsets span ", e.end - e.begin,
             " bytes but dtype ", e.dtype, " and shape ", shape_str(e.shape), " need ", bytes);
    h.entries.push_back(std::move(e));
  }
  std::sort(h.entries.begin(), h.entries.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t at = 0;
  for (const SafetensorsEntry& e : h.entries) {
    MT_CHECK(e.begin == at, file, ": tensor '", e.name, "' starts at byte ", e.begin,
             at < e.begin ? " leaving a gap after byte " : " overlapping the data before byte ",
             at);
    at = e.end;
  }
  MT_CHECK(at == buffer, file, ": tensors end at byte ", at, " of a data buffer of ", buffer,
           " bytes (truncated or trailing data)");
  return h;
}

void for_each_host_chunk(const DataSource* source,
                         const void* data,
                         uint64_t bytes,
                         std::vector<uint8_t>& buf,
                         const std::function<void(const void*, uint64_t)>& f) {
  if (!source) {
    f(data, bytes);
    return;
  }
  MT_ASSERT(source->chunk_bytes > 0, "a data source without a chunk size");
  buf.resize(size_t(std::min(bytes, source->chunk_bytes)));
  const auto* p = static_cast<const uint8_t*>(data);
  for (uint64_t at = 0; at < bytes; at += source->chunk_bytes) {
    const uint64_t n = std::min(source->chunk_bytes, bytes - at);
    source->copy(buf.data(), p + at, n);
    f(buf.data(), n);
  }
}

SafetensorsWritten write_safetensors(const std::string& path,
                                     const std::vector<SafetensorsTensor>& tensors,
                                     const std::map<std::string, std::string>& metadata,
                                     bool sync) {
  static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");
  nlohmann::ordered_json j;
  if (!metadata.empty()) j["__metadata__"] = metadata;
  uint64_t at = 0;
  std::vector<uint64_t> sizes;
  for (const SafetensorsTensor& t : tensors) {
    const size_t es = safetensors_dtype_size(t.dtype);
    MT_ASSERT(es > 0, "unknown dtype ", t.dtype);
    MT_ASSERT(!j.contains(t.name), "duplicate tensor name ", t.name, " in ", path);
    const uint64_t bytes = uint64_t(numel(t.shape)) * es;
    j[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
    sizes.push_back(bytes);
  }
  std::string header = j.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(header.size()) >> (8 * i));

  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  MT_CHECK(fd >= 0, "cannot create ", path, ": ", std::strerror(errno));
  try {
    write_all(fd, len, 8, path);
    write_all(fd, header.data(), header.size(), path);
    std::vector<uint8_t> buf;
    for (size_t i = 0; i < tensors.size(); ++i) {
      for_each_host_chunk(tensors[i].source, tensors[i].data, sizes[i], buf,
                          [&](const void* p, uint64_t n) { write_all(fd, p, n, path); });
    }
    MT_CHECK(!sync || ::fsync(fd) == 0, "cannot fsync ", path, ": ", std::strerror(errno));
  } catch (...) {
    ::close(fd);
    throw;
  }
  MT_CHECK(::close(fd) == 0, "cannot close ", path, ": ", std::strerror(errno));
  return {8 + header.size() + at, std::move(header)};
}

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  MT_CHECK(fd_ >= 0, "cannot open ", path_, ": ", std::strerror(errno));
  try {
    struct stat st {};
    MT_CHECK(::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode), path_, " is not a regular file");
    size_ = uint64_t(st.st_size);
    MT_CHECK(size_ >= 8, path_, ": not a safetensors file (", size_, " bytes)");
    uint8_t len[8];
    read_all_at(fd_, len, 8, 0, path_);
    const uint64_t n = read_u64_le(len);
    MT_CHECK(n <= kMaxHeader && 8 + n <= size_, path_, ": safetensors header length ", n,
             " does not fit the file of ", size_, " bytes");
    std::vector<uint8_t> prefix(8 + n);
    std::memcpy(prefix.data(), len, 8);
    read_all_at(fd_, prefix.data() + 8, n, 8, path_);
    header_ = parse_safetensors_header(prefix, size_, path_);
    header_json_.assign(reinterpret_cast<const char*>(prefix.data() + 8), n);
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

void SafetensorsFile::read(const SafetensorsEntry& e,
                           uint64_t offset,
                           uint64_t n,
                           void* dst) const {
  MT_ASSERT(offset <= e.end - e.begin && n <= e.end - e.begin - offset, "read outside tensor ",
            e.name);
  read_all_at(fd_, dst, n, header_.data_start + e.begin + offset, path_);
}

}  // namespace mtron::checkpoint
