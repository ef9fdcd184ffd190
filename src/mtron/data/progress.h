// defines: Progress
//
// Progress report for long jobs: on a terminal, a bar redrawn in place (at most 5 times a
// second) with percent, rate and ETA; otherwise plain lines every `log_interval` items, which
// read well in CI logs and batch job files.
#pragma once

#include <cstdint>
#include <string>

namespace mtron::data {

class Progress {
 public:
  enum class Style { kBar, kLines, kNone };
  // `total_bytes`: the size of the input (for percent and ETA), 0 if unknown.
  Progress(Style style, std::string label, uint64_t total_bytes, int64_t log_interval);

  // items: documents done; bytes: uncompressed input bytes done; file_bytes: input file bytes
  // consumed (compressed, for the percent).
  void update(int64_t items, uint64_t bytes, uint64_t file_bytes);
  // Clears the bar (the caller prints totals next).
  void finish();

  static Style auto_style();  // bar when stderr is a terminal, lines otherwise

 private:
  Style style_;
  std::string label_;
  uint64_t total_;
  int64_t interval_;
  int64_t next_line_at_;
  double start_, last_draw_ = 0;
  bool drawn_ = false;
};

}  // namespace mtron::data
