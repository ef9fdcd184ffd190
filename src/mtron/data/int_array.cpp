#include "mtron/data/int_array.h"

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "mtron/core/error.h"
#include "mtron/data/mapped_file.h"

namespace mtron::data {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicLen = 6;
constexpr std::size_t kAlign = 64;             // numpy's ARRAY_ALIGN
constexpr std::size_t kGrowthAxisDigits = 21;  // numpy's GROWTH_AXIS_MAX_DIGITS

// Parses the value that follows 'key': in a numpy header dict; returns the raw text up to the
// matching delimiter. The header is a Python literal written by numpy; we accept its spacing
// variations but nothing else.
std::string dict_value(const std::string& h, const std::string& key, const std::string& path) {
  std::string k = "'" + key + "'";
  auto p = h.find(k);
  MT_CHECK(p != std::string::npos, path, ": not a valid .npy file (header has no ", k, ")");
  p = h.find(':', p + k.size());
  MT_CHECK(p != std::string::npos, path, ": not a valid .npy file (bad header)");
  ++p;
  while (p < h.size() && h[p] == ' ') ++p;
  MT_CHECK(p < h.size(), path, ": not a valid .npy file (bad header)");
  if (h[p] == '(') {
    auto e = h.find(')', p);
    MT_CHECK(e != std::string::npos, path, ": not a valid .npy file (bad shape)");
    return h.substr(p, e - p + 1);
  }
  auto e = h.find_first_of(",}", p);
  MT_CHECK(e != std::string::npos, path, ": not a valid .npy file (bad header)");
  std::string v = h.substr(p, e - p);
  while (!v.empty() && v.back() == ' ') v.pop_back();
  return v;
}

std::vector<int64_t> parse_shape(const std::string& s, const std::string& path) {
  std::vector<int64_t> dims;
  std::size_t i = 1;  // after '('
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == ',')) ++i;
    if (i >= s.size() || s[i] == ')') break;
    MT_CHECK(s[i] >= '0' && s[i] <= '9', path, ": not a valid .npy file (bad shape ", s, ")");
    int64_t v = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      MT_CHECK(v < (int64_t(1) << 56), path, ": .npy shape too large (", s, ")");
      v = v * 10 + (s[i] - '0');
      ++i;
    }
    dims.push_back(v);
  }
  return dims;
}

}  // namespace

std::size_t itemsize(IntDType t) {
  switch (t) {
    case IntDType::kInt16:
      return 2;
    case IntDType::kInt32:
      return 4;
    case IntDType::kInt64:
      return 8;
    case IntDType::kUInt32:
      return 4;
  }
  return 0;
}

const char* npy_descr(IntDType t) {
  switch (t) {
    case IntDType::kInt16:
      return "<i2";
    case IntDType::kInt32:
      return "<i4";
    case IntDType::kInt64:
      return "<i8";
    case IntDType::kUInt32:
      return "<u4";
  }
  return "";
}

IntArray load_npy(const std::string& path) {
  auto file = std::make_shared<MappedFile>(path);
  const auto* b = reinterpret_cast<const unsigned char*>(file->data());
  const std::size_t n = file->size();
  MT_CHECK(n >= kMagicLen + 4 && std::memcmp(b, kMagic, kMagicLen) == 0, path,
           ": not a .npy file (bad magic)");
  const int major = b[6];
  std::size_t header_len = 0, prefix = 0;
  if (major == 1) {
    header_len = b[8] | (std::size_t(b[9]) << 8);
    prefix = 10;
  } else if (major == 2 || major == 3) {
    MT_CHECK(n >= 12, path, ": truncated .npy header");
    header_len =
        b[8] | (std::size_t(b[9]) << 8) | (std::size_t(b[10]) << 16) | (std::size_t(b[11]) << 24);
    prefix = 12;
  } else {
    MT_CHECK(false, path, ": unsupported .npy version ", major);
  }
  MT_CHECK(header_len <= n - prefix, path, ": truncated .npy header (", header_len,
           " header bytes, file has ", n, ")");
  const std::string h(reinterpret_cast<const char*>(b + prefix), header_len);
  MT_CHECK(!h.empty() && h.front() == '{', path, ": not a valid .npy file (bad header)");

  const std::string descr = dict_value(h, "descr", path);
  IntDType dt;
  if (descr == "'<i2'") {
    dt = IntDType::kInt16;
  } else if (descr == "'<i4'") {
    dt = IntDType::kInt32;
  } else if (descr == "'<i8'") {
    dt = IntDType::kInt64;
  } else if (descr == "'<u4'") {
    dt = IntDType::kUInt32;
  } else {
    MT_CHECK(false, path, ": unsupported .npy dtype ", descr,
             " (expected little-endian int16/int32/int64/uint32)");
  }
  MT_CHECK(dict_value(h, "fortran_order", path) == "False", path,
           ": Fortran-ordered .npy arrays are not supported");
  const auto dims = parse_shape(dict_value(h, "shape", path), path);
  MT_CHECK(dims.size() == 1 || dims.size() == 2, path, ": expected a 1-D or 2-D array, got ",
           dims.size(), " dimensions");
  const int64_t rows = dims[0], cols = dims.size() == 2 ? dims[1] : 1;
  MT_CHECK(cols > 0 || rows == 0, path, ": bad .npy shape");
  const std::size_t offset = prefix + header_len;
  MT_CHECK(offset % itemsize(dt) == 0, path, ": .npy data is not aligned");
  const unsigned __int128 need = (unsigned __int128)rows * cols * itemsize(dt);
  MT_CHECK(need == n - offset, path, ": .npy data size mismatch (shape needs ", (uint64_t)need,
           " bytes, file holds ", n - offset, "); the file is truncated or corrupt");
  const void* data = b + offset;
  return IntArray(std::move(file), data, dt, rows, cols, int(dims.size()));
}

void save_npy(const std::string& path, const IntArray& a) {
  const std::string shape =
      a.ndim() == 1 ? str("(", a.rows(), ",)") : str("(", a.rows(), ", ", a.cols(), ")");
  std::string h = str("{'descr': '", npy_descr(a.dtype()),
                      "', 'fortran_order': False, 'shape': ", shape, ", }");
  const std::size_t digits = std::to_string(a.rows()).size();
  if (digits < kGrowthAxisDigits) h.append(kGrowthAxisDigits - digits, ' ');
  const std::size_t hlen = h.size() + 1;  // + '\n'
  const std::size_t pad = kAlign - ((kMagicLen + 2 + 2 + hlen) % kAlign);
  h.append(pad, ' ');
  h.push_back('\n');

  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  MT_CHECK(f, "cannot write ", tmp, ": ", std::strerror(errno));
  const unsigned char prefix[10] = {0x93,
                                    'N',
                                    'U',
                                    'M',
                                    'P',
                                    'Y',
                                    1,
                                    0,
                                    (unsigned char)(h.size() & 0xff),
                                    (unsigned char)(h.size() >> 8)};
  const std::size_t bytes = std::size_t(a.size()) * itemsize(a.dtype());
  bool ok = std::fwrite(prefix, 1, 10, f) == 10 &&
            std::fwrite(h.data(), 1, h.size(), f) == h.size() &&
            (bytes == 0 || std::fwrite(a.data(), 1, bytes, f) == bytes);
  ok = (std::fclose(f) == 0) && ok;
  MT_CHECK(ok, "cannot write ", tmp, ": ", std::strerror(errno));
  std::filesystem::rename(tmp, path);
}

}  // namespace mtron::data
