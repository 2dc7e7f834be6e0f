// Stop handlers of `kiln train` (see signals.h): the handler only records the signal; the
// training loop reads it between steps.
#include "cli/signals.h"
#include <csignal>

namespace kiln::cli {

namespace {

volatile std::sig_atomic_t g_stop = 0;

extern "C" void on_stop_signal(int sig) {
  g_stop = sig;
  std::signal(sig, SIG_DFL);  // a second signal ends the process
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa = {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

int stop_requested() { return int(g_stop); }

}  // namespace kiln::cli
