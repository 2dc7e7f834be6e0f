// The raster plotter of plot.h: a clipped canvas (pixels, rectangles, 2 px Bresenham lines,
// bitmap text), nice-tick axes, and the two layouts built on them (line panels, grouped bars).
#include "kiln/monitor/plot.h"
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include "kiln/monitor/png.h"
#include "kiln/core/error.h"

namespace kiln::monitor {

namespace {

// The 5x7 font of kiln, ASCII 32..126: 9 rows per glyph (rows 7-8 hold the descenders of
// g j p q y , and _), each row a 5-bit mask whose bit 4 is the leftmost column.
const uint8_t kFont[95][9] = {
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},  // space
    {0x04, 0x04, 0x04, 0x04, 0x04, 0x00, 0x04, 0x00, 0x00},  // !
    {0x0A, 0x0A, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},  // "
    {0x0A, 0x0A, 0x1F, 0x0A, 0x1F, 0x0A, 0x0A, 0x00, 0x00},  // #
    {0x04, 0x0F, 0x14, 0x0E, 0x05, 0x1E, 0x04, 0x00, 0x00},  // $
    {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03, 0x00, 0x00},  // %
    {0x0C, 0x12, 0x14, 0x08, 0x15, 0x12, 0x0D, 0x00, 0x00},  // &
    {0x04, 0x04, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},  // '
    {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02, 0x00, 0x00},  // (
    {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08, 0x00, 0x00},  // )
    {0x00, 0x04, 0x15, 0x0E, 0x15, 0x04, 0x00, 0x00, 0x00},  // *
    {0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00, 0x00, 0x00},  // +
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C, 0x08, 0x00},  // ,
    {0x00, 0x00, 0x00, 0x0E, 0x00, 0x00, 0x00, 0x00, 0x00},  // -
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C, 0x00, 0x00},  // .
    {0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00, 0x00, 0x00},  // /
    {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E, 0x00, 0x00},  // 0
    {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E, 0x00, 0x00},  // 1
    {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F, 0x00, 0x00},  // 2
    {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E, 0x00, 0x00},  // 3
    {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02, 0x00, 0x00},  // 4
    {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E, 0x00, 0x00},  // 5
    {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E, 0x00, 0x00},  // 6
    {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08, 0x00, 0x00},  // 7
    {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E, 0x00, 0x00},  // 8
    {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C, 0x00, 0x00},  // 9
    {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00, 0x00, 0x00},  // :
    {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x08, 0x00, 0x00},  // ;
    {0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02, 0x00, 0x00},  // <
    {0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00, 0x00, 0x00},  // =
    {0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08, 0x00, 0x00},  // >
    {0x0E, 0x11, 0x01, 0x02, 0x04, 0x00, 0x04, 0x00, 0x00},  // ?
    {0x0E, 0x11, 0x17, 0x15, 0x17, 0x10, 0x0E, 0x00, 0x00},  // @
    {0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11, 0x00, 0x00},  // A
    {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E, 0x00, 0x00},  // B
    {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E, 0x00, 0x00},  // C
    {0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C, 0x00, 0x00},  // D
    {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F, 0x00, 0x00},  // E
    {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10, 0x00, 0x00},  // F
    {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F, 0x00, 0x00},  // G
    {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11, 0x00, 0x00},  // H
    {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E, 0x00, 0x00},  // I
    {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C, 0x00, 0x00},  // J
    {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11, 0x00, 0x00},  // K
    {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F, 0x00, 0x00},  // L
    {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11, 0x00, 0x00},  // M
    {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11, 0x00, 0x00},  // N
    {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E, 0x00, 0x00},  // O
    {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10, 0x00, 0x00},  // P
    {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D, 0x00, 0x00},  // Q
    {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11, 0x00, 0x00},  // R
    {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E, 0x00, 0x00},  // S
    {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x00, 0x00},  // T
    {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E, 0x00, 0x00},  // U
    {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04, 0x00, 0x00},  // V
    {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A, 0x00, 0x00},  // W
    {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11, 0x00, 0x00},  // X
    {0x11, 0x11, 0x0A, 0x04, 0x04, 0x04, 0x04, 0x00, 0x00},  // Y
    {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F, 0x00, 0x00},  // Z
    {0x0E, 0x08, 0x08, 0x08, 0x08, 0x08, 0x0E, 0x00, 0x00},  // [
    {0x00, 0x10, 0x08, 0x04, 0x02, 0x01, 0x00, 0x00, 0x00},  // backslash
    {0x0E, 0x02, 0x02, 0x02, 0x02, 0x02, 0x0E, 0x00, 0x00},  // ]
    {0x04, 0x0A, 0x11, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},  // ^
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F, 0x00},  // _
    {0x08, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},  // `
    {0x00, 0x00, 0x0E, 0x01, 0x0F, 0x11, 0x0F, 0x00, 0x00},  // a
    {0x10, 0x10, 0x1E, 0x11, 0x11, 0x11, 0x1E, 0x00, 0x00},  // b
    {0x00, 0x00, 0x0E, 0x10, 0x10, 0x11, 0x0E, 0x00, 0x00},  // c
    {0x01, 0x01, 0x0F, 0x11, 0x11, 0x11, 0x0F, 0x00, 0x00},  // d
    {0x00, 0x00, 0x0E, 0x11, 0x1F, 0x10, 0x0E, 0x00, 0x00},  // e
    {0x06, 0x09, 0x08, 0x1C, 0x08, 0x08, 0x08, 0x00, 0x00},  // f
    {0x00, 0x00, 0x0F, 0x11, 0x11, 0x11, 0x0F, 0x01, 0x0E},  // g
    {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11, 0x00, 0x00},  // h
    {0x04, 0x00, 0x0C, 0x04, 0x04, 0x04, 0x0E, 0x00, 0x00},  // i
    {0x02, 0x00, 0x06, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C},  // j
    {0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12, 0x00, 0x00},  // k
    {0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E, 0x00, 0x00},  // l
    {0x00, 0x00, 0x1A, 0x15, 0x15, 0x15, 0x15, 0x00, 0x00},  // m
    {0x00, 0x00, 0x16, 0x19, 0x11, 0x11, 0x11, 0x00, 0x00},  // n
    {0x00, 0x00, 0x0E, 0x11, 0x11, 0x11, 0x0E, 0x00, 0x00},  // o
    {0x00, 0x00, 0x1E, 0x11, 0x11, 0x11, 0x1E, 0x10, 0x10},  // p
    {0x00, 0x00, 0x0F, 0x11, 0x11, 0x11, 0x0F, 0x01, 0x01},  // q
    {0x00, 0x00, 0x16, 0x19, 0x10, 0x10, 0x10, 0x00, 0x00},  // r
    {0x00, 0x00, 0x0F, 0x10, 0x0E, 0x01, 0x1E, 0x00, 0x00},  // s
    {0x08, 0x08, 0x1C, 0x08, 0x08, 0x09, 0x06, 0x00, 0x00},  // t
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x13, 0x0D, 0x00, 0x00},  // u
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x0A, 0x04, 0x00, 0x00},  // v
    {0x00, 0x00, 0x11, 0x11, 0x15, 0x15, 0x0A, 0x00, 0x00},  // w
    {0x00, 0x00, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x00, 0x00},  // x
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x11, 0x0F, 0x01, 0x0E},  // y
    {0x00, 0x00, 0x1F, 0x02, 0x04, 0x08, 0x1F, 0x00, 0x00},  // z
    {0x03, 0x04, 0x04, 0x08, 0x04, 0x04, 0x03, 0x00, 0x00},  // {
    {0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x00, 0x00},  // |
    {0x18, 0x04, 0x04, 0x02, 0x04, 0x04, 0x18, 0x00, 0x00},  // }
    {0x00, 0x00, 0x08, 0x15, 0x02, 0x00, 0x00, 0x00, 0x00},  // ~
};

constexpr int kAdvance = 6, kGlyphRows = 9;  // text metrics at scale 1
constexpr uint32_t kWhite = 0xFFFFFF, kGrid = 0xE6E6E6, kFrame = 0x505050, kInk = 0x202020,
                   kMuted = 0x888888;

// Draws into an Image, dropping everything outside the clip rectangle.
class Canvas {
 public:
  explicit Canvas(Image& img) : img_(img) { reset_clip(); }
  void set_clip(Rect r) { clip_ = r; }
  void reset_clip() { clip_ = {0, 0, img_.width, img_.height}; }

  void pixel(int x, int y, uint32_t c) {
    if (x < clip_.x || y < clip_.y || x >= clip_.x + clip_.w || y >= clip_.y + clip_.h) return;
    if (x < 0 || y < 0 || x >= img_.width || y >= img_.height) return;
    uint8_t* p = &img_.rgb[(size_t(y) * img_.width + x) * 3];
    p[0] = uint8_t(c >> 16), p[1] = uint8_t(c >> 8), p[2] = uint8_t(c);
  }
  uint32_t at(int x, int y) const {
    const uint8_t* p = &img_.rgb[(size_t(y) * img_.width + x) * 3];
    return uint32_t(p[0]) << 16 | uint32_t(p[1]) << 8 | p[2];
  }
  void fill(int x, int y, int w, int h, uint32_t c) {
    for (int j = y; j < y + h; ++j)
      for (int i = x; i < x + w; ++i) pixel(i, j, c);
  }
  void frame(Rect r, uint32_t c) {
    fill(r.x, r.y, r.w, 1, c), fill(r.x, r.y + r.h - 1, r.w, 1, c);
    fill(r.x, r.y, 1, r.h, c), fill(r.x + r.w - 1, r.y, 1, r.h, c);
  }
  // Bresenham's line with a 2x2 brush, so the line is 2 px wide and has no holes.
  void line(int x0, int y0, int x1, int y1, uint32_t c) {
    const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
    const int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    for (int err = dx + dy;;) {
      fill(x0, y0, 2, 2, c);
      if (x0 == x1 && y0 == y1) break;
      const int e2 = 2 * err;
      if (e2 >= dy) err += dy, x0 += sx;
      if (e2 <= dx) err += dx, y0 += sy;
    }
  }
  void dot(int x, int y, uint32_t c, int radius) {
    for (int j = -radius; j <= radius; ++j)
      for (int i = -radius; i <= radius; ++i)
        if (i * i + j * j <= radius * radius + 1) pixel(x + i, y + j, c);
  }
  // Text with its top-left corner at (x, y); `vertical` turns it 90 degrees
  // counter-clockwise (read bottom to top) with (x, y) its bottom-left corner.
  void text(int x, int y, std::string_view s, uint32_t c, int scale = 1, bool vertical = false) {
    for (size_t i = 0; i < s.size(); ++i) {
      const unsigned char ch = static_cast<unsigned char>(s[i]);
      const uint8_t* glyph = kFont[(ch < 32 || ch > 126 ? '?' : ch) - 32];
      for (int r = 0; r < kGlyphRows; ++r)
        for (int col = 0; col < 5; ++col) {
          if (!(glyph[r] & (0x10 >> col))) continue;
          const int u = int(i) * kAdvance + col;  // pixels along the text
          if (vertical) fill(x + r * scale, y - (u + 1) * scale + 1, scale, scale, c);
          else fill(x + u * scale, y + r * scale, scale, scale, c);
        }
    }
  }

 private:
  Image& img_;
  Rect clip_;
};

Image blank_image(int width, int height, const char* who) {
  KILN_CHECK(width >= 120 && height >= 100 && width <= 16384 && height <= 16384, who,
             ": image size must be 120..16384 x 100..16384 pixels, got ", width, " x ", height);
  Image img;
  img.width = width, img.height = height;
  img.rgb.assign(size_t(width) * height * 3, 0xFF);
  return img;
}

std::string printf_g(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

// Where value v lies on the axis, 0 at lo and 1 at hi.
double axis_frac(const Axis& a, double v) {
  return ((a.log ? std::log10(v) : v) - a.lo) / (a.hi - a.lo);
}
int px_x(Rect area, const Axis& a, double v) {
  return area.x + int(std::lround(std::clamp(axis_frac(a, v), -4.0, 5.0) * (area.w - 1)));
}
int px_y(Rect area, const Axis& a, double v) {
  return area.y + area.h - 1 - int(std::lround(std::clamp(axis_frac(a, v), -4.0, 5.0) * (area.h - 1)));
}
std::string tick_label(const Axis& a, double v) { return a.log ? printf_g(v, 3) : format_tick(v, a.step); }

// The data area of a box once the title, axis labels and y tick labels have their room.
struct Layout {
  Rect area;
  Axis y;
};
Layout layout_box(Rect box, const std::string& title, const std::string& x_label,
                  const std::string& y_label, double ylo, double yhi, bool log_y, const char* who) {
  const int top = box.y + (title.empty() ? 14 : 38);
  const int bottom = box.y + box.h - (x_label.empty() ? 24 : 40);  // one past the last row
  Layout l;
  l.y = log_y ? log_axis(ylo, yhi) : nice_axis(ylo, yhi, std::clamp((bottom - top) / 45 + 1, 2, 9));
  int label_w = 0;
  for (double t : l.y.ticks) label_w = std::max(label_w, text_width(tick_label(l.y, t)));
  const int left = box.x + 10 + (y_label.empty() ? 0 : kGlyphRows + 8) + label_w + 8;
  l.area = {left, top, box.x + box.w - 18 - left, bottom - top};
  KILN_CHECK(l.area.w >= 40 && l.area.h >= 30, who, ": a ", box.w, " x ", box.h,
             " pixel panel is too small to draw in");
  return l;
}

// Title, grid, ticks, tick labels, frame and axis labels around `area` (x axis optional).
void draw_axes(Canvas& cv, Rect box, Rect area, const Axis& ya, const Axis* xa, const std::string& title,
               const std::string& x_label, const std::string& y_label) {
  if (!title.empty()) cv.text(box.x + (box.w - text_width(title, 2)) / 2, box.y + 10, title, kInk, 2);
  const int bottom = area.y + area.h;
  for (double t : ya.ticks) {
    const int y = px_y(area, ya, t);
    const std::string s = tick_label(ya, t);
    cv.fill(area.x, y, area.w, 1, kGrid);
    cv.fill(area.x - 5, y, 4, 1, kFrame);
    cv.text(area.x - 8 - text_width(s), y - 3, s, kInk);
  }
  if (xa) {
    for (double t : xa->ticks) {
      const int x = px_x(area, *xa, t);
      const std::string s = tick_label(*xa, t);
      cv.fill(x, area.y, 1, area.h, kGrid);
      cv.fill(x, bottom + 1, 1, 4, kFrame);
      cv.text(x - text_width(s) / 2, bottom + 7, s, kInk);
    }
  }
  cv.frame({area.x - 1, area.y - 1, area.w + 2, area.h + 2}, kFrame);
  if (!x_label.empty()) cv.text(area.x + (area.w - text_width(x_label)) / 2, bottom + 22, x_label, kInk);
  if (!y_label.empty())
    cv.text(box.x + 10, area.y + (area.h + text_width(y_label)) / 2, y_label, kInk, 1, true);
}

struct LegendEntry {
  std::string name;
  uint32_t rgb;
};

// A boxed legend in the corner of `area` that covers the fewest drawn pixels.
void draw_legend(Canvas& cv, Rect area, const std::vector<LegendEntry>& all, bool bars) {
  std::vector<LegendEntry> entries;
  for (const auto& e : all)
    if (!e.name.empty()) entries.push_back(e);
  if (entries.empty()) return;
  int name_w = 0;
  for (const auto& e : entries) name_w = std::max(name_w, text_width(e.name));
  const int w = 8 + 20 + 6 + name_w + 8, h = int(entries.size()) * 13 + 9, m = 8;
  const Rect corners[4] = {{area.x + area.w - m - w, area.y + m, w, h}, {area.x + m, area.y + m, w, h},
                           {area.x + area.w - m - w, area.y + area.h - m - h, w, h},
                           {area.x + m, area.y + area.h - m - h, w, h}};
  Rect best = corners[0];
  long best_ink = std::numeric_limits<long>::max();
  for (const Rect& r : corners) {
    long ink = 0;
    for (int y = std::max(r.y, area.y); y < std::min(r.y + r.h, area.y + area.h); ++y)
      for (int x = std::max(r.x, area.x); x < std::min(r.x + r.w, area.x + area.w); ++x) {
        const uint32_t c = cv.at(x, y);
        ink += c != kWhite && c != kGrid;
      }
    if (ink < best_ink) best_ink = ink, best = r;
  }
  cv.fill(best.x, best.y, best.w, best.h, kWhite);
  cv.frame(best, kMuted);
  for (size_t i = 0; i < entries.size(); ++i) {
    const int y = best.y + 6 + int(i) * 13;  // top of this entry's text
    if (bars) cv.fill(best.x + 12, y, 14, 8, entries[i].rgb);
    else cv.fill(best.x + 8, y + 3, 20, 2, entries[i].rgb);
    cv.text(best.x + 8 + 20 + 6, y, entries[i].name, kInk);
  }
}

bool drawable(const Axis& ya, double x, double y) {
  return std::isfinite(x) && std::isfinite(y) && (!ya.log || y > 0);
}

void draw_panel(Image& img, Canvas& cv, const Panel& p, Rect box) {
  double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
  Axis probe;
  probe.log = p.log_y;
  for (const Series& s : p.series) {
    KILN_CHECK(s.x.size() == s.y.size(), "plot: series '", s.name, "' of panel '", p.title, "' has ",
               s.x.size(), " x values but ", s.y.size(), " y values");
    for (size_t i = 0; i < s.x.size(); ++i)
      if (drawable(probe, s.x[i], s.y[i])) {
        xlo = std::min(xlo, s.x[i]), xhi = std::max(xhi, s.x[i]);
        ylo = std::min(ylo, s.y[i]), yhi = std::max(yhi, s.y[i]);
      }
  }
  const bool any = xlo <= xhi;
  auto widen = [](double v, double& lo, double& hi) {
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  };
  widen(p.x_min, xlo, xhi), widen(p.x_max, xlo, xhi);
  for (double v : {p.y_min, p.y_max})
    if (!p.log_y || v > 0) widen(v, ylo, yhi);
  if (xlo > xhi) xlo = 0, xhi = 1;
  if (ylo > yhi) ylo = p.log_y ? 1 : 0, yhi = p.log_y ? 10 : 1;
  const Layout l = layout_box(box, p.title, p.x_label, p.y_label, ylo, yhi, p.log_y, "plot");
  const Rect area = l.area;
  const Axis xa = nice_axis(xlo, xhi, std::clamp(area.w / 80 + 1, 2, 11));
  draw_axes(cv, box, area, l.y, &xa, p.title, p.x_label, p.y_label);

  std::vector<LegendEntry> legend;
  cv.set_clip(area);
  for (size_t k = 0; k < p.series.size(); ++k) {
    const Series& s = p.series[k];
    const uint32_t c = s.rgb == kAutoColor ? palette_color(k) : s.rgb;
    legend.push_back({s.name, c});
    const size_t n = s.x.size();
    auto ok = [&](size_t i) { return i < n && drawable(l.y, s.x[i], s.y[i]); };
    int points = 0;
    for (size_t i = 0; i < n; ++i) points += ok(i);
    const bool markers = points * 25 <= area.w;
    for (size_t i = 0; i < n; ++i) {
      if (!ok(i)) continue;
      const int x = px_x(area, xa, s.x[i]), y = px_y(area, l.y, s.y[i]);
      if (i > 0 && ok(i - 1)) cv.line(px_x(area, xa, s.x[i - 1]), px_y(area, l.y, s.y[i - 1]), x, y, c);
      if (!(i > 0 && ok(i - 1)) && !ok(i + 1)) cv.dot(x, y, c, 3);  // an isolated point
      else if (markers) cv.dot(x, y, c, 2);
    }
  }
  cv.reset_clip();
  if (!any)
    cv.text(area.x + (area.w - text_width(p.empty_message, 2)) / 2, area.y + area.h / 2 - 7,
            p.empty_message, kMuted, 2);
  draw_legend(cv, area, legend, false);
  img.plot_areas.push_back(area);
}

}  // namespace

uint32_t palette_color(size_t i) {
  static const uint32_t colors[10] = {0x1F77B4, 0xFF7F0E, 0x2CA02C, 0xD62728, 0x9467BD,
                                      0x8C564B, 0xE377C2, 0x7F7F7F, 0xBCBD22, 0x17BECF};
  return colors[i % 10];
}

double nice_step(double raw) {
  if (!(raw > 0) || !std::isfinite(raw)) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw * (1 - 1e-9)) return m * p;
  return 10 * p;
}

Axis nice_axis(double lo, double hi, int max_ticks) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;
  if (lo > hi) std::swap(lo, hi);
  if (hi - lo <= 1e-12 * std::max(std::abs(lo), std::abs(hi))) {  // one value: a range around it
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad, hi += pad;
  }
  lo = std::max(lo, -1e300), hi = std::min(hi, 1e300);  // keep hi - lo finite
  Axis a;
  a.step = nice_step((hi - lo) / std::clamp(max_ticks - 1, 1, 100));
  const double first = std::floor(lo / a.step + 1e-9), last = std::ceil(hi / a.step - 1e-9);
  a.lo = first * a.step, a.hi = last * a.step;
  const int n = int(std::min(last - first, 200.0));
  for (int k = 0; k <= n; ++k) a.ticks.push_back((first + k) * a.step);
  return a;
}

Axis log_axis(double lo, double hi) {
  if (!(lo > 0) || !std::isfinite(lo)) lo = 1;
  if (!(hi > 0) || !std::isfinite(hi)) hi = lo * 10;
  if (lo > hi) std::swap(lo, hi);
  Axis a;
  a.log = true;
  a.lo = std::floor(std::log10(lo) + 1e-9), a.hi = std::ceil(std::log10(hi) - 1e-9);
  if (a.hi <= a.lo) a.hi = a.lo + 1;
  const bool fine = a.hi - a.lo <= 2;
  a.step = std::ceil((a.hi - a.lo) / 8);  // decades between ticks: at most about 9 ticks
  a.hi = a.lo + std::ceil((a.hi - a.lo) / a.step) * a.step;
  for (double e = a.lo; e <= a.hi; e += a.step)
    for (double m : {1.0, 2.0, 5.0})
      if ((m == 1 || fine) && (e < a.hi || m == 1)) a.ticks.push_back(m * std::pow(10.0, e));
  return a;
}

std::string format_tick(double v, double step) {
  if (std::abs(v) < std::abs(step) * 1e-6) return "0";
  const double mag = std::max(std::abs(v), std::abs(step));
  if (mag >= 1e6 || std::abs(step) < 1e-4) return printf_g(v, 3);
  const int decimals = std::max(0, -int(std::floor(std::log10(std::abs(step)) + 1e-9)));
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

int text_width(std::string_view s, int scale) {
  return s.empty() ? 0 : (int(s.size()) * kAdvance - 1) * scale;
}

void draw_text(Image& img, int x, int y, std::string_view s, uint32_t rgb, int scale) {
  KILN_CHECK(img.width >= 0 && img.height >= 0 && img.rgb.size() == size_t(img.width) * img.height * 3,
             "draw_text: image of ", img.width, " x ", img.height, " pixels holds ", img.rgb.size(),
             " bytes, expected width * height * 3");
  Canvas(img).text(x, y, s, rgb, std::max(1, scale));
}

Image render_panels(const std::vector<Panel>& panels, int width, int height, const std::string& title,
                    int columns) {
  KILN_CHECK(!panels.empty(), "render_panels: no panels to draw");
  Image img = blank_image(width, height, "render_panels");
  Canvas cv(img);
  int top = 0;
  if (!title.empty()) {
    cv.text((width - text_width(title, 2)) / 2, 10, title, kInk, 2);
    top = 30;
  }
  const int n = int(panels.size()), cols = std::clamp(columns, 1, n), rows = (n + cols - 1) / cols;
  const int pw = width / cols, ph = (height - top) / rows;
  for (int i = 0; i < n; ++i) draw_panel(img, cv, panels[i], {(i % cols) * pw, top + (i / cols) * ph, pw, ph});
  return img;
}

void write_plot_png(const std::string& path, const std::vector<Panel>& panels, int width, int height,
                    const std::string& title) {
  const Image img = render_panels(panels, width, height, title);
  write_png(path, img.rgb.data(), img.width, img.height);
}

Image render_bar_chart(const BarChart& chart, int width, int height) {
  const size_t n = chart.labels.size(), g = chart.groups.size();
  KILN_CHECK(n > 0 && g > 0, "render_bar_chart '", chart.title, "': expected at least one label and one group, got ",
             n, " labels and ", g, " groups");
  double lo = 0, hi = 0;
  for (const auto& [name, values] : chart.groups) {
    KILN_CHECK(values.size() == n, "render_bar_chart '", chart.title, "': group '", name, "' has ",
               values.size(), " values for ", n, " labels");
    for (double v : values)
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  if (lo == hi) hi = 1;
  hi += (hi - lo) * 0.08;  // room for the value written above the tallest bar
  Image img = blank_image(width, height, "render_bar_chart");
  Canvas cv(img);
  const Rect box{0, 0, width, height};
  const Layout l = layout_box(box, chart.title, " ", chart.y_label, lo, hi, false, "render_bar_chart");
  const Rect area = l.area;
  draw_axes(cv, box, area, l.y, nullptr, chart.title, "", chart.y_label);

  const int slot = area.w / int(n);
  const int bar = std::max(1, int(slot * 0.8) / int(g));
  const int zero = px_y(area, l.y, 0.0);
  std::vector<LegendEntry> legend;
  for (size_t k = 0; k < g; ++k) legend.push_back({chart.groups[k].first, palette_color(k)});
  for (size_t j = 0; j < n; ++j) {
    const int x0 = area.x + int(j) * slot + (slot - bar * int(g)) / 2;
    for (size_t k = 0; k < g; ++k) {
      const double v = chart.groups[k].second[j];
      const int x = x0 + int(k) * bar;
      if (!std::isfinite(v)) {
        if (text_width("n/a") <= bar + 4) cv.text(x + (bar - 2 - text_width("n/a")) / 2, zero - 12, "n/a", kMuted);
        continue;
      }
      const int y = px_y(area, l.y, v);
      cv.fill(x, std::min(y, zero), std::max(1, bar - 2), std::abs(y - zero) + 1, palette_color(k));
      const std::string s = printf_g(v, 3);
      if (text_width(s) <= bar + 4)
        cv.text(x + (bar - 2 - text_width(s)) / 2, v >= 0 ? y - 12 : y + 4, s, kInk);
    }
    std::string label = chart.labels[j];
    while (label.size() > 1 && text_width(label) > slot - 4) label.pop_back();
    cv.text(area.x + int(j) * slot + (slot - text_width(label)) / 2, area.y + area.h + 8, label, kInk);
  }
  if (g > 1 || !chart.groups[0].first.empty()) draw_legend(cv, area, legend, true);
  img.plot_areas.push_back(area);
  return img;
}

void write_bar_chart_png(const std::string& path, const BarChart& chart, int width, int height) {
  const Image img = render_bar_chart(chart, width, height);
  write_png(path, img.rgb.data(), img.width, img.height);
}

}  // namespace kiln::monitor
