// A tiny raster plotter for training curves and benchmark charts: line panels with nice
// 1/2/5 x 10^k ticks, a legend and a built-in 5x7 bitmap font, drawn into an RGB buffer
// and saved with the PNG writer of png.h. No anti-aliasing; lines are 2 px Bresenham.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::monitor {

/// Series::rgb value meaning "the panel's next palette colour".
inline constexpr uint32_t kAutoColor = 0xFFFFFFFFu;
/// The i-th colour (0xRRGGBB) of the default 10-colour palette, cycling.
uint32_t palette_color(size_t i);

/// One curve: points (x[i], y[i]) joined in order. A NaN/inf in x or y (or y <= 0 on a
/// log axis) leaves a gap; a point with no drawable neighbour is drawn as a dot. A
/// sparse series (under one point per 25 px) also gets a small marker on every point.
struct Series {
  std::string name;           // legend entry ("" = not listed)
  std::vector<double> x, y;   // same length
  uint32_t rgb = kAutoColor;  // 0xRRGGBB
};

/// One set of axes with its curves.
struct Panel {
  std::string title, x_label, y_label;
  std::vector<Series> series;
  bool log_y = false;                     // decades on y (values <= 0 are skipped)
  std::string empty_message = "no data";  // written in the axes when nothing is drawable
  /// Range hints: the axes also cover these values (NaN = none), e.g. y_min = 0, or the
  /// same x range for panels drawn side by side.
  double x_min = NAN, x_max = NAN, y_min = NAN, y_max = NAN;
};

/// Grouped bars: one slot per label, one bar per group in each slot (NaN = no bar).
struct BarChart {
  std::string title, y_label;
  std::vector<std::string> labels;
  std::vector<std::pair<std::string, std::vector<double>>> groups;  // name, one value per label
};

struct Rect {
  int x = 0, y = 0, w = 0, h = 0;
};

/// An RGB image (height rows of width*3 bytes) plus where each panel's data area lies.
struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
  std::vector<Rect> plot_areas;  // inside the frame of each panel / chart, in drawing order
};

/// A linear axis [lo, hi] with ticks at every multiple of `step` in it, `step` a nice
/// 1, 2 or 5 x 10^k. For a log axis lo/hi are log10 exponents and ticks are values.
struct Axis {
  double lo = 0, hi = 1, step = 1;
  std::vector<double> ticks;
  bool log = false;
};

/// The smallest 1, 2 or 5 x 10^k that is >= raw (raw > 0).
double nice_step(double raw);
/// An axis covering [lo, hi] (widened to multiples of the step) with at most about
/// max_ticks ticks. A degenerate or non-finite range gets a sensible one around it.
Axis nice_axis(double lo, double hi, int max_ticks = 6);
/// A log10 axis covering [lo, hi] (both > 0): ticks at whole decades (every `step`-th
/// decade when there are many), plus 2x and 5x ticks when it spans at most two decades.
Axis log_axis(double lo, double hi);
/// A tick label with as many decimals as the step needs: "0.25" is never produced, "0.2" is.
std::string format_tick(double v, double step);

/// Width in pixels of `s` in the built-in font (6 px per character times scale, less
/// the last gap); glyphs are 9 rows tall (7 above the baseline, 2 for descenders).
int text_width(std::string_view s, int scale = 1);
/// Draws `s` with its top-left corner at (x, y); characters outside 32..126 draw as '?'.
void draw_text(Image& img, int x, int y, std::string_view s, uint32_t rgb, int scale = 1);

/// Renders the panels on a white width x height image in a grid `columns` wide
/// (side by side for two panels), with an optional figure title on top.
/// Throws kiln::Error for no panels, a series whose x and y differ in length, or a
/// size too small to draw in.
Image render_panels(const std::vector<Panel>& panels, int width = 900, int height = 400,
                    const std::string& title = "", int columns = 2);
/// render_panels() saved as a PNG at `path` (atomically).
void write_plot_png(const std::string& path, const std::vector<Panel>& panels, int width = 900,
                    int height = 400, const std::string& title = "");

/// Renders a grouped bar chart (y axis from 0, values written above the bars, "n/a"
/// where a value is NaN).
Image render_bar_chart(const BarChart& chart, int width = 900, int height = 420);
void write_bar_chart_png(const std::string& path, const BarChart& chart, int width = 900,
                         int height = 420);

}  // namespace kiln::monitor
