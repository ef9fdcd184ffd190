// defines: Watchdog
//
// Turns a collective that would hang forever into a clear error. The communicating thread marks
// each blocking call (and each Request::wait) with a Scope; a background thread checks once a
// second and, when one call has been waiting longer than the timeout, prints which operation on
// which group has waited how long, then ends the process with exit code 1 (std::_Exit: no MPI
// call from this thread, as MPI_THREAD_FUNNELED requires). The launcher (mpirun, or srun with
// --kill-on-bad-exit) then ends the other ranks. Megatron's equivalent is the NCCL watchdog
// driven by --distributed-timeout-minutes (default 10).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace mtron {

class Watchdog {
 public:
  Watchdog() = default;
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // seconds <= 0 turns the watchdog off. The thread starts on the first positive timeout.
  void set_timeout(double seconds);
  double timeout() const;

  // Marks one operation in flight on the calling thread. op must be a string literal; group
  // must outlive the scope (it is the Comm's name, and the Comm is busy in this call).
  class Scope {
   public:
    Scope(Watchdog* w, const char* op, const std::string* group, int group_size, int64_t bytes);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Watchdog* w_;
  };

 private:
  void run();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
  bool stop_ = false;
  double timeout_s_ = 0;
  // The operation in flight (one: only one thread communicates).
  bool active_ = false;
  const char* op_ = nullptr;
  const std::string* group_ = nullptr;
  int group_size_ = 0;
  int64_t bytes_ = 0;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace mtron
