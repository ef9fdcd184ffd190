// defines: Timer, now_seconds
#pragma once

#include <chrono>

namespace mtron {

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Accumulating stopwatch: start()/stop() pairs add to seconds().
class Timer {
 public:
  void start() { t0_ = now_seconds(); }
  void stop() { total_ += now_seconds() - t0_; }
  double seconds() const { return total_; }
  void reset() { total_ = 0; }

 private:
  double t0_ = 0, total_ = 0;
};

}  // namespace mtron
