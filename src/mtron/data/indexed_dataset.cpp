#include "mtron/data/indexed_dataset.h"

#include <cerrno>
#include <filesystem>

#include "mtron/core/error.h"

namespace mtron::data {

namespace {

constexpr char kIdxMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr std::size_t kHeaderBytes = 34;  // magic 9 + version 8 + dtype 1 + N 8 + D 8

template <typename T>
void put(std::FILE* f, T v, const std::string& path) {
  MT_CHECK(std::fwrite(&v, sizeof(T), 1, f) == 1, "cannot write ", path, ": ",
           std::strerror(errno));
}

std::FILE* open_write(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  MT_CHECK(f, "cannot write ", path, ": ", std::strerror(errno));
  std::setvbuf(f, nullptr, _IOFBF, 1 << 20);
  return f;
}

// Appends the whole content of a temporary side file to `out`.
void copy_file(const std::string& from, std::FILE* out, const std::string& out_path) {
  std::FILE* in = std::fopen(from.c_str(), "rb");
  MT_CHECK(in, "cannot read ", from, ": ", std::strerror(errno));
  std::vector<char> buf(1 << 20);
  std::size_t got;
  while ((got = std::fread(buf.data(), 1, buf.size(), in)) > 0) {
    MT_CHECK(std::fwrite(buf.data(), 1, got, out) == got, "cannot write ", out_path, ": ",
             std::strerror(errno));
  }
  std::fclose(in);
}

}  // namespace

std::size_t token_itemsize(TokenDType t) {
  switch (t) {
    case TokenDType::kUInt8:
    case TokenDType::kInt8:
      return 1;
    case TokenDType::kInt16:
    case TokenDType::kUInt16:
      return 2;
    case TokenDType::kInt32:
    case TokenDType::kFloat32:
      return 4;
    case TokenDType::kInt64:
    case TokenDType::kFloat64:
      return 8;
  }
  return 0;
}

const char* token_dtype_name(TokenDType t) {
  switch (t) {
    case TokenDType::kUInt8:
      return "uint8";
    case TokenDType::kInt8:
      return "int8";
    case TokenDType::kInt16:
      return "int16";
    case TokenDType::kInt32:
      return "int32";
    case TokenDType::kInt64:
      return "int64";
    case TokenDType::kFloat64:
      return "float64";
    case TokenDType::kFloat32:
      return "float32";
    case TokenDType::kUInt16:
      return "uint16";
  }
  return "?";
}

TokenDType optimal_token_dtype(int64_t vocab_size) {
  return vocab_size < 65500 ? TokenDType::kUInt16 : TokenDType::kInt32;
}

std::string idx_path(const std::string& prefix) {
  return prefix + ".idx";
}
std::string bin_path(const std::string& prefix) {
  return prefix + ".bin";
}

// ---------------------------------------------------------------------------------------------
// Reader

IndexedDataset::IndexedDataset(const std::string& path_prefix)
    : prefix_(path_prefix), idx_(idx_path(path_prefix)), bin_(bin_path(path_prefix)) {
  validate();
}

void IndexedDataset::validate() {
  const std::string& ip = idx_.path();
  const std::string& bp = bin_.path();
  const std::byte* h = idx_.data();
  const std::size_t isz = idx_.size();
  MT_CHECK(isz >= kHeaderBytes, ip, ": truncated index header (", isz, " bytes, need ",
           kHeaderBytes, ")");
  MT_CHECK(std::memcmp(h, kIdxMagic, 9) == 0, ip,
           ": bad magic (not a Megatron MMIDIDX index file)");
  const uint64_t version = load<uint64_t>(h + 9, 0);
  MT_CHECK(version == 1, ip, ": unsupported index version ", version, " (expected 1)");
  const uint8_t code = static_cast<uint8_t>(h[17]);
  MT_CHECK(code >= 1 && code <= 8, ip, ": invalid dtype code ", int(code),
           " (Megatron codes are 1..8)");
  dtype_ = static_cast<TokenDType>(code);
  MT_CHECK(dtype_ != TokenDType::kFloat32 && dtype_ != TokenDType::kFloat64, ip, ": dtype code ",
           int(code), " (", token_dtype_name(dtype_), ") cannot hold token ids");
  itemsize_ = token_itemsize(dtype_);
  const uint64_t n = load<uint64_t>(h + 18, 0);
  const uint64_t d = load<uint64_t>(h + 26, 0);
  // Bound the counts by the file size before any arithmetic on them can overflow.
  const uint64_t body = isz - kHeaderBytes;
  MT_CHECK(n <= body / 12, ip, ": sequence count ", n, " does not fit in the file (", isz,
           " bytes); the index is truncated or corrupt");
  MT_CHECK(d >= 1 && d <= body / 8, ip, ": document count ", d,
           " is impossible (must be >= 1 and fit in the file)");
  const uint64_t need = kHeaderBytes + 12 * n + 8 * d;
  MT_CHECK(isz == need || isz == need + n, ip, ": size ", isz, " bytes does not match N=", n,
           " sequences and D=", d, " document entries (expected ", need, ", or ", need + n,
           " with multimodal modes)");
  n_ = int64_t(n);
  d_ = int64_t(d);
  multimodal_ = isz == need + n && n > 0;
  lengths_ = h + kHeaderBytes;
  pointers_ = lengths_ + 4 * n;
  documents_ = pointers_ + 8 * n;

  // Sequences are stored back to back from byte 0 of .bin, as Megatron writes them.
  int64_t expect = 0;
  for (int64_t i = 0; i < n_; ++i) {
    const int32_t len = sequence_length(i);
    MT_CHECK(len >= 0, ip, ": sequence ", i, " has negative length ", len);
    max_length_ = std::max(max_length_, len);
    const int64_t ptr = sequence_pointer(i);
    MT_CHECK(ptr == expect, ip, ": sequence ", i, " pointer ", ptr, " should be ", expect,
             " (pointers must be the running sum of length*", itemsize_, ")");
    expect += int64_t(len) * int64_t(itemsize_);
  }
  MT_CHECK(uint64_t(expect) == bin_.size(), bp, ": size ", bin_.size(),
           " bytes does not match its index ", ip, " (", expect,
           " bytes of tokens); the .bin is truncated, extra or from another dataset");
  num_tokens_ = expect / int64_t(itemsize_);

  MT_CHECK(document_index(0) == 0, ip, ": document index starts at ", document_index(0),
           " (expected 0)");
  for (int64_t i = 1; i < d_; ++i) {
    const int64_t a = document_index(i - 1), b = document_index(i);
    MT_CHECK(b >= a && b <= n_, ip, ": document index entry ", i, " = ", b,
             b < a ? str(" decreases (previous ", a, ")") : str(" exceeds N=", n_));
  }
  MT_CHECK(document_index(d_ - 1) == n_, ip, ": last document index entry is ",
           document_index(d_ - 1), " (expected N=", n_, ")");
}

std::span<const std::byte> IndexedDataset::sequence_bytes(int64_t i) const {
  MT_ASSERT(i >= 0 && i < n_, "sequence ", i, " out of range [0, ", n_, ")");
  return {bin_.data() + sequence_pointer(i), std::size_t(sequence_length(i)) * itemsize_};
}

template <typename T>
std::span<const T> IndexedDataset::sequence(int64_t i) const {
  MT_CHECK(sizeof(T) == itemsize_, prefix_, ": requested ", sizeof(T),
           "-byte tokens from a dataset of ", token_dtype_name(dtype_));
  auto b = sequence_bytes(i);
  return {reinterpret_cast<const T*>(b.data()), b.size() / sizeof(T)};
}
template std::span<const uint16_t> IndexedDataset::sequence<uint16_t>(int64_t) const;
template std::span<const int32_t> IndexedDataset::sequence<int32_t>(int64_t) const;

void IndexedDataset::read(int64_t i, int64_t offset, int64_t length, int32_t* out) const {
  MT_ASSERT(i >= 0 && i < n_ && offset >= 0 && length >= 0 && offset + length <= sequence_length(i),
            "read of sequence ", i, " [", offset, ", ", offset + length, ") out of bounds");
  const std::byte* p = bin_.data() + sequence_pointer(i) + offset * int64_t(itemsize_);
  switch (dtype_) {
    case TokenDType::kUInt16: {
      const auto* s = reinterpret_cast<const uint16_t*>(p);
      for (int64_t k = 0; k < length; ++k) out[k] = s[k];
      break;
    }
    case TokenDType::kInt32:
      std::memcpy(out, p, std::size_t(length) * 4);
      break;
    case TokenDType::kUInt8: {
      const auto* s = reinterpret_cast<const uint8_t*>(p);
      for (int64_t k = 0; k < length; ++k) out[k] = s[k];
      break;
    }
    case TokenDType::kInt8: {
      const auto* s = reinterpret_cast<const int8_t*>(p);
      for (int64_t k = 0; k < length; ++k) out[k] = s[k];
      break;
    }
    case TokenDType::kInt16: {
      const auto* s = reinterpret_cast<const int16_t*>(p);
      for (int64_t k = 0; k < length; ++k) out[k] = s[k];
      break;
    }
    case TokenDType::kInt64: {
      const auto* s = reinterpret_cast<const int64_t*>(p);
      for (int64_t k = 0; k < length; ++k) out[k] = static_cast<int32_t>(s[k]);
      break;
    }
    case TokenDType::kFloat32:
    case TokenDType::kFloat64:
      MT_ASSERT(false, "float token dtype passed validation");
  }
}

// ---------------------------------------------------------------------------------------------
// Writer

IndexedDatasetWriter::IndexedDatasetWriter(const std::string& path_prefix, TokenDType dtype)
    : prefix_(path_prefix), dtype_(dtype) {
  MT_CHECK(dtype == TokenDType::kUInt16 || dtype == TokenDType::kInt32,
           "IndexedDatasetWriter writes uint16 or int32 tokens, not ", token_dtype_name(dtype));
  bin_ = open_write(bin_path(prefix_) + ".tmp");
  lengths_ = open_write(idx_path(prefix_) + ".lengths.tmp");
  docs_ = open_write(idx_path(prefix_) + ".docs.tmp");
  put<int64_t>(docs_, 0, prefix_);  // Megatron's document_indices start as [0]
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  for (std::FILE* f : {bin_, lengths_, docs_})
    if (f) std::fclose(f);
  std::error_code ec;
  std::filesystem::remove(idx_path(prefix_) + ".lengths.tmp", ec);
  std::filesystem::remove(idx_path(prefix_) + ".docs.tmp", ec);
  if (!finalized_) std::filesystem::remove(bin_path(prefix_) + ".tmp", ec);
}

void IndexedDatasetWriter::write_tokens(std::span<const int32_t> tokens) {
  if (tokens.empty()) return;
  const void* src = tokens.data();
  std::size_t bytes = tokens.size() * 4;
  if (dtype_ == TokenDType::kUInt16) {
    convert_.resize(tokens.size() * 2);
    auto* dst = reinterpret_cast<uint16_t*>(convert_.data());
    for (std::size_t k = 0; k < tokens.size(); ++k) {
      MT_CHECK(tokens[k] >= 0 && tokens[k] <= 0xffff, prefix_, ": token id ", tokens[k],
               " does not fit the uint16 .bin (the tokenizer's vocabulary is too large for it)");
      dst[k] = static_cast<uint16_t>(tokens[k]);
    }
    src = convert_.data();
    bytes = convert_.size();
  }
  MT_CHECK(std::fwrite(src, 1, bytes, bin_) == bytes, "cannot write ", bin_path(prefix_), ": ",
           std::strerror(errno));
}

void IndexedDatasetWriter::add_document(std::span<const int32_t> tokens,
                                        std::span<const int32_t> sequence_lengths) {
  MT_ASSERT(!finalized_, "add_document after finalize");
  int64_t total = 0;
  for (int32_t l : sequence_lengths) {
    MT_ASSERT(l >= 0, "negative sequence length");
    total += l;
    put<int32_t>(lengths_, l, prefix_);
  }
  MT_ASSERT(total == int64_t(tokens.size()), "sequence lengths sum to ", total, " but ",
            tokens.size(), " tokens were given");
  write_tokens(tokens);
  n_ += int64_t(sequence_lengths.size());
  num_tokens_ += total;
  ++num_docs_;
  put<int64_t>(docs_, n_, prefix_);
}

void IndexedDatasetWriter::add_document(std::span<const int32_t> tokens) {
  const int32_t len = static_cast<int32_t>(tokens.size());
  MT_CHECK(tokens.size() <= 0x7fffffff, prefix_, ": document of ", tokens.size(),
           " tokens exceeds the int32 sequence length of the format");
  add_document(tokens, tokens.empty() ? std::span<const int32_t>() : std::span(&len, 1));
}

void IndexedDatasetWriter::finalize() {
  MT_ASSERT(!finalized_, "finalize called twice");
  const std::string ip = idx_path(prefix_), bp = bin_path(prefix_);
  for (std::FILE** f : {&bin_, &lengths_, &docs_}) {
    MT_CHECK(std::fclose(*f) == 0, "cannot write ", prefix_, ": ", std::strerror(errno));
    *f = nullptr;
  }
  std::FILE* idx = open_write(ip + ".tmp");
  std::fwrite(kIdxMagic, 1, 9, idx);
  put<uint64_t>(idx, 1, ip);
  put<uint8_t>(idx, static_cast<uint8_t>(dtype_), ip);
  put<uint64_t>(idx, uint64_t(n_), ip);
  put<uint64_t>(idx, uint64_t(num_docs_ + 1), ip);
  copy_file(ip + ".lengths.tmp", idx, ip);
  // Pointers: running sum of length * itemsize, recomputed from the streamed lengths.
  {
    std::FILE* in = std::fopen((ip + ".lengths.tmp").c_str(), "rb");
    MT_CHECK(in, "cannot read ", ip, ".lengths.tmp: ", std::strerror(errno));
    std::vector<int32_t> lens(1 << 18);
    std::vector<int64_t> ptrs(lens.size());
    int64_t ptr = 0;
    const int64_t isz = int64_t(token_itemsize(dtype_));
    std::size_t got;
    while ((got = std::fread(lens.data(), 4, lens.size(), in)) > 0) {
      for (std::size_t k = 0; k < got; ++k) {
        ptrs[k] = ptr;
        ptr += int64_t(lens[k]) * isz;
      }
      MT_CHECK(std::fwrite(ptrs.data(), 8, got, idx) == got, "cannot write ", ip, ": ",
               std::strerror(errno));
    }
    std::fclose(in);
  }
  copy_file(ip + ".docs.tmp", idx, ip);
  MT_CHECK(std::fclose(idx) == 0, "cannot write ", ip, ": ", std::strerror(errno));
  std::filesystem::rename(bp + ".tmp", bp);
  std::filesystem::rename(ip + ".tmp", ip);
  finalized_ = true;
}

}  // namespace mtron::data
