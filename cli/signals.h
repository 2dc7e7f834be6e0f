// SIGTERM / SIGINT / SIGUSR1 / SIGUSR2 during `kiln train`: the first one asks the run to
// stop after the current step (it then saves and exits with 128 + the signal, so a
// preempted job loses at most one step); a second one ends the process at once, as the
// default action would. SIGUSR1 and SIGUSR2 are there for mpirun, which forwards them to
// every rank as they are, where a SIGTERM to mpirun reaches the ranks as SIGTERM followed by
// SIGKILL a second later (Open MPI's odls_base_sigkill_timeout), too soon for a step and a save.
#pragma once
#include <csignal>

namespace kiln::cli {

/// The stop signals, in the order ranks agree on one when several were received.
inline constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGUSR1, SIGUSR2};

/// Installs the handlers (once per process).
void install_stop_handlers();
/// The signal that asked the run to stop (one of kStopSignals), or 0.
int stop_requested();
/// "SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2".
const char* signal_name(int sig);

}  // namespace kiln::cli
