#include "mtron/data/progress.h"

#include <unistd.h>

#include <cstdio>

#include "mtron/core/timer.h"

namespace mtron::data {

Progress::Progress(Style style, std::string label, uint64_t total_bytes, int64_t log_interval)
    : style_(style),
      label_(std::move(label)),
      total_(total_bytes),
      interval_(log_interval > 0 ? log_interval : 1000),
      next_line_at_(interval_),
      start_(now_seconds()) {}

Progress::Style Progress::auto_style() {
  return isatty(STDERR_FILENO) ? Style::kBar : Style::kLines;
}

void Progress::update(int64_t items, uint64_t bytes, uint64_t file_bytes) {
  if (style_ == Style::kNone) return;
  const double now = now_seconds();
  const double dt = std::max(now - start_, 1e-9);
  if (style_ == Style::kLines) {
    if (items < next_line_at_) return;
    next_line_at_ = (items / interval_ + 1) * interval_;
    std::fprintf(stderr, "%s: processed %lld documents (%.0f docs/s, %.2f MB/s)\n", label_.c_str(),
                 (long long)items, items / dt, bytes / dt / 1e6);
    return;
  }
  if (now - last_draw_ < 0.2) return;
  last_draw_ = now;
  const double frac = total_ ? std::min(1.0, double(file_bytes) / double(total_)) : 0.0;
  const int width = 30, filled = int(frac * width);
  char bar[width + 1];
  for (int i = 0; i < width; ++i) bar[i] = i < filled ? '=' : i == filled ? '>' : ' ';
  bar[width] = '\0';
  const double eta = frac > 0 ? dt * (1 - frac) / frac : 0;
  std::fprintf(stderr, "\r\033[K%s [%s] %5.1f%% %lld docs  %.0f docs/s  %.2f MB/s  ETA %d:%02d",
               label_.c_str(), bar, 100 * frac, (long long)items, items / dt, bytes / dt / 1e6,
               int(eta) / 60, int(eta) % 60);
  std::fflush(stderr);
  drawn_ = true;
}

void Progress::finish() {
  if (style_ == Style::kBar && drawn_) {
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
  }
}

}  // namespace mtron::data
