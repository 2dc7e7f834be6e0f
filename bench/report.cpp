// The table, JSON and CSV writers of bench/report.h.
#include "bench/report.h"
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <utility>
#include "kiln/core/json.h"

namespace kiln::bench {

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string mib(int64_t bytes) { return bytes < 0 ? "-" : fmt("%.1f", double(bytes) / 1048576.0); }

std::string si(double v) {
  if (!std::isfinite(v)) return "-";
  if (v >= 1e9) return fmt("%.2fG", v / 1e9);
  if (v >= 1e6) return fmt("%.2fM", v / 1e6);
  if (v >= 1e3) return fmt("%.1fk", v / 1e3);
  return fmt("%.1f", v);
}

std::string format_columns(const std::vector<std::vector<std::string>>& rows, size_t left_cols) {
  std::vector<size_t> w;
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) {
      if (w.size() <= i) w.push_back(0);
      w[i] = std::max(w[i], r[i].size());
    }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      std::string cell = r[i];
      std::string pad(w[i] - cell.size(), ' ');
      line += (i ? "  " : "") + (i < left_cols ? cell + pad : pad + cell);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string format_speedup(const std::vector<Result>& results) {
  std::vector<std::vector<std::string>> sp = {
      {"framework", "workload", "prec", "batch", "cpu ms", "cuda ms", "GPU speedup"}};
  for (const auto& g : results) {
    if (g.device != "cuda" || !g.ok()) continue;
    for (const auto& c : results)
      if (c.device == "cpu" && c.ok() && c.framework == g.framework && c.config.same_shape(g.config))
        sp.push_back({g.framework, g.config.name, g.config.precision, g.config.batch_label(), fmt("%.2f", c.median_ms),
                      fmt("%.2f", g.median_ms), fmt("%.1fx", c.median_ms / g.median_ms)});
  }
  if (sp.size() <= 1) return "";
  std::string out = "\n";  // not "\n" + format_columns(...): a false -Wrestrict warning of GCC 12
  return out += format_columns(sp, 4);
}

std::string format_table(const Report& rep) {
  std::vector<std::vector<std::string>> rows = {{"framework", "workload", "device", "prec", "batch", "median ms",
                                                 "min-max ms", "items/s", "GFLOP/s", "MFU", "alloc MiB", "RSS MiB"}};
  std::vector<std::string> notes;
  for (const auto& r : rep.results) {
    const auto& c = r.config;
    if (!r.ok()) {
      rows.push_back({r.framework, c.name, r.device, c.precision, c.batch_label(), "-", "-", "-", "-", "-", "-", "-"});
      notes.push_back(r.device + " " + c.name + ": " + r.status);
      continue;
    }
    const double ips = r.items_per_s(), mfu = r.mfu();
    if (r.above_peak())
      notes.push_back(r.device + " " + c.name + " " + c.precision + ": " + fmt("%.1f", r.gflops()) +
                      " GFLOP/s is above the device's " + fmt("%.1f", r.peak_gflops) +
                      " GFLOP/s peak: the timing was disturbed or the peak is underestimated; no MFU shown");
    rows.push_back({r.framework, c.name, r.device, c.precision, c.batch_label(), fmt("%.2f", r.median_ms),
                    fmt("%.2f", r.min_ms) + "-" + fmt("%.2f", r.max_ms),
                    std::isfinite(ips) ? si(ips) + " " + c.item_unit() : "-", fmt("%.1f", r.gflops()),
                    std::isfinite(mfu) ? fmt("%.1f%%", 100.0 * mfu) : r.above_peak() ? "above peak" : "peak unknown",
                    mib(r.alloc_peak_bytes),
                    mib(r.rss_peak_bytes)});
  }
  std::string out = rep.framework + " " + rep.version + " (" + rep.backend + "), " + std::to_string(rep.threads) +
                    " CPU threads, " + rep.cpu_model + "\n";
  for (const auto& d : rep.devices)
    if (!d.available) out += d.name + ": not available (" + d.description + ")\n";
  out += format_columns(rows, 5);
  out += format_speedup(rep.results);
  for (const auto& n : notes) out += "note: " + n + "\n";
  const CpuPeak& p = rep.cpu_peak;
  if (!p.method.empty()) {
    out += "cpu peak: " + p.method + " = " + fmt("%.1f", p.fp32_gflops) + " GFLOP/s fp32, " +
           fmt("%.1f", p.bf16_gflops) + " bf16, " + fmt("%.1f", p.fp16_gflops) + " fp16 (FMA loop: " +
           fmt("%.1f", p.loop_gflops) +
           (std::isfinite(p.bf16_loop_gflops) ? "; VDPBF16PS loop: " + fmt("%.1f", p.bf16_loop_gflops) : std::string()) +
           ")\n";
    if (!p.note.empty()) out += "note: " + p.note + "\n";
  }
  out += "items/s from the median step; GFLOP/s = analytic GEMM/conv FLOPs per step / median; MFU = GFLOP/s / "
         "device peak for the precision; alloc = allocator high-water mark over the timed steps; RSS = " +
         rep.rss_scope + "\n";
  return out;
}

const char* csv_header() {
  return "framework,workload,device,precision,shapes,batch,items_per_step,warmup,timed,threads,status,median_ms,"
         "min_ms,max_ms,items_per_s,flops_per_step,gflops,peak_gflops,mfu,alloc_peak_bytes,rss_peak_bytes";
}

std::string to_csv(const Report& rep) {
  auto clean = [](std::string s) {
    for (char& ch : s)
      if (ch == ',' || ch == '\n' || ch == '"') ch = ch == ',' ? ';' : ' ';
    return s;
  };
  auto num = [](double v) { return std::isfinite(v) ? fmt("%.6g", v) : std::string(); };
  std::string out = std::string(csv_header()) + "\n";
  for (const auto& r : rep.results) {
    const auto& c = r.config;
    out += clean(r.framework) + "," + c.name + "," + r.device + "," + c.precision + "," + c.shape_set + "," +
           std::to_string(c.batch) + "," + std::to_string(c.items_per_step()) + "," + std::to_string(c.warmup) + "," +
           std::to_string(c.timed) + "," + std::to_string(r.threads) + "," + clean(r.status) + "," + num(r.median_ms) +
           "," + num(r.min_ms) + "," + num(r.max_ms) + "," + num(r.items_per_s()) + "," + num(r.flops_per_step) + "," +
           num(r.ok() ? r.gflops() : NAN) + "," + num(r.peak_gflops) + "," + num(r.ok() ? r.mfu() : NAN) + "," +
           std::to_string(r.alloc_peak_bytes) + "," + std::to_string(r.rss_peak_bytes) + "\n";
  }
  return out;
}

void write_text_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw std::runtime_error("cannot open '" + tmp + "' for writing");
    f << text;
    f.flush();
    if (!f) throw std::runtime_error("write to '" + tmp + "' failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot rename '" + tmp + "' to '" + path + "'");
  }
}

namespace {

/// A JSON number; null for NaN and inf, which JSON cannot hold.
json::Value number(double v) { return std::isfinite(v) ? json::Value(v) : json::Value(nullptr); }

}  // namespace

std::string to_json(const Report& rep) {
  json::Value o = json::Value::object();
  o["schema"] = "kiln-bench/1";
  o["framework"] = rep.framework;
  o["version"] = rep.version;
  o["backend"] = rep.backend;
  o["date"] = rep.date;
  o["cpu"] = rep.cpu_model;
  o["threads"] = rep.threads;
  o["cpu_peak_gflops"] = number(rep.cpu_peak.fp32_gflops);
  o["cpu_peak_bf16_gflops"] = number(rep.cpu_peak.bf16_gflops);
  o["cpu_peak_fp16_gflops"] = number(rep.cpu_peak.fp16_gflops);
  o["cpu_peak_method"] = rep.cpu_peak.method;
  o["cpu_peak_note"] = rep.cpu_peak.note;
  o["cpu_isa"] = rep.cpu_peak.rates.isa;
  o["cpu_clock_ghz"] = number(rep.cpu_peak.clock_ghz);
  o["cpu_fma_loop_gflops"] = number(rep.cpu_peak.loop_gflops);
  o["cpu_bf16_loop_gflops"] = number(rep.cpu_peak.bf16_loop_gflops);
  o["rss_scope"] = rep.rss_scope;
  json::Value devices = json::Value::array();
  for (const auto& d : rep.devices) {
    json::Value v = json::Value::object();
    v["name"] = d.name, v["available"] = d.available, v["description"] = d.description;
    devices.push_back(std::move(v));
  }
  o["devices"] = std::move(devices);
  json::Value results = json::Value::array();
  for (const auto& r : rep.results) {
    const auto& c = r.config;
    json::Value v = json::Value::object();
    v["framework"] = r.framework, v["workload"] = c.name, v["device"] = r.device, v["precision"] = c.precision;
    v["shapes"] = c.shape_set, v["batch"] = c.batch, v["items_per_step"] = c.items_per_step();
    v["warmup"] = c.warmup, v["timed"] = c.timed, v["threads"] = r.threads, v["status"] = r.status;
    v["median_ms"] = number(r.median_ms), v["min_ms"] = number(r.min_ms), v["max_ms"] = number(r.max_ms);
    v["items_per_s"] = number(r.items_per_s()), v["flops_per_step"] = number(r.flops_per_step);
    v["gflops"] = number(r.ok() ? r.gflops() : NAN), v["peak_gflops"] = number(r.peak_gflops);
    v["mfu"] = number(r.ok() ? r.mfu() : NAN);
    v["alloc_peak_bytes"] = r.alloc_peak_bytes, v["rss_peak_bytes"] = r.rss_peak_bytes;
    json::Value steps = json::Value::array();
    for (double ms : r.step_ms) steps.push_back(number(ms));
    v["step_ms"] = std::move(steps);
    results.push_back(std::move(v));
  }
  o["results"] = std::move(results);
  return o.dump(2) + "\n";
}

}  // namespace kiln::bench
