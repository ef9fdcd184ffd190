// A small MPI program for fault_test.sh: each mode makes one kind of failure happen on some
// ranks, so the test can check how the whole job ends (exit code, message, time).
#include <fmt/core.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include "mtron/core/error.h"
#include "mtron/parallel/launch.h"

namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Marks the moment of failure on stdout, for the time-to-exit checks.
void stamp() {
  std::printf("failure at %lld ms\n", static_cast<long long>(now_ms()));
  std::fflush(stdout);
}

int body(mtron::Launch& l, const std::string& mode) {
  mtron::Comm& world = l.world();
  const int me = l.rank(), last = l.size() - 1;
  float x = 1;
  world.all_reduce(&x, 1);  // everyone is up
  if (mode == "ok") return x == float(l.size()) ? 0 : 3;
  if (mode == "all-error") {
    if (me == 0) stamp();
    MT_CHECK(false, "--tensor-model-parallel-size (3) does not divide the world (4)");
  }
  if (mode == "different-errors") MT_CHECK(false, "rank ", me, " read a bad file");
  if (mode == "one-error") {
    if (me == last) MT_CHECK(false, "bad input on rank ", me);
    world.all_reduce(&x, 1);  // waits for the failed rank forever
  }
  if (mode == "internal") {
    MT_ASSERT(me != 1, "broken invariant on rank ", me);
    world.all_reduce(&x, 1);
  }
  if (mode == "kill" || mode == "hang") {
    if (mode == "hang") l.set_collective_timeout(2);
    for (int step = 0;; ++step) {
      if (me == 1 && step == 20) {
        stamp();
        if (mode == "kill") std::raise(SIGKILL);
        std::this_thread::sleep_for(std::chrono::hours(1));  // skips the next collective
      }
      world.all_reduce(&x, 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  MT_CHECK(false, "unknown mode '", mode, "'");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  return mtron::run_main(argc, argv, [&](mtron::Launch& l) { return body(l, mode); });
}
