// defines: write_all, read_all_at, fsync_path, write_file_atomic, read_small_file, remove_tree
//
// POSIX file operations with the error handling checkpoints need: every failure throws
// mtron::Error naming the path and the system's reason, partial reads/writes and EINTR are
// retried, and durability is explicit (fsync of files and of the directories that name them).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace mtron::checkpoint {

// Writes all n bytes to fd (path names it in errors).
void write_all(int fd, const void* data, size_t n, const std::string& path);
// Reads exactly n bytes at `offset`; a short read (truncated file) throws.
void read_all_at(int fd, void* dst, size_t n, uint64_t offset, const std::string& path);
// fsync of a file or a directory (its entries: creations and renames inside it).
void fsync_path(const std::string& path);
// Replaces `path` atomically: writes path.tmp, fsyncs it, renames it over path, fsyncs the
// directory. A crash leaves either the old or the new content, never a mixture.
void write_file_atomic(const std::string& path, std::string_view content);
// The whole file, which must exist and be at most max_bytes long.
std::string read_small_file(const std::string& path, size_t max_bytes);
// Removes a directory tree crash-safely: renames it to a hidden name in the same parent first,
// so a crash midway never leaves a half-deleted directory under its real name.
void remove_tree(const std::string& path);

}  // namespace mtron::checkpoint
