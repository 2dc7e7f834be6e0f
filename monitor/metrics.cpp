// The metrics log of a `kiln` run: CSV writing/reading (resume truncation through a
// temp file + rename) and the loss/accuracy plot drawn with plot.h.
#include "kiln/monitor/metrics.h"
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>
#include "kiln/monitor/png.h"
#include "kiln/core/error.h"
#include "kiln/core/file_io.h"

namespace kiln::monitor {

namespace {

// The header of logs written before the "skipped" column (read as skipped = 0).
constexpr const char* kMetricsHeaderV1 = "step,epoch,loss,lr,samples_per_s,accuracy,val_loss";

std::string num(double v) {
  if (std::isnan(v)) return "nan";  // %g would print "-nan" for some NaNs
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// Parses one data line; false when it is malformed.
bool parse_row(const std::string& line, MetricsRow& row) {
  std::vector<std::string> f(1);
  for (char c : line) {
    if (c == ',') f.emplace_back();
    else if (c != '\r') f.back() += c;
  }
  if (f.size() != 7 && f.size() != 8) return false;
  auto integer = [](const std::string& s, int64_t& out) {
    char* end = nullptr;
    errno = 0;
    out = std::strtoll(s.c_str(), &end, 10);
    return !s.empty() && errno == 0 && *end == '\0';
  };
  auto real = [](const std::string& s, double& out) {
    if (s.empty()) return out = NAN, true;
    char* end = nullptr;
    out = std::strtod(s.c_str(), &end);
    return *end == '\0';
  };
  auto optional = [&](const std::string& s, std::optional<double>& out) {
    double v = NAN;
    if (!real(s, v)) return false;
    if (!s.empty()) out = v;
    return true;
  };
  return integer(f[0], row.step) && integer(f[1], row.epoch) && real(f[2], row.loss) && real(f[3], row.lr) &&
         real(f[4], row.items_per_s) && optional(f[5], row.accuracy) && optional(f[6], row.val_loss) &&
         (f.size() == 7 || integer(f[7], row.skipped));
}

}  // namespace

std::string format_metrics_row(const MetricsRow& r) {
  return std::to_string(r.step) + "," + std::to_string(r.epoch) + "," + num(r.loss) + "," + num(r.lr) + "," +
         num(r.items_per_s) + "," + (r.accuracy ? num(*r.accuracy) : "") + "," + (r.val_loss ? num(*r.val_loss) : "") +
         "," + std::to_string(r.skipped);
}

std::vector<MetricsRow> read_metrics_csv(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file_bytes(path);
  const std::string text(bytes.begin(), bytes.end());
  std::vector<MetricsRow> rows;
  size_t pos = 0;
  for (int line_no = 1; pos < text.size(); ++line_no) {
    const size_t nl = text.find('\n', pos);
    std::string line = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? text.size() : nl + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line_no == 1) {
      KILN_CHECK(line == kMetricsHeader || line == kMetricsHeaderV1, "metrics: '", path, "' is not a kiln metrics log: its header is '",
                 line.substr(0, 120), "', expected '", kMetricsHeader, "'");
      continue;
    }
    if (line.empty()) continue;
    MetricsRow row;
    if (parse_row(line, row)) rows.push_back(row);
    else if (nl != std::string::npos)  // an unfinished last line is a killed write; anything else is an error
      KILN_FAIL("metrics: '", path, "' line ", line_no, ": expected 7 comma-separated fields (", kMetricsHeader,
                "), got '", line.substr(0, 120), "'");
  }
  return rows;
}

std::vector<Panel> metrics_panels(const std::vector<MetricsRow>& rows) {
  Series train{"train loss", {}, {}, palette_color(0)}, val{"val loss", {}, {}, palette_color(1)};
  Series acc{"accuracy", {}, {}, palette_color(2)};
  // Only measured points go in (evaluations are sparse), so the curves join them.
  for (const MetricsRow& r : rows) {
    if (std::isfinite(r.loss)) train.x.push_back(double(r.step)), train.y.push_back(r.loss);
    if (r.val_loss && std::isfinite(*r.val_loss)) val.x.push_back(double(r.step)), val.y.push_back(*r.val_loss);
    if (r.accuracy && std::isfinite(*r.accuracy)) acc.x.push_back(double(r.step)), acc.y.push_back(100 * *r.accuracy);
  }
  std::vector<Panel> panels(1);
  panels[0] = {"loss", "step", "loss", {train}};
  if (!val.x.empty()) panels[0].series.push_back(val);
  if (!acc.x.empty()) panels.push_back({"accuracy", "step", "accuracy (%)", {acc}});
  for (const MetricsRow& r : rows)  // the same steps on both x axes
    for (Panel& p : panels)
      p.x_min = std::fmin(p.x_min, double(r.step)), p.x_max = std::fmax(p.x_max, double(r.step));
  return panels;
}

MetricsLog::MetricsLog(std::string csv_path, bool append, int64_t resume_step) : path_(std::move(csv_path)) {
  if (path_.empty()) return;  // a log that keeps its rows but writes nothing
  remove_stale_temp_files(path_);  // what a kill during a write of the CSV or the plot left
  remove_stale_temp_files(plot_path());
  std::error_code ec;
  const bool exists = std::filesystem::exists(path_, ec) && std::filesystem::file_size(path_, ec) > 0 && !ec;
  if (append && exists) {
    rows_ = read_metrics_csv(path_);
    std::vector<MetricsRow> kept;
    for (const MetricsRow& r : rows_)
      if (r.step <= resume_step) kept.push_back(r);
    // Rewrite what is kept (also drops an unfinished last line); values print as they were read.
    std::string text = std::string(kMetricsHeader) + "\n";
    for (const MetricsRow& r : kept) text += format_metrics_row(r) + "\n";
    write_file_atomic(path_, text);
    rows_ = std::move(kept);
    file_ = std::fopen(path_.c_str(), "a");
  } else {
    file_ = std::fopen(path_.c_str(), "w");
    if (file_) std::fputs((std::string(kMetricsHeader) + "\n").c_str(), file_), std::fflush(file_);
  }
  KILN_CHECK(file_ != nullptr, "metrics: cannot open '", path_, "' for writing: ", std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::append(const MetricsRow& row) {
  rows_.push_back(row);
  if (path_.empty()) return;
  const std::string line = format_metrics_row(row) + "\n";
  const bool ok = std::fputs(line.c_str(), file_) >= 0 && std::fflush(file_) == 0;
  KILN_CHECK(ok, "metrics: cannot write to '", path_, "': ", std::strerror(errno));
}

std::string MetricsLog::plot_path() const {
  const size_t n = path_.size();
  if (n >= 4 && path_.compare(n - 4, 4, ".csv") == 0) return path_.substr(0, n - 4) + ".png";
  return path_ + ".png";
}

std::string MetricsLog::write_plot(const std::string& title) const {
  if (path_.empty()) return "";
  const std::vector<Panel> panels = metrics_panels(rows_);
  const std::string png = plot_path();
  const Image img = render_panels(panels, 540 * int(panels.size()), 420, title);
  write_png(png, img.rgb.data(), img.width, img.height);
  return png;
}

}  // namespace kiln::monitor
