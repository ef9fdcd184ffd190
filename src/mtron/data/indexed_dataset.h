// defines: TokenDType, IndexedDataset, IndexedDatasetWriter, optimal_token_dtype
//
// Megatron's indexed dataset: `<prefix>.bin` holds the token ids of every sequence back to back
// (no header); `<prefix>.idx` (little-endian) is
//
//   "MMIDIDX\0\0"  u64 version=1  u8 dtype code  u64 N (sequences)  u64 D (documents + 1)
//   int32[N] sequence lengths   int64[N] byte pointers into .bin   int64[D] document index
//   [int8[N] modes: multimodal datasets only]
//
// The document index lists sequence boundaries: document d spans sequences
// [doc[d], doc[d+1]). GPT data has one sequence per document, except that an empty document
// (a JSON line whose text tokenises to nothing) adds a boundary and no sequence.
//
// IndexedDataset maps both files and validates everything before use (magic, version, dtype,
// sizes of both files, lengths, pointers, the document index), so a corrupt or truncated file
// is reported as one line naming the file and the first inconsistency, and never causes an
// out-of-bounds read. Reads are zero-copy and thread-safe (the object is immutable).
//
// IndexedDatasetWriter produces byte-for-byte what Megatron's IndexedDatasetBuilder produces,
// streaming: token ids go straight to .bin and the index arrays to temporary side files, so its
// memory does not grow with the corpus. Output appears atomically at finalize().
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "mtron/data/mapped_file.h"

namespace mtron::data {

// Megatron's DType codes (indexed_dataset.py).
enum class TokenDType : uint8_t {
  kUInt8 = 1,
  kInt8 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kFloat64 = 6,
  kFloat32 = 7,
  kUInt16 = 8,
};

std::size_t token_itemsize(TokenDType t);
const char* token_dtype_name(TokenDType t);

// Megatron's DType.optimal_dtype: uint16 when the vocabulary has fewer than 65500 entries,
// otherwise int32.
TokenDType optimal_token_dtype(int64_t vocab_size);

std::string idx_path(const std::string& prefix);  // prefix + ".idx"
std::string bin_path(const std::string& prefix);  // prefix + ".bin"

class IndexedDataset {
 public:
  // Opens and validates `<prefix>.idx` and `<prefix>.bin`.
  explicit IndexedDataset(const std::string& path_prefix);

  const std::string& path_prefix() const { return prefix_; }
  TokenDType dtype() const { return dtype_; }
  int64_t num_sequences() const { return n_; }
  // Number of documents (D - 1).
  int64_t num_documents() const { return d_ - 1; }
  int64_t num_tokens() const { return num_tokens_; }
  int32_t max_sequence_length() const { return max_length_; }
  uint64_t idx_file_bytes() const { return idx_.size(); }
  bool multimodal() const { return multimodal_; }

  // The index arrays are not aligned in the file (the header is 34 bytes), so they are read
  // through these accessors (an unaligned load, as numpy does), not exposed as typed spans.
  int32_t sequence_length(int64_t i) const { return load<int32_t>(lengths_, i); }
  int64_t sequence_pointer(int64_t i) const { return load<int64_t>(pointers_, i); }
  int64_t document_index(int64_t i) const { return load<int64_t>(documents_, i); }

  // Zero-copy view of sequence i's token bytes in .bin.
  std::span<const std::byte> sequence_bytes(int64_t i) const;

  // Zero-copy typed view of sequence i; T must match dtype() (checked).
  template <typename T>
  std::span<const T> sequence(int64_t i) const;

  // Copies tokens [offset, offset + length) of sequence i into out, converting to int32.
  // Bounds are the caller's invariant (checked with MT_ASSERT).
  void read(int64_t i, int64_t offset, int64_t length, int32_t* out) const;

 private:
  template <typename T>
  static T load(const std::byte* base, int64_t i) {
    T v;
    std::memcpy(&v, base + i * int64_t(sizeof(T)), sizeof(T));
    return v;
  }
  void validate();

  std::string prefix_;
  MappedFile idx_, bin_;
  TokenDType dtype_ = TokenDType::kUInt16;
  std::size_t itemsize_ = 2;
  int64_t n_ = 0, d_ = 0, num_tokens_ = 0;
  int32_t max_length_ = 0;
  bool multimodal_ = false;
  const std::byte* lengths_ = nullptr;
  const std::byte* pointers_ = nullptr;
  const std::byte* documents_ = nullptr;
};

class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(const std::string& path_prefix, TokenDType dtype);
  ~IndexedDatasetWriter();  // removes the temporary files unless finalize() ran
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // Adds one document made of consecutive sequences (Megatron's add_document): `tokens` is the
  // concatenation, `sequence_lengths` their lengths (they must sum to tokens.size()). An empty
  // document (no sequences) adds a document boundary only, as Megatron does.
  void add_document(std::span<const int32_t> tokens, std::span<const int32_t> sequence_lengths);
  // A document that is one sequence (GPT data): lengths = {tokens.size()} or {} when empty.
  void add_document(std::span<const int32_t> tokens);

  // Writes `<prefix>.idx`, renames both files into place.
  void finalize();

  int64_t num_sequences() const { return n_; }
  int64_t num_documents() const { return num_docs_; }
  int64_t num_tokens() const { return num_tokens_; }

 private:
  void write_tokens(std::span<const int32_t> tokens);

  std::string prefix_;
  TokenDType dtype_;
  std::FILE* bin_ = nullptr;
  std::FILE* lengths_ = nullptr;  // int32 per sequence, streamed
  std::FILE* docs_ = nullptr;     // int64 per document boundary, streamed
  std::vector<unsigned char> convert_;
  int64_t n_ = 0, num_docs_ = 0, num_tokens_ = 0;
  bool finalized_ = false;
};

}  // namespace mtron::data
