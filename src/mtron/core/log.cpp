#include "mtron/core/log.h"

#include <cstdio>
#include <mutex>

namespace mtron {
namespace {
int g_rank = 0;
int g_world = 1;
LogLevel g_level = LogLevel::kInfo;
std::mutex g_mutex;
}  // namespace

void log_init(int rank, int world, LogLevel level) {
  g_rank = rank;
  g_world = world;
  g_level = level;
}
int log_rank() {
  return g_rank;
}

void log_write(LogLevel level, const std::string& msg) {
  if (level < g_level) return;
  const char* tag = level == LogLevel::kWarn    ? "warning: "
                    : level == LogLevel::kError ? "error: "
                                                : "";
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "[mtron r%d/%d] %s%s\n", g_rank, g_world, tag, msg.c_str());
  std::fflush(stderr);
}

void log_plain(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fputs(line.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

}  // namespace mtron
