// The metrics log of a `kiln` run: one CSV row per logged step (flushed as it is written,
// continued when a run resumes) and a PNG plot of the loss and accuracy curves beside it.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>
#include "kiln/monitor/plot.h"

namespace kiln::monitor {

/// One CSV row. A NaN is written as "nan" (a diverged value is never hidden); an absent
/// accuracy or validation loss (between evaluations) as an empty field.
struct MetricsRow {
  int64_t step = 0;
  int64_t epoch = 0;
  double loss = NAN;         // mean training loss of the steps taken since the last row
  double lr = NAN;
  double items_per_s = NAN;  // column samples_per_s
  std::optional<double> accuracy = std::nullopt;  // a fraction in [0, 1]; the plot shows it as a percentage
  std::optional<double> val_loss = std::nullopt;
  int64_t skipped = 0;       // steps skipped since the last row (non-finite loss or gradients)
};

/// The CSV header every metrics log starts with.
inline constexpr const char* kMetricsHeader = "step,epoch,loss,lr,samples_per_s,accuracy,val_loss,skipped";

/// One CSV line (no newline) of `row`: integers, then %.6g numbers ("nan", "inf").
std::string format_metrics_row(const MetricsRow& row);
/// Reads a metrics CSV; kiln::Error naming the file (and line) for another header or a
/// malformed row. An unfinished last line (no newline: a run killed mid-write) is ignored.
std::vector<MetricsRow> read_metrics_csv(const std::string& path);
/// The panels of the metrics plot: "loss" (train loss, and val loss where present, vs
/// step) and "accuracy" in % vs step, left out when no row has an accuracy.
std::vector<Panel> metrics_panels(const std::vector<MetricsRow>& rows);

/// The CSV log of one run.
class MetricsLog {
 public:
  /// Creates `csv_path` (truncating it) with the header. With `append` (a resumed run)
  /// an existing log is continued instead: its rows with step > resume_step are dropped
  /// (the file is rewritten atomically), so steps redone after the resume point are not
  /// duplicated; resume_step 0 keeps nothing. A missing or empty file is created. An empty
  /// path keeps the rows in memory only (the ranks other than 0 of a data-parallel run).
  /// kiln::Error naming the file when it has another header or cannot be opened.
  MetricsLog(std::string csv_path, bool append = false, int64_t resume_step = 0);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  /// Writes one line and flushes it.
  void append(const MetricsRow& row);
  /// All rows, those read back from a continued log included.
  const std::vector<MetricsRow>& rows() const { return rows_; }
  const std::string& path() const { return path_; }
  /// The plot's path: the CSV path with ".png" in place of ".csv" (or appended).
  std::string plot_path() const;
  /// Draws metrics_panels(rows()) under `title` into plot_path() (atomically); returns it.
  std::string write_plot(const std::string& title) const;

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  std::vector<MetricsRow> rows_;
};

}  // namespace kiln::monitor
