// The live progress display of the `kiln` command: one line redrawn in place on a
// terminal (bar, loss, throughput, ETA), or short plain lines when output goes to a log.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace kiln::monitor {

/// "0:42", "12:05", "1:02:03" (seconds rounded); "--:--" for a negative or non-finite time.
std::string format_duration(double seconds);
/// A throughput for people: "2,345" (>= 100, thousands separated), "12.5", "0.42"; "-" if unknown.
std::string format_rate(double per_second);

/// Progress of one loop (an epoch) of `total` steps.
///
/// On a terminal (interactive) update() redraws one line in place with "\r", at most
/// about 10 times a second (the last step is always drawn):
///   epoch 1/3 [#########-----------]  412/938  loss 0.4321  2,345 samples/s  ETA 0:42
/// Otherwise it prints plain lines, so logs stay short: one at the first update past
/// each 10% of `total`, but never two within 2 s (a skipped mark is printed at a later
/// update), and always the last step, where "took m:ss" replaces the ETA:
///   epoch 1/3  412/938 (43%)  loss 0.4321  2,345 samples/s  ETA 0:42
/// A `total` <= 0 means unknown: no bar, percentage or ETA, plain lines every 2 s.
/// The ETA is elapsed / done * (total - done), the average rate since construction.
/// Call finish() (or destroy the bar) before logging anything else to the same stream.
class ProgressBar {
 public:
  /// `interactive` defaults to isatty(fileno(out)).
  ProgressBar(std::string label, int64_t total, std::FILE* out = stdout,
              std::optional<bool> interactive = std::nullopt);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  /// Reports `done` of `total` steps with the latest loss and throughput (`unit`, e.g.
  /// "samples/s" or "tok/s"); draws or prints as described above.
  void update(int64_t done, double loss, double items_per_s, const char* unit = "samples/s");
  /// Shows the last reported state if it was skipped and, on a terminal, ends the line.
  void finish();

  /// Minimum seconds between two drawn lines (default 0.1 on a terminal, 2 otherwise).
  void set_min_interval(double seconds) { min_interval_ = seconds; }
  bool interactive() const { return interactive_; }
  /// The text of one display line (no "\r"/"\n"), `bar` for the terminal form; it fits
  /// in 100 columns unless the label is very long. Public so tests can check it.
  std::string status_line(int64_t done, double loss, double items_per_s, const char* unit,
                          double elapsed_s, bool bar) const;

 private:
  void show(double now_s);
  double seconds_since_start() const;

  std::string label_;
  int64_t total_;
  std::FILE* out_;
  bool interactive_;
  double min_interval_;
  std::chrono::steady_clock::time_point start_;
  double last_shown_s_;  // when a line was last drawn / printed (seconds since start)
  // The last reported state, and whether it has been shown.
  int64_t done_ = 0;
  double loss_ = 0, rate_ = 0;
  std::string unit_ = "samples/s";
  bool pending_ = false;
  bool final_shown_ = false;      // the line of the last step has been shown
  int64_t last_decile_ = 0;       // plain mode: the 10% mark of the last printed line
  size_t last_len_ = 0;           // terminal mode: length of the line on screen
  bool line_open_ = false;        // terminal mode: a line is drawn and not yet ended
};

}  // namespace kiln::monitor
