// Tests of the reporting pieces of the `kiln` command: duration/rate formatting, the
// progress bar in terminal and plain-log modes (written into a tmpfile), and the metrics
// CSV log (content, resume truncation, header mismatch).
#include <doctest/doctest.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include "kiln/monitor/metrics.h"
#include "kiln/monitor/progress.h"
#include "kiln/core/error.h"
#include "data/data_test_util.h"
#include "gradcheck.h"
#include "kiln/data/io.h"

using namespace kiln::monitor;
using kiln::test::error_of;
using kiln_test::TempDir;

namespace {

// Everything written so far to a tmpfile().
std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  for (int c; (c = std::fgetc(f)) != EOF;) s += char(c);
  std::fseek(f, 0, SEEK_END);
  return s;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts(1);
  for (char c : s) {
    if (c == sep) parts.emplace_back();
    else parts.back() += c;
  }
  return parts;
}

std::string read_text(const std::string& path) {
  const std::vector<uint8_t> b = kiln::data::read_file_bytes(path);
  return std::string(b.begin(), b.end());
}

struct TmpFile {
  std::FILE* f = std::tmpfile();
  ~TmpFile() {
    if (f) std::fclose(f);
  }
};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("format_duration and format_rate") {
  CHECK(format_duration(0) == "0:00");
  CHECK(format_duration(42) == "0:42");
  CHECK(format_duration(59.6) == "1:00");
  CHECK(format_duration(12 * 60 + 5) == "12:05");
  CHECK(format_duration(3600 + 2 * 60 + 3) == "1:02:03");
  CHECK(format_duration(-1) == "--:--");
  CHECK(format_duration(NAN) == "--:--");
  CHECK(format_rate(2345.4) == "2,345");
  CHECK(format_rate(1234567) == "1,234,567");
  CHECK(format_rate(100) == "100");
  CHECK(format_rate(12.345) == "12.3");
  CHECK(format_rate(0.42) == "0.42");
  CHECK(format_rate(NAN) == "-");
}

TEST_CASE("ProgressBar::status_line: bar, counts, loss, throughput and ETA in 100 columns") {
  TmpFile t;
  ProgressBar bar("epoch 1/3", 938, t.f, true);
  // 41.2 s for 412 steps: 0.1 s a step, 526 steps to go.
  const std::string line = bar.status_line(412, 0.4321, 2345, "samples/s", 41.2, true);
  CAPTURE(line);
  CHECK(line.rfind("epoch 1/3 [", 0) == 0);
  CHECK(contains(line, " 412/938"));
  CHECK(contains(line, "loss 0.4321"));
  CHECK(contains(line, "2,345 samples/s"));
  CHECK(contains(line, "ETA " + format_duration(0.1 * 526)));
  CHECK(line.size() <= 100);
  const double hashes = double(std::count(line.begin(), line.end(), '#'));
  const double dashes = double(std::count(line.begin(), line.end(), '-'));
  CHECK(hashes / (hashes + dashes) == doctest::Approx(412.0 / 938).epsilon(1.0 / (hashes + dashes)));

  const std::string plain = bar.status_line(412, 0.4321, 2345, "tok/s", 41.2, false);
  CHECK(contains(plain, "412/938 (43%)"));
  CHECK(contains(plain, "tok/s"));
  CHECK(!contains(plain, "["));
  const std::string last = bar.status_line(938, 0.3, 2000, "samples/s", 83.0, false);
  CHECK(contains(last, "took 1:23"));
  CHECK(!contains(last, "ETA"));
  CHECK(contains(bar.status_line(0, 2.3, 0, "samples/s", 0.5, true), "ETA --:--"));
  CHECK(contains(bar.status_line(1, NAN, 1, "samples/s", 0.5, true), "loss nan"));

  ProgressBar unknown("eval", 0, t.f, false);
  const std::string u = unknown.status_line(17, 1.5, 30, "samples/s", 3, false);
  CHECK(contains(u, "eval  17  loss"));
  CHECK(!contains(u, "ETA"));
}

TEST_CASE("ProgressBar plain mode: a line per 10% (throttled), the last step always") {
  TmpFile t;
  {
    ProgressBar bar("epoch 2/3", 100, t.f, false);
    CHECK(!bar.interactive());
    bar.set_min_interval(0);
    for (int i = 1; i <= 100; ++i) bar.update(i, 1.0 / i, 500);
    bar.update(100, 0.01, 500);  // reported twice: printed once
    bar.finish();
  }
  const std::string out = contents(t.f);
  CHECK(!contains(out, "\r"));
  std::vector<std::string> lines = split(out, '\n');
  CHECK(lines.back().empty());
  lines.pop_back();
  REQUIRE(lines.size() == 10);
  for (int k = 1; k <= 10; ++k) {
    const std::string& l = lines[k - 1];
    CAPTURE(l);
    CHECK(l.rfind("epoch 2/3  ", 0) == 0);
    CHECK(contains(l, std::to_string(10 * k) + "/100 (" + std::to_string(10 * k) + "%)"));
    CHECK(contains(l, "loss "));
    CHECK(contains(l, k < 10 ? "ETA " : "took "));
  }

  // With the default 2 s interval a fast loop prints (almost) only its last line.
  TmpFile t2;
  ProgressBar quick("epoch 1/1", 100, t2.f, false);
  for (int i = 1; i <= 100; ++i) quick.update(i, 0.5, 1000);
  quick.finish();
  const std::vector<std::string> q = split(contents(t2.f), '\n');
  CHECK(q.size() <= 4);  // normally 1 line (+ the empty rest); more only after a 2 s stall
  CHECK(contains(q[q.size() - 2], "100/100"));

  // A state not yet printed (an interrupted loop) is printed by finish().
  TmpFile t3;
  ProgressBar cut("epoch 1/1", 100, t3.f, false);
  cut.set_min_interval(1e9);
  cut.update(50, 0.7, 100);
  CHECK(contents(t3.f).empty());
  cut.finish();
  CHECK(contains(contents(t3.f), "50/100 (50%)"));
}

TEST_CASE("ProgressBar terminal mode: redraws one line with \\r, ends it on finish") {
  TmpFile t;
  {
    ProgressBar bar("epoch 1/1", 5, t.f, true);
    CHECK(bar.interactive());
    bar.set_min_interval(0);
    bar.update(1, 12345.678, 10);  // a long loss ...
    bar.update(2, 0.5, 10);        // ... then a shorter line: padded over the old one
    for (int i = 3; i <= 5; ++i) bar.update(i, 0.5, 10);
  }  // the destructor finishes
  const std::string out = contents(t.f);
  CHECK(std::count(out.begin(), out.end(), '\r') == 5);
  CHECK(std::count(out.begin(), out.end(), '\n') == 1);
  CHECK(out.back() == '\n');
  const std::vector<std::string> draws = split(out.substr(1), '\r');
  REQUIRE(draws.size() == 5);
  CHECK(draws[1].size() >= draws[0].size());
  CHECK(contains(draws[4], "5/5"));
  const size_t open = draws[4].find('['), close = draws[4].find(']');  // the bar is full
  REQUIRE((open != std::string::npos && close > open + 1));
  CHECK(draws[4].find_first_not_of('#', open + 1) == close);

  // At the default ~10 redraws a second a fast loop draws far fewer lines than steps.
  TmpFile t2;
  ProgressBar fast("epoch 1/1", 20000, t2.f, true);
  for (int i = 1; i <= 20000; ++i) fast.update(i, 0.5, 1e6);
  fast.finish();
  const std::string o2 = contents(t2.f);
  CHECK(std::count(o2.begin(), o2.end(), '\r') < 200);
  CHECK(contains(o2, "20000/20000"));
}

TEST_CASE("MetricsLog: CSV header and rows, absent values as empty fields, NaN as nan, read back") {
  TempDir dir;
  const std::string path = dir / "metrics.csv";
  {
    MetricsLog log(path);
    log.append({10, 1, 0.5, 0.001, 1234.5});
    log.append({20, 1, 0.25, 0.001, 1500, 0.875, 0.375});
    log.append({30, 1, NAN, 0.001, 1500, std::nullopt, NAN, 3});  // a window of skipped steps
    CHECK(log.rows().size() == 3);
    CHECK(read_text(path) == "step,epoch,loss,lr,samples_per_s,accuracy,val_loss,skipped\n"
                             "10,1,0.5,0.001,1234.5,,,0\n"
                             "20,1,0.25,0.001,1500,0.875,0.375,0\n"
                             "30,1,nan,0.001,1500,,nan,3\n");  // flushed while still open
  }
  const std::vector<MetricsRow> rows = read_metrics_csv(path);
  REQUIRE(rows.size() == 3);
  CHECK(std::isnan(rows[2].loss));
  CHECK(std::isnan(*rows[2].val_loss));
  CHECK(rows[2].skipped == 3);
  CHECK(rows[0].step == 10);
  CHECK(!rows[0].accuracy.has_value());
  CHECK(!rows[0].val_loss.has_value());
  CHECK(rows[1].accuracy == 0.875);
  CHECK(rows[1].items_per_s == 1500);
  MetricsLog fresh(path);  // not appending: starts over
  CHECK(read_text(path) == std::string(kMetricsHeader).append("\n"));
  CHECK(fresh.rows().empty());
}

TEST_CASE("MetricsLog append: continues a log, dropping the rows after the resume step") {
  TempDir dir;
  const std::string path = dir / "run.csv";
  {
    MetricsLog log(path);
    for (int s = 10; s <= 50; s += 10) log.append({s, s / 20 + 1, 1.0 / s, 0.01, 100});
  }
  {
    MetricsLog resumed(path, true, 30);
    REQUIRE(resumed.rows().size() == 3);
    CHECK(resumed.rows().back().step == 30);
    resumed.append({40, 3, 0.02, 0.01, 100});
    CHECK(resumed.rows().size() == 4);
  }
  const std::vector<MetricsRow> rows = read_metrics_csv(path);
  REQUIRE(rows.size() == 4);
  for (size_t i = 0; i < rows.size(); ++i) CHECK(rows[i].step == int64_t(10 * (i + 1)));
  CHECK(rows[3].loss == 0.02);
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path), std::filesystem::directory_iterator{}) == 1);

  // An unfinished last line (a run killed mid-write) is dropped, not an error.
  kiln_test::write_text(path, read_text(path) + "50,3,0.0");
  MetricsLog again(path, true, 1000);
  CHECK(again.rows().size() == 4);
  CHECK(read_metrics_csv(path).size() == 4);

  // A missing file is created.
  MetricsLog created(dir / "new.csv", true, 5);
  CHECK(created.rows().empty());
  CHECK(read_text(dir / "new.csv") == std::string(kMetricsHeader).append("\n"));
}

TEST_CASE("MetricsLog: another header, a malformed row or an unwritable path is an error naming the file") {
  TempDir dir;
  const std::string other = dir / "other.csv";
  kiln_test::write_text(other, "a,b,c\n1,2,3\n");
  const std::string e = error_of([&] { MetricsLog log(other, true, 10); });
  CHECK(contains(e, other));
  CHECK(contains(e, "header"));
  CHECK(read_text(other) == "a,b,c\n1,2,3\n");  // left alone

  const std::string broken = dir / "broken.csv";
  kiln_test::write_text(broken, std::string(kMetricsHeader).append("\n1,1,0.5,0.1,10,,\n2,1,oops,0.1,10,,\n3,1,0.4,0.1,10,,\n"));
  const std::string e2 = error_of([&] { MetricsLog log(broken, true, 10); });
  CHECK(contains(e2, broken));
  CHECK(contains(e2, "line 3"));

  const std::string missing = dir / "no/such/dir/m.csv";
  CHECK(contains(error_of([&] { MetricsLog log(missing); }), missing));
}
