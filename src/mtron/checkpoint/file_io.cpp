#include "mtron/checkpoint/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "mtron/core/error.h"

namespace mtron::checkpoint {

namespace fs = std::filesystem;

namespace {
std::string sys_error() {
  return std::strerror(errno);
}
}  // namespace

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    // Linux caps one write at ~2 GB; larger tensors take several calls.
    const ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t(1) << 30));
    if (w < 0 && errno == EINTR) continue;
    MT_CHECK(w > 0, "cannot write ", path, ": ", w < 0 ? sys_error() : "no progress");
    p += w;
    n -= size_t(w);
  }
}

void read_all_at(int fd, void* dst, size_t n, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, std::min<size_t>(n, size_t(1) << 30), off_t(offset));
    if (r < 0 && errno == EINTR) continue;
    MT_CHECK(r >= 0, "cannot read ", path, ": ", sys_error());
    MT_CHECK(r > 0, "cannot read ", path, ": file is truncated (", n, " bytes missing at offset ",
             offset, ")");
    p += r;
    n -= size_t(r);
    offset += uint64_t(r);
  }
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MT_CHECK(fd >= 0, "cannot open ", path, " to sync it: ", sys_error());
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  errno = err;
  MT_CHECK(rc == 0, "cannot fsync ", path, ": ", sys_error());
}

void write_file_atomic(const std::string& path, std::string_view content) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  MT_CHECK(fd >= 0, "cannot create ", tmp, ": ", sys_error());
  try {
    write_all(fd, content.data(), content.size(), tmp);
    MT_CHECK(::fsync(fd) == 0, "cannot fsync ", tmp, ": ", sys_error());
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  MT_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename ", tmp, " to ", path, ": ",
           sys_error());
  fsync_path(fs::path(path).parent_path().string());
}

std::string read_small_file(const std::string& path, size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MT_CHECK(fd >= 0, "cannot open ", path, ": ", sys_error());
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || uint64_t(st.st_size) > max_bytes) {
    ::close(fd);
    MT_CHECK(false, path, " is not a regular file of at most ", max_bytes, " bytes");
  }
  std::string s(size_t(st.st_size), '\0');
  try {
    read_all_at(fd, s.data(), s.size(), 0, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return s;
}

void remove_tree(const std::string& path) {
  const fs::path p(path);
  if (!fs::exists(fs::symlink_status(p))) return;
  const fs::path trash =
      p.parent_path() / (".trash." + p.filename().string() + "." + std::to_string(::getpid()));
  std::error_code ec;
  fs::remove_all(trash, ec);
  fs::rename(p, trash, ec);
  MT_CHECK(!ec, "cannot move ", path, " aside to delete it: ", ec.message());
  fs::remove_all(trash, ec);
  MT_CHECK(!ec, "cannot delete ", trash.string(), ": ", ec.message());
}

}  // namespace mtron::checkpoint
