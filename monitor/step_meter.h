// The step timing of `kiln train`'s loops, one struct for both: throughput (samples or
// tokens per second) since a loop began and over the current window of metrics-CSV rows.
// The ETA is the progress bar's (monitor/progress.h), from the same steps.
#pragma once
#include <chrono>
#include <cstdint>

namespace kiln::monitor {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

/// Items per second over the optimizer steps of one loop (an epoch, or the steps between
/// two evaluations), each step `items_per_step` items (samples or tokens), counted from
/// step `first` (where the loop began: 0, or a resumed run's position), and over the
/// window since the last metrics row:
///   StepMeter meter(batch * accum, done);
///   bar.update(done, loss, meter.rate(done));
///   metrics.append(... meter.window_rate(window_steps) ...);  meter.new_window();
struct StepMeter {
  int64_t items_per_step;
  int64_t first;  ///< the step count when the loop began
  Clock::time_point start = Clock::now(), window_start = start;

  StepMeter(int64_t items_per_step, int64_t first) : items_per_step(items_per_step), first(first) {}
  /// Seconds since the loop began.
  double elapsed() const { return seconds_since(start); }
  /// Items per second since the loop began, at step count `done`.
  double rate(int64_t done) const { return rate(done, elapsed()); }
  /// The same over `secs` seconds (a loop's total time, read once for several figures).
  double rate(int64_t done, double secs) const { return double((done - first) * items_per_step) / secs; }
  /// Items per second over the `steps` steps since the window began.
  double window_rate(int64_t steps) const { return double(steps * items_per_step) / seconds_since(window_start); }
  /// Starts the next window (after a metrics row).
  void new_window() { window_start = Clock::now(); }
};

}  // namespace kiln::monitor
