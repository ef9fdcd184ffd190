#include "mtron/comm/watchdog.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "mtron/core/log.h"

namespace mtron {

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::set_timeout(double seconds) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    timeout_s_ = seconds > 0 ? seconds : 0;
    if (timeout_s_ > 0 && !thread_.joinable()) thread_ = std::thread([this] { run(); });
  }
  cv_.notify_all();
}

double Watchdog::timeout() const {
  std::lock_guard<std::mutex> lock(mu_);
  return timeout_s_;
}

Watchdog::Scope::Scope(
    Watchdog* w, const char* op, const std::string* group, int group_size, int64_t bytes)
    : w_(w) {
  std::lock_guard<std::mutex> lock(w_->mu_);
  w_->active_ = true;
  w_->op_ = op;
  w_->group_ = group;
  w_->group_size_ = group_size;
  w_->bytes_ = bytes;
  w_->start_ = std::chrono::steady_clock::now();
}

Watchdog::Scope::~Scope() {
  std::lock_guard<std::mutex> lock(w_->mu_);
  w_->active_ = false;
}

void Watchdog::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    // Check a few times per timeout, at most once a second.
    const double period = timeout_s_ > 0 ? std::min(1.0, timeout_s_ / 4) : 1.0;
    cv_.wait_for(lock, std::chrono::duration<double>(period));
    if (stop_ || timeout_s_ <= 0 || !active_) continue;
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (waited <= timeout_s_) continue;
    const std::string group = group_ && !group_->empty() ? "'" + *group_ + "'" : "(unnamed)";
    log_error(
        "{} on group {} ({} ranks, {} bytes) has waited {:.0f} s, more than the timeout of "
        "{:.0f} s (--distributed-timeout-minutes): a rank of this group is stuck elsewhere, "
        "called a different collective, or died; aborting",
        op_, group, group_size_, bytes_, waited, timeout_s_);
    std::fflush(stdout);
    std::_Exit(1);
  }
}

}  // namespace mtron
