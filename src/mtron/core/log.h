// defines: log_init, log_info, log_warn, log_error, log_plain, log_rank
//
// Rank-prefixed logging to stderr: "[mtron r3/8] message". Training's per-iteration line keeps
// Megatron's exact format (train/metrics.h) and goes through log_plain, without a prefix, so
// existing log tooling and `mtron doctor` read it unchanged.
#pragma once

#include <fmt/core.h>

#include <string>

namespace mtron {

enum class LogLevel { kDebug, kInfo, kWarn, kError };

void log_init(int rank, int world, LogLevel level = LogLevel::kInfo);
int log_rank();
void log_write(LogLevel level, const std::string& msg);
void log_plain(const std::string& line);  // stdout, no prefix, flushed

template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
  log_write(LogLevel::kInfo, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_warn(fmt::format_string<Args...> f, Args&&... args) {
  log_write(LogLevel::kWarn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_error(fmt::format_string<Args...> f, Args&&... args) {
  log_write(LogLevel::kError, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_debug(fmt::format_string<Args...> f, Args&&... args) {
  log_write(LogLevel::kDebug, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace mtron
