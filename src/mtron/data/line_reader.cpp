#include "mtron/data/line_reader.h"

#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "mtron/core/error.h"

namespace mtron::data {

struct LineReader::Impl {
  std::FILE* file = nullptr;
  z_stream gz{};
  bool gz_init = false;
  ZSTD_DCtx* zstd = nullptr;
  std::vector<char> in;  // compressed input buffer
  std::size_t in_pos = 0, in_len = 0;
  bool in_eof = false;
  bool stream_end = false;  // the current gzip member / zstd frame ended cleanly
  uint64_t file_read = 0;

  ~Impl() {
    if (gz_init) inflateEnd(&gz);
    if (zstd) ZSTD_freeDCtx(zstd);
    if (file) std::fclose(file);
  }
  // Makes compressed input available; false when the file is exhausted.
  bool refill(const std::string& path) {
    if (in_pos < in_len) return true;
    if (in_eof) return false;
    in_len = std::fread(in.data(), 1, in.size(), file);
    in_pos = 0;
    file_read += in_len;
    if (in_len < in.size()) {
      MT_CHECK(!std::ferror(file), "cannot read ", path, ": ", std::strerror(errno));
      in_eof = true;
    }
    return in_len > 0;
  }
};

LineReader::LineReader(const std::string& path) : impl_(std::make_unique<Impl>()), path_(path) {
  std::error_code ec;
  MT_CHECK(std::filesystem::exists(path, ec), "--input ", path, ": no such file");
  MT_CHECK(!std::filesystem::is_directory(path, ec), "--input ", path, ": is a directory");
  impl_->file = std::fopen(path.c_str(), "rb");
  MT_CHECK(impl_->file, "--input ", path, ": cannot open: ", std::strerror(errno));
  file_size_ = std::filesystem::file_size(path, ec);
  impl_->in.resize(1 << 20);
  impl_->refill(path);
  const auto* b = reinterpret_cast<const unsigned char*>(impl_->in.data());
  if (impl_->in_len >= 2 && b[0] == 0x1f && b[1] == 0x8b) {
    compression_ = Compression::kGzip;
    MT_CHECK(inflateInit2(&impl_->gz, 15 + 32) == Z_OK, "zlib initialisation failed");
    impl_->gz_init = true;
  } else if (impl_->in_len >= 4 && b[0] == 0x28 && b[1] == 0xb5 && b[2] == 0x2f && b[3] == 0xfd) {
    compression_ = Compression::kZstd;
    impl_->zstd = ZSTD_createDCtx();
    MT_CHECK(impl_->zstd, "zstd initialisation failed");
  }
}

LineReader::~LineReader() = default;

uint64_t LineReader::file_bytes_read() const {
  return impl_->file_read - (impl_->in_len - impl_->in_pos);
}

std::size_t LineReader::fill(char* dst, std::size_t cap) {
  Impl& m = *impl_;
  switch (compression_) {
    case Compression::kNone: {
      if (!m.refill(path_)) return 0;
      const std::size_t n = std::min(cap, m.in_len - m.in_pos);
      std::memcpy(dst, m.in.data() + m.in_pos, n);
      m.in_pos += n;
      return n;
    }
    case Compression::kGzip: {
      while (true) {
        if (!m.refill(path_)) {
          MT_CHECK(m.stream_end, "--input ", path_, ": truncated gzip stream");
          return 0;
        }
        if (m.stream_end) {  // a concatenated gzip member follows
          MT_CHECK(inflateReset(&m.gz) == Z_OK, "zlib reset failed");
          m.stream_end = false;
        }
        m.gz.next_in = reinterpret_cast<Bytef*>(m.in.data() + m.in_pos);
        m.gz.avail_in = uInt(m.in_len - m.in_pos);
        m.gz.next_out = reinterpret_cast<Bytef*>(dst);
        m.gz.avail_out = uInt(cap);
        const int rc = inflate(&m.gz, Z_NO_FLUSH);
        m.in_pos = m.in_len - m.gz.avail_in;
        MT_CHECK(rc == Z_OK || rc == Z_STREAM_END || rc == Z_BUF_ERROR, "--input ", path_,
                 ": corrupt gzip data (", m.gz.msg ? m.gz.msg : "zlib error", ")");
        if (rc == Z_STREAM_END) m.stream_end = true;
        const std::size_t n = cap - m.gz.avail_out;
        if (n > 0) return n;
      }
    }
    case Compression::kZstd: {
      while (true) {
        if (!m.refill(path_)) {
          MT_CHECK(m.stream_end, "--input ", path_, ": truncated zstd stream");
          return 0;
        }
        ZSTD_inBuffer in{m.in.data() + m.in_pos, m.in_len - m.in_pos, 0};
        ZSTD_outBuffer out{dst, cap, 0};
        const std::size_t rc = ZSTD_decompressStream(m.zstd, &out, &in);
        MT_CHECK(!ZSTD_isError(rc), "--input ", path_, ": corrupt zstd data (",
                 ZSTD_getErrorName(rc), ")");
        m.in_pos += in.pos;
        m.stream_end = rc == 0;
        if (out.pos > 0) return out.pos;
      }
    }
  }
  return 0;
}

bool LineReader::next(LineBatch& batch, std::size_t target_bytes) {
  std::string& t = batch.text;
  t.swap(carry_);
  carry_.clear();
  batch.spans.clear();
  batch.first_line = next_line_;
  std::size_t line_start = 0, scanned = 0;
  const auto add_line = [&](std::size_t end) {
    if (end > line_start && t[end - 1] == '\r') --end;
    batch.spans.emplace_back(line_start, end);
  };
  // Read until the batch holds at least one complete line and about target_bytes.
  while (true) {
    for (std::size_t nl; (nl = t.find('\n', scanned)) != std::string::npos; scanned = nl + 1) {
      add_line(nl);
      line_start = nl + 1;
    }
    scanned = t.size();
    if (eof_ || (!batch.spans.empty() && t.size() >= target_bytes)) break;
    const std::size_t old = t.size();
    t.resize(old + (1 << 18));
    const std::size_t n = fill(t.data() + old, 1 << 18);
    t.resize(old + n);
    bytes_read_ += n;
    if (n == 0) eof_ = true;
  }
  // The partial tail waits for the next batch, or is the last line at the end of the file.
  if (line_start < t.size()) {
    if (eof_) {
      add_line(t.size());
    } else {
      carry_.assign(t, line_start, std::string::npos);
      t.resize(line_start);
    }
  }
  next_line_ += int64_t(batch.size());
  return !batch.spans.empty();
}

}  // namespace mtron::data
