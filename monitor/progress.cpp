// The live progress display of the `kiln` command: a bar redrawn with "\r" on terminals,
// throttled plain lines (every 10%, at most one per 2 s) when the output is a log file.
#include "kiln/monitor/progress.h"
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <utility>

namespace kiln::monitor {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const long long t = std::llround(std::min(seconds, 1e12)), h = t / 3600, m = t / 60 % 60, s = t % 60;
  char buf[48];
  if (h > 0) std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", h, m, s);
  else std::snprintf(buf, sizeof buf, "%lld:%02lld", m, s);
  return buf;
}

std::string format_rate(double v) {
  if (!std::isfinite(v) || v < 0) return "-";
  char buf[48];
  if (v < 100) {
    std::snprintf(buf, sizeof buf, v < 10 ? "%.2f" : "%.1f", v);
    return buf;
  }
  std::snprintf(buf, sizeof buf, "%.0f", std::min(v, 1e18));
  std::string digits = buf, out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

namespace {
std::string format_loss(double v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  char buf[48];
  const double a = std::abs(v);
  std::snprintf(buf, sizeof buf, (a >= 1e4 || (a < 1e-3 && a > 0)) ? "%.3e" : "%.4f", v);
  return buf;
}
}  // namespace

ProgressBar::ProgressBar(std::string label, int64_t total, std::FILE* out, std::optional<bool> interactive)
    : label_(std::move(label)),
      total_(total),
      out_(out ? out : stdout),
      interactive_(interactive.value_or(::isatty(::fileno(out ? out : stdout)) != 0)),
      min_interval_(interactive_ ? 0.1 : 2.0),
      start_(std::chrono::steady_clock::now()),
      last_shown_s_(interactive_ ? -1e300 : 0.0) {}  // plain: the first line waits min_interval_ too

ProgressBar::~ProgressBar() { finish(); }

double ProgressBar::seconds_since_start() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string ProgressBar::status_line(int64_t done, double loss, double items_per_s, const char* unit,
                                     double elapsed_s, bool bar) const {
  const bool known = total_ > 0;
  std::string counts = std::to_string(done);
  if (known) {
    const std::string t = std::to_string(total_);
    counts = std::string(t.size() > counts.size() ? t.size() - counts.size() : 0, ' ') + counts + "/" + t;
    if (!bar) counts += " (" + std::to_string(std::clamp<int64_t>(done * 100 / total_, 0, 100)) + "%)";
  }
  std::string tail = "  " + counts + "  loss " + format_loss(loss) + "  " + format_rate(items_per_s) + " " +
                     (unit ? unit : "samples/s");
  if (known && done >= total_) tail += "  took " + format_duration(elapsed_s);
  else if (known) tail += "  ETA " + (done > 0 ? format_duration(elapsed_s / double(done) * double(total_ - done)) : "--:--");
  if (!bar || !known) return label_ + tail;
  const int width = std::clamp(99 - int(label_.size() + tail.size()) - 3, 8, 30);
  const int filled = int(std::clamp<int64_t>(done * width / total_, 0, width));
  return label_ + " [" + std::string(filled, '#') + std::string(width - filled, '-') + "]" + tail;
}

void ProgressBar::show(double now_s) {
  const std::string line = status_line(done_, loss_, rate_, unit_.c_str(), now_s, interactive_);
  if (interactive_) {
    std::string padded = "\r" + line;
    if (line.size() < last_len_) padded.append(last_len_ - line.size(), ' ');  // erase a longer old line
    std::fputs(padded.c_str(), out_);
    last_len_ = line.size();
    line_open_ = true;
  } else {
    std::fputs((line + "\n").c_str(), out_);
  }
  std::fflush(out_);
  last_shown_s_ = now_s;
  pending_ = false;
}

void ProgressBar::update(int64_t done, double loss, double items_per_s, const char* unit) {
  done_ = done, loss_ = loss, rate_ = items_per_s, unit_ = unit ? unit : "samples/s";
  pending_ = true;
  const double now = seconds_since_start();
  const bool last = total_ > 0 && done >= total_;
  const bool due = now - last_shown_s_ >= min_interval_;
  if (!last) final_shown_ = false;
  if (last) {
    if (!final_shown_) show(now);  // the last step once, however often it is reported
    pending_ = false;
    final_shown_ = true;
  } else if (interactive_) {
    if (due) show(now);
  } else {
    const int64_t decile = total_ > 0 ? done * 10 / total_ : last_decile_ + 1;
    if (decile > last_decile_ && due) {
      last_decile_ = decile;
      show(now);
    }
  }
}

void ProgressBar::finish() {
  if (pending_) show(seconds_since_start());
  if (line_open_) {
    std::fputc('\n', out_);
    std::fflush(out_);
    line_open_ = false;
    last_len_ = 0;
  }
}

}  // namespace kiln::monitor
