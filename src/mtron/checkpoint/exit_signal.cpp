#include "mtron/checkpoint/exit_signal.h"

#include <csignal>

#include "mtron/core/error.h"

namespace mtron::checkpoint {

namespace {

// A signal handler can only reach process-wide state: these are the one exception to "no
// globals", written only by the handler and by the (single) ExitSignalHandler.
volatile std::sig_atomic_t g_received = 0;
bool g_installed = false;
struct sigaction g_old_term, g_old_int;

extern "C" void record_signal(int sig) {
  if (g_received == 0) g_received = sig;
}

}  // namespace

ExitSignalHandler::ExitSignalHandler() {
  MT_ASSERT(!g_installed, "only one ExitSignalHandler may be installed");
  g_received = 0;
  struct sigaction sa {};
  sa.sa_handler = record_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, &g_old_term);
  sigaction(SIGINT, &sa, &g_old_int);
  g_installed = true;
}

ExitSignalHandler::~ExitSignalHandler() {
  sigaction(SIGTERM, &g_old_term, nullptr);
  sigaction(SIGINT, &g_old_int, nullptr);
  g_installed = false;
}

int ExitSignalHandler::received() const {
  return int(g_received);
}

}  // namespace mtron::checkpoint
