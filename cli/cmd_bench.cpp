// `kiln bench`: runs the reference workloads (bench/workloads.h) on the chosen devices and
// prints a table, with JSON / CSV for scripts; `kiln bench --compare` merges the CSVs of
// interleaved kiln and libtorch runs (scripts/bench.sh) into medians, ratios and PNG charts.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <utility>
#include "bench/ladder.h"
#include "bench/workloads.h"
#include "cli/command_line.h"
#include "cli/commands.h"
#include "kiln/monitor/plot.h"
#include "kiln/core/error.h"
#include "kiln/core/json.h"
#include "kiln/ops/cpu/sgemm.h"

namespace kiln::cli {

using namespace kiln::monitor;  // the plots

namespace {

/// The flags of `kiln bench`, bound one by one in cmd_bench.
struct BenchFlags {
  std::string workloads = "all", devices = "cpu", precision = "fp32", sweep_batch, json, csv, plot_dir, compare;
  int threads = 2;
  int64_t batch = 0, warmup = -1, timed = -1;  // 0 / -1: the workload's own
  bool smoke = false, gpu_shapes = false, cpu_shapes = false, ladder = false;
};

/// What --help prints after the flags: the peaks behind the MFU column.
std::string peaks_help() {
  std::ostringstream os;
  os << "GPU peaks used for MFU (dense TFLOP/s fp32 / tf32 / bf16; other GPUs: \"peak unknown\"):\n";
  for (const auto& g : bench::gpu_peak_table()) {
    auto v = [](double x) { return std::isfinite(x) ? bench::fmt("%.1f", x) : std::string("-"); };
    os << "  " << g.key << ": " << v(g.fp32) << " / " << v(g.tf32) << " / " << v(g.bf16) << "\n";
  }
  const auto rates = bench::cpu_core_rates(bench::cpu_model_name(), bench::cpu_features());
  os << "CPU peak used for MFU: FLOP/cycle per core x threads x the clock measured at start; this CPU ("
     << rates.isa << "): " << rates.fp32 << " fp32, " << rates.bf16 << " bf16, " << rates.fp16
     << " fp16 per cycle. An FMA loop cross-checks it; an MFU above 100% is never printed.\n";
  return os.str();
}

/// Converts std::invalid_argument / runtime_error of the shared header to kiln::Error.
template <class F>
auto as_kiln_error(const F& f) {
  try {
    return f();
  } catch (const kiln::Error&) {
    throw;
  } catch (const std::exception& e) {
    KILN_FAIL("kiln bench: ", e.what());
  }
}

void write_outputs(const BenchFlags& f, const std::string& json, const std::string& csv) {
  if (!f.json.empty()) as_kiln_error([&] { bench::write_text_atomic(f.json, json); return 0; });
  if (!f.csv.empty()) as_kiln_error([&] { bench::write_text_atomic(f.csv, csv); return 0; });
}

// ---- plots ----

/// Line chart of GPU speedup (cpu ms / cuda ms) against batch size, one series per
/// framework, workload and precision (needs cpu and cuda results of the same shapes).
/// Returns false when there is nothing to draw.
bool plot_speedup(const std::string& path, const std::vector<bench::Result>& results) {
  std::map<std::string, Series> by_workload;
  for (const auto& g : results) {
    if (g.device != "cuda" || !g.ok() || g.config.is_sgemm()) continue;
    for (const auto& c : results)
      if (c.device == "cpu" && c.ok() && c.framework == g.framework && c.config.same_shape(g.config)) {
        const std::string name = g.framework + " " + g.config.name + " " + g.config.precision;
        Series& s = by_workload[name];
        s.name = name;
        s.x.push_back(double(g.config.batch));
        s.y.push_back(c.median_ms / g.median_ms);
      }
  }
  if (by_workload.empty()) return false;
  Panel p{.title = "GPU speedup (cpu ms / cuda ms)", .x_label = "batch size", .y_label = "speedup", .series = {},
          .log_y = true};
  for (auto& [name, s] : by_workload) p.series.push_back(s);
  write_plot_png(path, {p}, 900, 420);
  return true;
}

/// Bar chart of one run's median step times (ms), one bar per workload config.
void plot_run(const std::string& path, const bench::Report& rep) {
  BarChart ch{.title = rep.framework + " median step time", .y_label = "ms", .labels = {}, .groups = {}};
  std::map<std::string, std::vector<double>> dev_values;
  std::vector<std::string> devices;
  for (const auto& r : rep.results) {
    if (!r.ok()) continue;
    const std::string label = r.config.name + " " + r.config.batch_label();
    if (std::find(ch.labels.begin(), ch.labels.end(), label) == ch.labels.end()) ch.labels.push_back(label);
    if (std::find(devices.begin(), devices.end(), r.device + " " + r.config.precision) == devices.end())
      devices.push_back(r.device + " " + r.config.precision);
  }
  for (const auto& d : devices) {
    std::vector<double> v(ch.labels.size(), NAN);
    for (const auto& r : rep.results) {
      if (!r.ok() || r.device + " " + r.config.precision != d) continue;
      const auto it = std::find(ch.labels.begin(), ch.labels.end(), r.config.name + " " + r.config.batch_label());
      v[size_t(it - ch.labels.begin())] = r.median_ms;
    }
    ch.groups.push_back({d, v});
  }
  write_bar_chart_png(path, ch, 1000, 420);
}

// ---- compare: merge the CSVs of interleaved runs ----

/// One CSV row as column -> text.
using Row = std::map<std::string, std::string>;

std::vector<Row> read_csv(const std::string& path) {
  std::ifstream f(path);
  KILN_CHECK(f.good(), "kiln bench --compare: cannot open '", path, "'");
  std::string line;
  KILN_CHECK(std::getline(f, line), "kiln bench --compare: '", path, "' is empty");
  const std::vector<std::string> header = bench::split_list(line);
  KILN_CHECK(line == bench::csv_header(), "kiln bench --compare: '", path,
             "' is not a bench CSV; expected the header\n  ", bench::csv_header(), "\ngot\n  ", line);
  std::vector<Row> rows;
  int line_no = 1;
  while (std::getline(f, line)) {
    ++line_no;
    if (line.empty()) continue;
    std::vector<std::string> cells;
    std::string cell;
    std::istringstream in(line);
    while (std::getline(in, cell, ',')) cells.push_back(cell);
    if (!line.empty() && line.back() == ',') cells.push_back("");
    KILN_CHECK(cells.size() == header.size(), "kiln bench --compare: ", path, ":", line_no, " has ", cells.size(),
               " fields, expected ", header.size());
    Row r;
    for (size_t i = 0; i < header.size(); ++i) r[header[i]] = cells[i];
    rows.push_back(r);
  }
  return rows;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Per framework: the per-run medians (one per round) and the peaks.
struct Side {
  std::vector<double> medians;
  int64_t alloc_peak = -1, rss_peak = -1;
  double median() const { return median_of(medians); }
};

/// Lowest and highest kiln/reference ratio of one round (the runs in file order, which
/// scripts/bench.sh interleaves); NaN unless both sides have the same number of runs.
std::pair<double, double> round_ratio_range(const Side& a, const Side& b) {
  if (a.medians.empty() || a.medians.size() != b.medians.size()) return {NAN, NAN};
  double lo = INFINITY, hi = -INFINITY;
  for (size_t i = 0; i < a.medians.size(); ++i) {
    const double r = a.medians[i] / b.medians[i];
    lo = std::min(lo, r);
    hi = std::max(hi, r);
  }
  return {lo, hi};
}

int run_compare(const BenchFlags& f) {
  const std::vector<std::string> files = bench::split_list(f.compare);
  KILN_CHECK(!files.empty(), "kiln bench --compare: expected a comma-separated list of CSV files");
  // key: workload|device|precision|shapes|batch, in first-seen order
  std::vector<std::string> keys;
  std::vector<bench::Result> merged;  // one per key and framework, median over rounds (for the speedup chart)
  std::map<std::string, std::map<std::string, Side>> table;
  std::map<std::string, Row> key_row;
  std::set<std::string> frameworks;
  for (const auto& path : files)
    for (const Row& r : read_csv(path)) {
      if (r.at("status") != "ok") continue;
      const std::string key =
          r.at("workload") + "|" + r.at("device") + "|" + r.at("precision") + "|" + r.at("shapes") + "|" + r.at("batch");
      if (!table.count(key)) keys.push_back(key), key_row[key] = r;
      Side& s = table[key][r.at("framework")];
      frameworks.insert(r.at("framework"));
      s.medians.push_back(std::atof(r.at("median_ms").c_str()));
      s.alloc_peak = std::max<int64_t>(s.alloc_peak, std::atoll(r.at("alloc_peak_bytes").c_str()));
      s.rss_peak = std::max<int64_t>(s.rss_peak, std::atoll(r.at("rss_peak_bytes").c_str()));
    }
  KILN_CHECK(!keys.empty(), "kiln bench --compare: no successful results in ", f.compare);
  // the reference: libtorch (C++, scripts/bench.sh), else PyTorch (Python, scripts/gpu_check.sh)
  const std::string A = "kiln", B = frameworks.count("libtorch") || !frameworks.count("pytorch") ? "libtorch" : "pytorch";
  std::vector<std::vector<std::string>> rows = {{"workload", "device", "prec", "batch", "kiln ms", B + " ms",
                                                 "kiln/" + B, "per round", "rounds", "kiln alloc MiB", "torch alloc MiB",
                                                 "kiln RSS MiB", "torch RSS MiB"}};
  std::string csv = "workload,device,precision,shapes,batch,kiln_median_ms," + B +
                    "_median_ms,ratio,ratio_min,ratio_max,rounds_kiln,rounds_" +
                    B + ",kiln_alloc_peak_bytes," + B + "_alloc_peak_bytes,kiln_rss_peak_bytes," + B + "_rss_peak_bytes\n";
  json::Value js = json::Value::object(), js_rows = json::Value::array();
  js["schema"] = "kiln-bench-compare/1";
  js["files"] = files.size();
  auto jnum = [](double v) { return std::isfinite(v) ? json::Value(v) : json::Value(nullptr); };  // NaN: null
  BarChart bars{.title = "median step time (ms): kiln vs " + B, .y_label = "ms", .labels = {},
                .groups = {{A, {}}, {B, {}}}};
  BarChart rel{.title = "step time relative to " + B + " (lower is faster)", .y_label = "time / " + B + " time",
               .labels = {}, .groups = {{A, {}}, {B, {}}}};
  auto num = [](double v) { return std::isfinite(v) ? bench::fmt("%.6g", v) : std::string(); };
  // 0: not measured (bench/torch_bench.py has no allocator statistics on the CPU)
  auto peak_mib = [](int64_t bytes) { return bytes > 0 ? bench::mib(bytes) : std::string("-"); };
  for (size_t i = 0; i < keys.size(); ++i) {
    const Row& r = key_row[keys[i]];
    const Side ka = table[keys[i]].count(A) ? table[keys[i]][A] : Side{};
    const Side kb = table[keys[i]].count(B) ? table[keys[i]][B] : Side{};
    const double ma = ka.median(), mb = kb.median(), ratio = ma / mb;
    const auto [rmin, rmax] = round_ratio_range(ka, kb);
    bench::WorkloadConfig c;
    c.name = r.at("workload");
    c.batch = std::atoll(r.at("batch").c_str());
    c.context = c.name == "gpt" ? std::atoll(r.at("items_per_step").c_str()) / std::max<int64_t>(1, c.batch) : 0;
    const std::string label = c.batch_label();
    auto ms = [](double v) { return std::isfinite(v) ? bench::fmt("%.2f", v) : std::string("-"); };
    rows.push_back({c.name, r.at("device"), r.at("precision"), label, ms(ma), ms(mb),
                    std::isfinite(ratio) ? bench::fmt("%.2f", ratio) : "-",
                    std::isfinite(rmin) ? bench::fmt("%.2f", rmin) + "-" + bench::fmt("%.2f", rmax) : "-",
                    std::to_string(ka.medians.size()) + "/" + std::to_string(kb.medians.size()),
                    peak_mib(ka.alloc_peak), peak_mib(kb.alloc_peak), peak_mib(ka.rss_peak), peak_mib(kb.rss_peak)});
    csv += c.name + "," + r.at("device") + "," + r.at("precision") + "," + r.at("shapes") + "," + r.at("batch") + "," +
           num(ma) + "," + num(mb) + "," + num(ratio) + "," + num(rmin) + "," + num(rmax) + "," +
           std::to_string(ka.medians.size()) + "," +
           std::to_string(kb.medians.size()) + "," + std::to_string(ka.alloc_peak) + "," +
           std::to_string(kb.alloc_peak) + "," + std::to_string(ka.rss_peak) + "," + std::to_string(kb.rss_peak) + "\n";
    json::Value jr = json::Value::object();
    jr["workload"] = c.name, jr["device"] = r.at("device"), jr["precision"] = r.at("precision");
    jr["shapes"] = r.at("shapes"), jr["batch"] = c.batch;
    jr["kiln_median_ms"] = jnum(ma), jr[B + "_median_ms"] = jnum(mb);
    jr["ratio"] = jnum(ratio), jr["ratio_min"] = jnum(rmin), jr["ratio_max"] = jnum(rmax);
    jr["rounds_kiln"] = ka.medians.size(), jr["rounds_" + B] = kb.medians.size();
    jr["kiln_alloc_peak_bytes"] = ka.alloc_peak, jr[B + "_alloc_peak_bytes"] = kb.alloc_peak;
    jr["kiln_rss_peak_bytes"] = ka.rss_peak, jr[B + "_rss_peak_bytes"] = kb.rss_peak;
    js_rows.push_back(std::move(jr));
    c.precision = r.at("precision");
    c.shape_set = r.at("shapes");
    for (const auto& [fw, side] : table[keys[i]]) {
      bench::Result m;
      m.framework = fw, m.config = c, m.device = r.at("device"), m.median_ms = side.median();
      merged.push_back(m);
    }
    bars.labels.push_back(c.name + " " + label + (r.at("device") == "cpu" ? "" : " " + r.at("device")) +
                          (c.precision == "fp32" ? "" : " " + c.precision));
    bars.groups[0].second.push_back(ma);
    bars.groups[1].second.push_back(mb);
    if (std::isfinite(ratio)) {
      rel.labels.push_back(bars.labels.back());
      rel.groups[0].second.push_back(ratio);
      rel.groups[1].second.push_back(1.0);
    }
  }
  js["rows"] = std::move(js_rows);
  std::cout << bench::format_columns(rows, 4) << bench::format_speedup(merged)
            << "kiln ms, " << B << " ms: median over rounds of each run's median step; ratio < 1: kiln faster; "
               "per round: lowest-highest ratio of one round's two runs; "
               "peaks: highest over rounds (RSS: per-process VmHWM, see each run's rss_scope)\n";
  for (const auto& fw : frameworks)
    if (fw != A && fw != B) std::cout << "note: framework '" << fw << "' is not compared (only kiln and " << B << ")\n";
  write_outputs(f, js.dump(2) + "\n", csv);
  if (!f.plot_dir.empty()) {
    const std::string& dir = f.plot_dir;
    write_bar_chart_png(dir + "/step_time.png", bars, std::max<int>(900, 110 * int(bars.labels.size())), 420);
    std::cout << "wrote " << dir << "/step_time.png\n";
    if (!rel.labels.empty()) {
      write_bar_chart_png(dir + "/step_time_ratio.png", rel, std::max<int>(900, 110 * int(rel.labels.size())), 420);
      std::cout << "wrote " << dir << "/step_time_ratio.png\n";
    }
    if (plot_speedup(dir + "/gpu_speedup.png", merged)) std::cout << "wrote " << dir << "/gpu_speedup.png\n";
  }
  return 0;
}

}  // namespace

int cmd_bench(int argc, char** argv, int first) {
  BenchFlags f;
  CLI::App app{"Times zero_grad + forward + loss + backward + optimizer step of the reference workloads\n"
               "(bench/workload_spec.h) and reports median step time, min-max, samples/s, GFLOP/s, MFU and\n"
               "peak memory. kiln bench --compare a.csv,b.csv,... merges interleaved kiln/libtorch (or PyTorch) runs.",
               "kiln bench"};
  setup_app(app);
  app.footer(peaks_help());
  app.add_option("--workloads", f.workloads, "comma-separated: mlp,lenet,convnet,gpt,sgemm (or all)");
  app.add_option("--devices", f.devices, "comma-separated: cpu,cuda (an unavailable one is reported, not run)");
  app.add_option("--threads", f.threads, "CPU threads (kiln::set_num_threads)")->check(CLI::Range(1, 1024));
  app.add_option("--precision", f.precision,
                 "comma-separated: fp32, tf32 (GPU), bf16 (autocast), fp16 (autocast + GradScaler)");
  app.add_option("--batch", f.batch, "batch size of the model workloads (0: the workload's, bench/workload_spec.h)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--sweep-batch", f.sweep_batch, "batch sizes to repeat over, e.g. 16,32,...,1024");
  const auto steps = CLI::Range(int64_t(-1), int64_t(1) << 30);
  app.add_option("--warmup", f.warmup, "warm-up steps (-1: per workload)")->check(steps);
  app.add_option("--timed", f.timed, "timed steps (-1: per workload)")->check(steps);
  app.add_flag("--smoke", f.smoke, "1 warm-up + 1 timed step at a small batch (CI)");
  app.add_flag("--gpu-shapes", f.gpu_shapes, "GPU shapes (large batches, GPT-2 small) on every device");
  app.add_flag("--cpu-shapes", f.cpu_shapes, "CPU shapes on every device (default: cuda gets GPU shapes)");
  app.add_option("--json", f.json, "write the results as JSON to this file");
  app.add_option("--csv", f.csv, "write the results as CSV to this file");
  app.add_option("--plot-dir", f.plot_dir, "write PNG charts to this folder");
  app.add_option("--compare", f.compare, "CSV files of bench runs (kiln and libtorch) to merge instead of running");
  app.add_flag("--ladder", f.ladder,
               "time the kernel ladder (GEMM, conv2d: reference loops to tuned kernels; GPU rungs where a GPU is "
               "visible) instead");
  parse(app, argc, argv, first);
  if (!f.compare.empty()) return run_compare(f);
  if (f.ladder) {
    std::cout << bench::run_ladder(f.threads, f.smoke);
    return 0;
  }

  const std::vector<std::string> workloads = bench::parse_workloads(f.workloads);
  const std::vector<std::string> devices = bench::split_list(f.devices);
  const std::vector<std::string> precisions = bench::split_list(f.precision);
  KILN_CHECK(!devices.empty(), "kiln bench: --devices is empty; valid devices: cpu, cuda");
  for (const auto& p : precisions)
    KILN_CHECK(p == "fp32" || p == "tf32" || p == "bf16" || p == "fp16", "kiln bench: unknown precision '", p,
               "'; valid precisions: fp32, tf32, bf16, fp16");
  KILN_CHECK(!(f.gpu_shapes && f.cpu_shapes), "kiln bench: --gpu-shapes and --cpu-shapes exclude each other");
  KILN_CHECK(!(f.batch > 0 && !f.sweep_batch.empty()), "kiln bench: give --batch or --sweep-batch, not both");
  std::vector<int64_t> batches;
  if (f.batch > 0) batches = {f.batch};
  if (!f.sweep_batch.empty()) batches = as_kiln_error([&] { return bench::parse_batch_list(f.sweep_batch); });
  for (int64_t b : batches) KILN_CHECK(b >= 1, "kiln bench: batch sizes must be >= 1, got ", b);
  KILN_CHECK(f.timed != 0, "kiln bench: --timed must be >= 1");
  const int threads = f.threads, warmup = int(f.warmup), timed = int(f.timed);
  const bool smoke = f.smoke;

  bench::Report rep;
  rep.framework = "kiln";
  rep.version = "0.1.0";
  rep.backend = sgemm_packed_available()
                    ? std::string("own ") + sgemm_packed_isa() + " sgemm, Eigen for float64, own kernels"
                    : std::string("Eigen GEMM, own kernels");
  // which GEMM bf16 products run on: a bf16 kernel (AVX512_BF16, AMX), or float32
  rep.backend += sgemm_bf16_preferred() ? std::string(", bf16 GEMM ") + sgemm_bf16_kernel() : ", bf16 on float32";
  rep.date = bench::iso_date_utc();
  rep.cpu_model = bench::cpu_model_name();
  rep.threads = int(threads);
  bool any_available = false;
  for (const auto& d : devices) {
    rep.devices.push_back(bench::kiln_device_info(d));
    any_available = any_available || rep.devices.back().available;
    if (!rep.devices.back().available)
      std::cerr << "kiln bench: " << d << ": not available (" << rep.devices.back().description << ")\n";
  }
  KILN_CHECK(any_available, "kiln bench: no requested device is available: ", rep.devices[0].name, ": not available (",
             rep.devices[0].description, ")");
  if (std::find(devices.begin(), devices.end(), "cpu") != devices.end())
    rep.cpu_peak = bench::probe_cpu_peak(int(threads), smoke ? 0.01 : 0.05);

  bool failed = false;
  for (const auto& dev : rep.devices) {
    if (!dev.available) continue;
    const bool gpu_shapes = f.gpu_shapes || (dev.name == "cuda" && !f.cpu_shapes);
    const auto configs = as_kiln_error(
        [&] { return bench::expand_configs(workloads, gpu_shapes, smoke, batches, warmup, timed, precisions); });
    for (const auto& c : configs) {
      double peak = NAN;
      if (dev.name == "cpu") peak = rep.cpu_peak.gflops(c.precision);
      else peak = bench::gpu_peak_gflops(dev.description, c.precision);
      bench::Result r;
      try {
        r = bench::run_workload(c, dev.name, int(threads), peak);
      } catch (const kiln::Error& e) {  // e.g. an op without a kernel on this device
        r.framework = "kiln", r.config = c, r.device = dev.name, r.threads = int(threads);
        r.status = std::string("error: ") + e.what();
        failed = true;
      }
      std::cerr << "kiln bench: " << c.name << " " << c.batch_label() << " " << dev.name << " " << c.precision << ": "
                << (r.ok() ? bench::fmt("%.2f ms", r.median_ms) : r.status) << "\n";
      rep.results.push_back(std::move(r));
    }
  }
  rep.rss_scope = bench::rss_peak_is_per_workload()
                      ? "process VmHWM, reset before each workload (clear_refs)"
                      : "process VmHWM since start (reset refused): includes earlier workloads";
  std::cout << bench::format_table(rep);
  write_outputs(f, bench::to_json(rep), bench::to_csv(rep));
  if (!f.plot_dir.empty()) {
    const std::string& dir = f.plot_dir;
    plot_run(dir + "/" + rep.framework + "_step_time.png", rep);
    std::cout << "wrote " << dir << "/" << rep.framework << "_step_time.png\n";
    if (plot_speedup(dir + "/gpu_speedup.png", rep.results))
      std::cout << "wrote " << dir << "/gpu_speedup.png\n";
    else
      std::cout << "no GPU speedup chart: needs cpu and cuda results (e.g. --devices cpu,cuda --sweep-batch ...)\n";
  }
  return failed ? 1 : 0;
}

}  // namespace kiln::cli
