// Tests of the PNG writer and the raster plotter of the `kiln` command: the PNG structure
// (signature, chunk CRCs recomputed with zlib, IHDR; pixels decoded by stb_image), nice ticks, what the
// line and bar plots draw, and the metrics plot. Set KILN_PLOT_DIR to keep the PNGs.
#include <doctest/doctest.h>
#include <zlib.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
#define STBI_ONLY_PNG
#include "stb_image.h"
#pragma GCC diagnostic pop
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>
#include "kiln/monitor/metrics.h"
#include "kiln/monitor/plot.h"
#include "kiln/monitor/png.h"
#include "kiln/core/error.h"
#include "data/data_test_util.h"
#include "gradcheck.h"
#include "kiln/data/io.h"

using namespace kiln::monitor;
using kiln::test::error_of;
using kiln_test::TempDir;

namespace {

uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

struct Chunk {
  std::string type;
  std::vector<uint8_t> data;
};

// Splits a PNG into chunks, checking the signature and every CRC on the way.
std::vector<Chunk> parse_png(const std::vector<uint8_t>& png) {
  const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  REQUIRE(png.size() >= 8);
  REQUIRE(std::equal(sig, sig + 8, png.begin()));
  std::vector<Chunk> chunks;
  for (size_t pos = 8; pos < png.size();) {
    REQUIRE(pos + 12 <= png.size());
    const uint32_t len = be32(&png[pos]);
    REQUIRE(pos + 12 + len <= png.size());
    const uint8_t* type = &png[pos + 4];
    const uint32_t crc = uint32_t(crc32(0L, type, len + 4));
    CHECK(crc == be32(&png[pos + 8 + len]));
    chunks.push_back({std::string(type, type + 4), std::vector<uint8_t>(type + 4, type + 4 + len)});
    pos += 12 + len;
  }
  return chunks;
}

// The pixels of a PNG written by encode_png, decoded by stb_image (an independent decoder:
// it undoes every row filter the encoder chose); the chunks are checked by parse_png first.
std::vector<uint8_t> decode_rgb(const std::vector<uint8_t>& png, int& w, int& h) {
  for (const Chunk& c : parse_png(png))
    if (c.type == "IHDR") w = int(be32(&c.data[0])), h = int(be32(&c.data[4]));
  int dw = 0, dh = 0, n = 0;
  uint8_t* px = stbi_load_from_memory(png.data(), int(png.size()), &dw, &dh, &n, 3);
  REQUIRE(px != nullptr);
  CHECK(dw == w);
  CHECK(dh == h);
  CHECK(n == 3);
  std::vector<uint8_t> rgb(px, px + size_t(dw) * size_t(dh) * 3);
  stbi_image_free(px);
  return rgb;
}

uint32_t pixel(const Image& img, int x, int y) {
  const uint8_t* p = &img.rgb[(size_t(y) * img.width + x) * 3];
  return uint32_t(p[0]) << 16 | uint32_t(p[1]) << 8 | p[2];
}

// Pixels of colour c inside r, and the columns that hold at least one.
int count_color(const Image& img, Rect r, uint32_t c, std::vector<int>* columns = nullptr) {
  int n = 0;
  for (int x = r.x; x < r.x + r.w; ++x) {
    int in_column = 0;
    for (int y = r.y; y < r.y + r.h; ++y) in_column += pixel(img, x, y) == c;
    if (in_column && columns) columns->push_back(x);
    n += in_column;
  }
  return n;
}

void maybe_keep(const std::string& name, const Image& img) {
  if (const char* dir = std::getenv("KILN_PLOT_DIR"))
    write_png((std::filesystem::path(dir) / name).string(), img.rgb.data(), img.width, img.height);
}

bool is_nice(double step) {
  const double m = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  return std::abs(m - 1) < 1e-9 || std::abs(m - 2) < 1e-9 || std::abs(m - 5) < 1e-9;
}

}  // namespace

TEST_CASE("encode_png: signature, chunk layout and CRCs, IHDR fields, the pixels decode back") {
  for (auto [w, h] : {std::pair{13, 7}, std::pair{1, 1}, std::pair{64, 3}}) {
    std::vector<uint8_t> rgb(size_t(w) * h * 3);
    for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = uint8_t(i * 37 + i / 7);
    const std::vector<uint8_t> png = encode_png(rgb.data(), w, h);
    const std::vector<Chunk> chunks = parse_png(png);
    REQUIRE(chunks.size() == 3);
    CHECK(chunks[0].type == "IHDR");
    CHECK(chunks[1].type == "IDAT");
    CHECK(chunks[2].type == "IEND");
    CHECK(chunks[2].data.empty());
    const std::vector<uint8_t>& ihdr = chunks[0].data;
    REQUIRE(ihdr.size() == 13);
    CHECK(be32(&ihdr[0]) == uint32_t(w));
    CHECK(be32(&ihdr[4]) == uint32_t(h));
    CHECK(std::vector<uint8_t>(ihdr.begin() + 8, ihdr.end()) == std::vector<uint8_t>{8, 2, 0, 0, 0});
    int dw = 0, dh = 0;
    CHECK(decode_rgb(png, dw, dh) == rgb);
  }
}

TEST_CASE("encode_png / write_png: bad sizes and unwritable paths are errors naming them") {
  const uint8_t px[3] = {1, 2, 3};
  CHECK(error_of([&] { encode_png(px, 0, 1); }).find("0 x 1") != std::string::npos);
  CHECK(error_of([&] { encode_png(nullptr, 1, 1); }).find("encode_png") != std::string::npos);
  TempDir dir;
  const std::string path = dir / "a.png";
  write_png(path, px, 1, 1);
  const std::vector<uint8_t> bytes = kiln::data::read_file_bytes(path);
  CHECK(bytes == encode_png(px, 1, 1));
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path), std::filesystem::directory_iterator{}) == 1);  // no temp file left
  const std::string bad = dir / "missing/b.png";
  CHECK(error_of([&] { write_png(bad, px, 1, 1); }).find(bad) != std::string::npos);
}

TEST_CASE("nice_step: the smallest 1, 2 or 5 x 10^k not below the input") {
  CHECK(nice_step(0.3) == doctest::Approx(0.5));
  CHECK(nice_step(2.0) == doctest::Approx(2.0));
  CHECK(nice_step(7.0) == doctest::Approx(10.0));
  for (double e = -7; e <= 7; e += 0.13) {
    const double raw = std::pow(10.0, e), s = nice_step(raw);
    CHECK(is_nice(s));
    CHECK(s >= raw * (1 - 1e-9));
    CHECK(s < raw * 2.5 + 1e-12);  // the next smaller nice number would be below raw
  }
}

TEST_CASE("nice_axis: nice round ticks that cover the range") {
  const Axis a = nice_axis(0.0, 9.5, 6);  // span 9.5 over 5 intervals: 1.9 -> step 2
  CHECK(a.step == doctest::Approx(2.0));
  CHECK(a.ticks.size() == 6);
  CHECK(a.ticks.back() == doctest::Approx(10.0));
  const double ranges[][2] = {{0.3, 2.3}, {-5, 17}, {1e-6, 3e-6}, {12345, 12346}, {-0.02, -0.01},
                              {0, 938},  {7, 7},   {0, 0},       {2.5e8, 9e8},   {NAN, 1}};
  for (const auto& r : ranges)
    for (int max_ticks : {2, 5, 8}) {
      const Axis ax = nice_axis(r[0], r[1], max_ticks);
      CAPTURE(r[0]);
      CAPTURE(r[1]);
      CHECK(is_nice(ax.step));
      REQUIRE(ax.ticks.size() >= 2);
      CHECK(int(ax.ticks.size()) <= max_ticks + 1);
      CHECK(ax.ticks.front() == doctest::Approx(ax.lo));
      CHECK(ax.ticks.back() == doctest::Approx(ax.hi));
      if (std::isfinite(r[0])) CHECK((ax.lo <= r[0] && ax.hi >= r[1]));
      for (size_t i = 0; i < ax.ticks.size(); ++i) {
        const double k = ax.ticks[i] / ax.step;
        CHECK(std::abs(k - std::round(k)) < 1e-6);  // a multiple of the step
        if (i > 0) CHECK(ax.ticks[i] - ax.ticks[i - 1] == doctest::Approx(ax.step));
      }
    }
}

TEST_CASE("log_axis and format_tick") {
  const Axis wide = log_axis(0.03, 20);
  CHECK(wide.lo == -2);
  CHECK(wide.hi == 2);
  REQUIRE(wide.ticks.size() == 5);
  for (size_t i = 0; i < 5; ++i) CHECK(wide.ticks[i] == doctest::Approx(std::pow(10.0, double(i) - 2)));
  const Axis narrow = log_axis(0.5, 3);  // two decades: 2x and 5x ticks too
  CHECK(narrow.ticks.size() == 7);
  const Axis huge = log_axis(1e-30, 1e30);  // 60 decades: a tick every 8th
  CHECK(huge.step == 8);
  CHECK(huge.ticks.size() <= 10);
  CHECK(huge.ticks.front() == doctest::Approx(1e-30));
  CHECK(huge.hi >= 30);
  const Axis extreme = nice_axis(-1e308, 1e308);  // the span overflows a double
  CHECK(extreme.ticks.size() <= 7);
  CHECK(std::isfinite(extreme.step));
  CHECK(format_tick(0.2, 0.2) == "0.2");
  CHECK(format_tick(0.05, 0.01) == "0.05");
  CHECK(format_tick(2500, 500) == "2500");
  CHECK(format_tick(1e-12, 0.5) == "0");
  CHECK(format_tick(3e6, 1e6) == "3e+06");
  CHECK(format_tick(-1.5, 0.5) == "-1.5");
}

TEST_CASE("bitmap font: every printable ASCII glyph draws and they all differ") {
  CHECK(text_width("abc") == 17);
  CHECK(text_width("abc", 2) == 34);
  CHECK(text_width("") == 0);
  std::set<std::string> seen;  // each glyph's pixels
  for (int c = 32; c <= 126; ++c) {
    Image img;
    img.width = 8, img.height = 12;
    img.rgb.assign(size_t(8 * 12 * 3), 0xFF);
    draw_text(img, 1, 1, std::string(1, char(c)), 0x000000);
    const long ink = std::count(img.rgb.begin(), img.rgb.end(), uint8_t(0));
    if (c == ' ') CHECK(ink == 0);
    else CHECK_MESSAGE(ink > 0, "glyph ", char(c));
    seen.insert(std::string(img.rgb.begin(), img.rgb.end()));
  }
  CHECK(seen.size() == 95);
  if (std::getenv("KILN_PLOT_DIR")) {  // a specimen to look at
    Image sheet;
    sheet.width = 600, sheet.height = 130;
    sheet.rgb.assign(size_t(600 * 130 * 3), 0xFF);
    std::string all;
    for (int c = 32; c <= 126; ++c) all += char(c);
    for (int row = 0; row < 2; ++row) draw_text(sheet, 4, 4 + row * 12, all.substr(row * 48, 48), 0x000000);
    for (int row = 0; row < 4; ++row) draw_text(sheet, 4, 32 + row * 24, all.substr(row * 24, 24), 0x000000, 2);
    maybe_keep("font.png", sheet);
  }
}

TEST_CASE("render_panels: a curve is drawn continuously inside the axes in its colour") {
  Series s{"quadratic", {}, {}, 0xD00000};
  for (int i = 0; i <= 100; ++i) s.x.push_back(i), s.y.push_back(i * i / 100.0);
  Series steep{"steep", {0, 1}, {0, 100}, 0x0000D0};
  const Image img = render_panels({Panel{"curve", "x", "y", {steep, s}}}, 500, 360, "figure");
  CHECK(img.width == 500);
  CHECK(img.height == 360);
  CHECK(img.rgb.size() == size_t(500 * 360 * 3));
  REQUIRE(img.plot_areas.size() == 1);
  const Rect a = img.plot_areas[0];
  CHECK((a.x > 0 && a.y > 0 && a.x + a.w < img.width && a.y + a.h < img.height));
  std::vector<int> cols;
  CHECK(count_color(img, a, 0xD00000, &cols) > a.w);
  CHECK(int(cols.size()) >= a.w - 2);  // a pixel of the curve in every column
  // The steep segment covers every row: walk the rows instead of the columns.
  int rows_hit = 0;
  for (int y = a.y; y < a.y + a.h; ++y) {
    bool hit = false;
    for (int x = a.x; x < a.x + a.w && !hit; ++x) hit = pixel(img, x, y) == 0x0000D0;
    rows_hit += hit;
  }
  CHECK(rows_hit >= a.h - 2);
  // Tick labels and titles lie outside the data area.
  CHECK(count_color(img, {0, 0, a.x - 1, img.height}, 0xFFFFFF) < (a.x - 1) * img.height);
  CHECK(count_color(img, {0, 0, img.width, a.y - 1}, 0xFFFFFF) < img.width * (a.y - 1));
  maybe_keep("curve.png", img);
}

TEST_CASE("render_panels: NaN leaves a gap, a lone point is a dot, empty and all-NaN series do not crash") {
  Series gap{"gap", {}, {}, 0xC00000};
  for (int i = 0; i <= 100; ++i) gap.x.push_back(i), gap.y.push_back(i >= 40 && i <= 60 ? NAN : std::sin(i * 0.1));
  const Image img = render_panels({Panel{"gap", "", "", {gap}}}, 400, 300);
  const Rect a = img.plot_areas.at(0);
  std::vector<int> cols;
  count_color(img, a, 0xC00000, &cols);
  REQUIRE(cols.size() > 10);
  int widest = 0, at = 0;
  for (size_t i = 1; i < cols.size(); ++i)
    if (cols[i] - cols[i - 1] > widest) widest = cols[i] - cols[i - 1], at = (cols[i] + cols[i - 1]) / 2;
  CHECK(widest > a.w / 10);  // about 20% of the x range is missing
  CHECK(std::abs(at - (a.x + a.w / 2)) < a.w / 10);

  Series lone{"", {3, 4, 5}, {NAN, 2, NAN}, 0x00A000};
  const Image dot = render_panels({Panel{"dot", "", "", {lone}}}, 400, 300);
  std::vector<int> dcols;
  const int n = count_color(dot, dot.plot_areas.at(0), 0x00A000, &dcols);
  CHECK(n >= 9);
  CHECK(n <= 49);
  CHECK(dcols.back() - dcols.front() <= 6);

  // Unnamed, so no legend sample either: nothing of their colour may appear.
  Series empty{"", {}, {}, 0x0000C0}, nans{"", {1, 2}, {NAN, NAN}, 0x0000C0};
  Series only_x_nan{"", {NAN, NAN}, {1, 2}, 0x0000C0};
  for (const Panel& p : {Panel{"empty", "", "", {empty}}, Panel{"nans", "", "", {nans, only_x_nan}},
                         Panel{"no series", "", "", {}}, Panel{"log", "", "", {Series{"", {1, 2}, {-1, 0}, 0x0000C0}}, true}}) {
    Image e;
    CHECK_NOTHROW(e = render_panels({p}, 400, 300));
    CHECK(count_color(e, e.plot_areas.at(0), 0x0000C0) == 0);
    Panel silent = p;
    silent.empty_message = "";
    CHECK(render_panels({silent}, 400, 300).rgb != e.rgb);  // the "no data" message is written
  }
  CHECK_NOTHROW(render_panels({Panel{"huge", "", "", {Series{"", {0, 1, 2, 3}, {-1e308, 1e308, INFINITY, 1e-300}}}}}));
  CHECK_NOTHROW(render_panels({Panel{"huge", "", "", {Series{"", {0, 1}, {1e-300, 1e300}}}, true}}));
  Series bad{"bad", {1, 2, 3}, {1, 2}};
  CHECK(error_of([&] { render_panels({Panel{"p", "", "", {bad}}}); }).find("'bad'") != std::string::npos);
  CHECK(error_of([&] { render_panels({}); }).find("no panels") != std::string::npos);
  CHECK(error_of([&] { render_panels({Panel{}}, 10, 10); }).find("10 x 10") != std::string::npos);
}

TEST_CASE("render_panels: a log axis and several panels side by side") {
  Series decay{"loss", {}, {}};
  for (int i = 1; i <= 200; ++i) decay.x.push_back(i), decay.y.push_back(3.0 * std::exp(-i / 40.0));
  Panel lin{"linear", "step", "loss", {decay}}, lg{"log", "step", "loss", {decay}, true};
  const Image img = render_panels({lin, lg}, 800, 300);
  REQUIRE(img.plot_areas.size() == 2);
  CHECK(img.plot_areas[0].x + img.plot_areas[0].w < img.plot_areas[1].x);
  CHECK(img.plot_areas[0].y == img.plot_areas[1].y);
  // On the log axis exp decay is a straight line: its middle point sits mid-height between its ends.
  const Rect a = img.plot_areas[1];
  auto mean_row = [&](int x) {
    int sum = 0, n = 0;
    for (int y = a.y; y < a.y + a.h; ++y)
      if (pixel(img, x, y) == palette_color(0)) sum += y, ++n;
    return n ? double(sum) / n : -1.0;
  };
  std::vector<int> cols;  // the curve's first and last columns are x = 1 and x = 200
  count_color(img, a, palette_color(0), &cols);
  REQUIRE(cols.size() > 10);
  auto col = [&](double v) { return cols.front() + int(std::lround((v - 1) / 199 * (cols.back() - cols.front()))); };
  const double y1 = mean_row(col(20)), y2 = mean_row(col(100)), y3 = mean_row(col(180));
  REQUIRE((y1 > 0 && y2 > 0 && y3 > 0));
  CHECK(std::abs(y2 - (y1 + y3) / 2) < 4);
  maybe_keep("log.png", img);
}

TEST_CASE("render_bar_chart: bars in group colours with heights in proportion to the values") {
  BarChart chart{"step time", "ms", {"mlp", "convnet", "resnet20"}, {{"kiln", {1, 3, 2}}, {"libtorch", {1.5, NAN, 2.5}}}};
  const Image img = render_bar_chart(chart, 600, 360);
  const Rect a = img.plot_areas.at(0);
  const int slot = a.w / 3;
  auto bar_height = [&](int j, uint32_t c) {
    int best = 0;
    for (int x = a.x + j * slot; x < a.x + (j + 1) * slot; ++x) {
      int h = 0;
      for (int y = a.y; y < a.y + a.h; ++y) h += pixel(img, x, y) == c;
      best = std::max(best, h);
    }
    return best;
  };
  const int h0 = bar_height(0, palette_color(0)), h1 = bar_height(1, palette_color(0)), h2 = bar_height(2, palette_color(0));
  CHECK(h1 > h2);
  CHECK(h2 > h0);
  CHECK(std::abs(h1 - 3 * h0) <= 3);
  CHECK(bar_height(0, palette_color(1)) > h0);
  CHECK(bar_height(1, palette_color(1)) < 10);  // NaN: no bar (at most the legend swatch)
  maybe_keep("bars.png", img);
  CHECK(error_of([&] { render_bar_chart(BarChart{"t", "", {"a"}, {{"g", {1, 2}}}}); }).find("'g'") != std::string::npos);
  TempDir dir;
  write_bar_chart_png(dir / "bars.png", chart);
  int w = 0, h = 0;
  CHECK(decode_rgb(kiln::data::read_file_bytes(dir / "bars.png"), w, h).size() == size_t(900 * 420 * 3));
}

TEST_CASE("MetricsLog::write_plot: a loss panel and an accuracy panel (in %) next to the CSV") {
  TempDir dir;
  MetricsLog log(dir / "run.csv");
  for (int step = 1; step <= 300; ++step) {
    MetricsRow r{step, (step - 1) / 100 + 1, 2.3 * std::exp(-step / 80.0) + 0.05 * std::sin(step), 1e-3, 5000};
    if (step % 100 == 0) r.accuracy = 0.6 + step / 1000.0, r.val_loss = 0.5 + 100.0 / step;
    log.append(r);
  }
  const std::vector<Panel> panels = metrics_panels(log.rows());
  REQUIRE(panels.size() == 2);
  CHECK(panels[0].series.size() == 2);  // train and val loss
  CHECK(panels[0].series[1].x == std::vector<double>{100, 200, 300});
  CHECK(panels[1].series[0].y[2] == doctest::Approx(90.0));  // 0.9 as a percentage
  const std::string png = log.write_plot("mlp on fashion-mnist");
  CHECK(png == dir / "run.png");
  int w = 0, h = 0;
  const std::vector<uint8_t> rgb = decode_rgb(kiln::data::read_file_bytes(png), w, h);
  CHECK(w > h);
  CHECK(std::count(rgb.begin(), rgb.end(), uint8_t(0xFF)) < long(rgb.size()));
  if (const char* keep = std::getenv("KILN_PLOT_DIR"))
    std::filesystem::copy_file(png, std::filesystem::path(keep) / "metrics.png",
                               std::filesystem::copy_options::overwrite_existing);

  MetricsLog no_acc(dir / "plain.csv");
  no_acc.append({1, 1, 1.0, 0.1, 10});
  CHECK(metrics_panels(no_acc.rows()).size() == 1);
  int w1 = 0, h1 = 0;
  decode_rgb(kiln::data::read_file_bytes(no_acc.write_plot("one panel")), w1, h1);
  CHECK(w1 < w);
  MetricsLog none(dir / "none.log");
  CHECK(none.plot_path() == dir / "none.log.png");
  CHECK_NOTHROW(none.write_plot("no rows"));
}
