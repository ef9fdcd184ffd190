// defines: LineReader, LineBatch
//
// Streams the lines of a text file, plain or compressed (gzip or zstd, recognised by their
// magic bytes, whatever the file is called), in batches of whole lines. Memory is one batch plus
// one decompression block, independent of the file size. Line terminators ("\n" or "\r\n") are
// removed; a last line without "\n" is still a line.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mtron::data {

struct LineBatch {
  std::string text;                                        // raw bytes of the lines
  std::vector<std::pair<std::size_t, std::size_t>> spans;  // [begin, end) of each line in text
  int64_t first_line = 1;  // 1-based number of the first line in the file
  std::size_t size() const { return spans.size(); }
  std::string_view line(std::size_t i) const {
    return std::string_view(text).substr(spans[i].first, spans[i].second - spans[i].first);
  }
};

enum class Compression { kNone, kGzip, kZstd };

class LineReader {
 public:
  explicit LineReader(const std::string& path);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // Fills `batch` with the next lines (about `target_bytes` of them, at least one line);
  // returns false at the end of the file.
  bool next(LineBatch& batch, std::size_t target_bytes = 1 << 20);

  Compression compression() const { return compression_; }
  uint64_t file_size() const { return file_size_; }
  // Bytes of the file consumed so far (compressed bytes for a compressed file).
  uint64_t file_bytes_read() const;
  // Uncompressed bytes delivered so far (line terminators included).
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  std::size_t fill(char* dst, std::size_t cap);  // decompressed bytes, 0 at EOF

  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string path_;
  Compression compression_ = Compression::kNone;
  uint64_t file_size_ = 0, bytes_read_ = 0;
  int64_t next_line_ = 1;
  std::string carry_;  // a partial line left from the previous block
  bool eof_ = false;
};

}  // namespace mtron::data
