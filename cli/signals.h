// SIGTERM / SIGINT during `kiln train`: the first one asks the run to stop after the
// current step (it then saves and exits non-zero, so a preempted job loses at most one
// step); a second one ends the process at once, as the default action would.
#pragma once

namespace kiln::cli {

/// Installs the handlers (once per process).
void install_stop_handlers();
/// The signal that asked the run to stop (SIGTERM or SIGINT), or 0.
int stop_requested();

}  // namespace kiln::cli
