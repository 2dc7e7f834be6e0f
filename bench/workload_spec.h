// The reference workloads of shared/WORKLOADS.md as plain data (shapes, batch, warm-up /
// timed counts, analytic FLOP counts), the result record, and its table / JSON / CSV
// output. Shared by `kiln bench` (bench/workloads.cpp) and bench/libtorch/bench_libtorch.cpp,
// so both print the same table and write the same schema. Depends on neither kiln nor torch.
#pragma once
#include <malloc.h>
#include <omp.h>
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>
#if defined(__AVX512F__) || defined(__AVX__) || defined(__SSE2__)
#include <immintrin.h>
#endif

namespace kiln::bench {

/// The five reference workloads, in the order they run.
inline const std::vector<std::string>& workload_names() {
  static const std::vector<std::string> names = {"mlp", "lenet", "convnet", "gpt", "sgemm"};
  return names;
}

/// One run of one workload: the model's shapes and the timing counts.
struct WorkloadConfig {
  std::string name;       ///< mlp | lenet | convnet | gpt | sgemm
  std::string shape_set;  ///< the model's shape: "reference" (WORKLOADS.md table) or "gpt2-small"
  int64_t batch = 0;      ///< samples per step (sequences for gpt); n for sgemm
  int warmup = 0, timed = 0;
  // gpt only
  int64_t vocab = 0, context = 0, layers = 0, heads = 0, width = 0;
  std::string precision = "fp32";  ///< fp32 | tf32 | bf16 (autocast)

  bool is_sgemm() const { return name == "sgemm"; }
  /// Samples (tokens for gpt) one step processes; 0 for sgemm.
  int64_t items_per_step() const {
    if (is_sgemm()) return 0;
    return name == "gpt" ? batch * context : batch;
  }
  const char* item_unit() const { return is_sgemm() ? "-" : (name == "gpt" ? "tok/s" : "smp/s"); }
  /// Same model, batch and precision (what a CPU-vs-GPU speedup must compare).
  bool same_shape(const WorkloadConfig& o) const {
    return name == o.name && batch == o.batch && precision == o.precision && shape_set == o.shape_set && vocab == o.vocab &&
           context == o.context && layers == o.layers && heads == o.heads && width == o.width;
  }
  /// "128", "16x128" (gpt: sequences x tokens) or "n=1024" (sgemm), for tables.
  std::string batch_label() const {
    if (is_sgemm()) return "n=" + std::to_string(batch);
    if (name == "gpt") return std::to_string(batch) + "x" + std::to_string(context);
    return std::to_string(batch);
  }
};

/// The default config of a workload (throws std::invalid_argument on an unknown name).
/// gpu_shapes picks WORKLOADS.md's larger GPU batches and the GPT-2 small shape.
/// For sgemm, `batch` is the first of sgemm_sizes().
inline WorkloadConfig default_config(const std::string& name, bool gpu_shapes) {
  WorkloadConfig c;
  c.name = name;
  c.shape_set = gpu_shapes && name == "gpt" ? "gpt2-small" : "reference";  // others differ in batch only
  if (name == "mlp") {
    c.batch = gpu_shapes ? 4096 : 128, c.warmup = 5, c.timed = 50;
  } else if (name == "lenet") {
    c.batch = gpu_shapes ? 1024 : 64, c.warmup = 5, c.timed = 50;
  } else if (name == "convnet") {
    c.batch = gpu_shapes ? 1024 : 64, c.warmup = 3, c.timed = 20;
  } else if (name == "gpt") {
    c.warmup = 3, c.timed = 20;
    if (gpu_shapes)
      c.batch = 64, c.vocab = 50304, c.context = 256, c.layers = 12, c.heads = 12, c.width = 768;
    else
      c.batch = 16, c.vocab = 96, c.context = 128, c.layers = 4, c.heads = 4, c.width = 128;
  } else if (name == "sgemm") {
    c.batch = gpu_shapes ? 1024 : 256, c.warmup = 2, c.timed = 10;
  } else {
    std::string valid;
    for (const auto& n : workload_names()) valid += (valid.empty() ? "" : ", ") + n;
    throw std::invalid_argument("unknown workload '" + name + "'; valid workloads: " + valid);
  }
  return c;
}

/// Matrix sizes the sgemm workload runs (WORKLOADS.md: 256, 1024, 2048 on the CPU).
inline std::vector<int64_t> sgemm_sizes(bool gpu_shapes, bool smoke) {
  if (smoke) return {128};
  if (gpu_shapes) return {1024, 4096, 8192};
  return {256, 1024, 2048};
}

/// Smoke settings (CI): one warm-up, one timed step, a small batch.
inline void make_smoke(WorkloadConfig& c) {
  c.warmup = 1, c.timed = 1;
  if (c.name == "mlp") c.batch = 16;
  else if (c.name == "lenet" || c.name == "convnet") c.batch = 8;
  else if (c.name == "gpt") c.batch = 2;
}

/// Analytic floating-point operations of one training step (one product for sgemm).
/// Counts the multiply-adds of GEMMs and convolutions only (2 FLOPs each): the forward
/// product, the weight-gradient product, and the input-gradient product except for the
/// first layer (its input needs no gradient). Attention counts the full T x T score and
/// value products (causal masking not discounted, as PaLM's MFU does). Elementwise ops,
/// norms, softmax, losses and the optimizer update are not counted.
inline double train_flops(const WorkloadConfig& c) {
  struct Gemm {
    double m, k, n;     // (m x k) @ (k x n)
    bool input_grad;    // the backward computes a gradient for the input too
  };
  const double B = double(c.batch);
  std::vector<Gemm> g;
  if (c.name == "sgemm") return 2.0 * B * B * B;
  if (c.name == "mlp") {
    g = {{B, 784, 512, false}, {B, 512, 512, true}, {B, 512, 10, true}};
  } else if (c.name == "lenet") {  // conv as GEMM: m = N*Hout*Wout, k = Cin*kh*kw, n = Cout
    g = {{B * 28 * 28, 1 * 25, 6, false}, {B * 10 * 10, 6 * 25, 16, true},
         {B, 400, 120, true}, {B, 120, 84, true}, {B, 84, 10, true}};
  } else if (c.name == "convnet") {
    g = {{B * 28 * 28, 1 * 9, 32, false}, {B * 28 * 28, 32 * 9, 32, true}, {B * 14 * 14, 32 * 9, 64, true},
         {B * 14 * 14, 64 * 9, 64, true}, {B, 3136, 128, true}, {B, 128, 10, true}};
  } else if (c.name == "gpt") {
    const double BT = B * double(c.context), T = double(c.context), C = double(c.width);
    for (int64_t l = 0; l < c.layers; ++l) {
      g.push_back({BT, C, 3 * C, true});  // qkv projection
      g.push_back({BT, C, T, true});      // q k^T over all heads: B*H*T*T*hd = BT*T*C
      g.push_back({BT, T, C, true});      // attention weights @ v
      g.push_back({BT, C, C, true});      // output projection
      g.push_back({BT, C, 4 * C, true});  // MLP up
      g.push_back({BT, 4 * C, C, true});  // MLP down
    }
    g.push_back({BT, C, double(c.vocab), true});  // head
  } else {
    return 0.0;
  }
  double flops = 0.0;
  for (const auto& e : g) flops += 2.0 * e.m * e.k * e.n * (e.input_grad ? 3.0 : 2.0);
  return flops;
}

// ---------------------------------------------------------------------------------------
// Results

/// The outcome of one workload config on one device (or why it did not run).
struct Result {
  std::string framework;           ///< "kiln" or "libtorch"
  WorkloadConfig config;
  std::string device;              ///< "cpu", "cuda"
  std::string status = "ok";       ///< "ok", or "unavailable: <why>" / "error: <message>"
  int threads = 0;
  std::vector<double> step_ms;     ///< the timed steps
  double median_ms = NAN, min_ms = NAN, max_ms = NAN;
  double flops_per_step = 0.0;
  double peak_gflops = NAN;        ///< the device's peak for this precision; NaN = unknown
  int64_t alloc_peak_bytes = -1;   ///< allocator high-water mark during the timed steps; -1 unknown
  int64_t rss_peak_bytes = -1;     ///< process VmHWM after the timed steps; -1 unknown

  bool ok() const { return status == "ok"; }
  double items_per_s() const {
    return config.items_per_step() > 0 && median_ms > 0 ? double(config.items_per_step()) * 1e3 / median_ms : NAN;
  }
  double gflops() const { return median_ms > 0 ? flops_per_step / (median_ms * 1e6) : NAN; }
  /// Achieved / peak; NaN when the peak is unknown (never a guessed percentage).
  double mfu() const { return std::isfinite(peak_gflops) && peak_gflops > 0 ? gflops() / peak_gflops : NAN; }
};

/// Median (mean of the middle two for an even count), min and max of the timed steps.
inline void summarize(Result& r) {
  if (r.step_ms.empty()) return;
  std::vector<double> v = r.step_ms;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  r.median_ms = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  r.min_ms = v.front();
  r.max_ms = v.back();
}

/// Availability of one requested device.
struct DeviceInfo {
  std::string name;         ///< "cpu", "cuda"
  bool available = false;
  std::string description;  ///< CPU model / GPU name, or why the device is unavailable
};

/// Everything one `bench` invocation measured.
struct Report {
  std::string framework, version, backend;  ///< backend: GEMM library etc.
  std::string date;                         ///< ISO 8601 UTC
  std::string cpu_model;
  int threads = 0;
  double cpu_peak_gflops = NAN;
  std::string cpu_peak_method;
  std::string rss_scope;  ///< what the RSS peak covers
  std::vector<DeviceInfo> devices;
  std::vector<Result> results;
};

// ---------------------------------------------------------------------------------------
// Host queries

inline double now_ms() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double, std::milli>(clock::now().time_since_epoch()).count();
}

inline std::string iso_date_utc() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

/// The "model name" line of /proc/cpuinfo ("unknown CPU" when absent).
inline std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) return line.substr(line.find_first_not_of(" \t", p + 1));
    }
  return "unknown CPU";
}

/// The process's peak resident set (VmHWM of /proc/self/status) in bytes; -1 if unreadable.
inline int64_t process_peak_rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return int64_t(std::atoll(line.c_str() + 6)) * 1024;
  return -1;
}

/// Returns freed heap to the OS and resets VmHWM to the current RSS (Linux >= 4.0:
/// "5" > /proc/self/clear_refs), so the next VmHWM read covers what ran since. Returns
/// false where the kernel refuses: VmHWM then stays the high-water mark since start.
inline bool reset_peak_rss() {
  malloc_trim(0);
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

/// The CPU's measured FLOP ceiling: `threads` OpenMP threads each run 12 independent
/// chains of vector FMAs (AVX-512, else AVX2+FMA, else SSE2 multiply-adds, else scalar:
/// the widest vectors this build's own kernels can use) from registers for about
/// `seconds`; the best of 5 rounds. This is the hardware's reachable fp32 peak at the
/// current clocks, independent of any GEMM library, so kiln and libtorch share it.
inline double measure_cpu_peak_gflops(int threads, double seconds = 0.05) {
#if defined(__AVX512F__)
  using V = __m512;
  constexpr int kLanes = 16;
  auto fma = [](V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); };
  auto splat = [](float x) { return _mm512_set1_ps(x); };
#elif defined(__AVX2__) && defined(__FMA__)
  using V = __m256;
  constexpr int kLanes = 8;
  auto fma = [](V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); };
  auto splat = [](float x) { return _mm256_set1_ps(x); };
#elif defined(__SSE2__)  // any x86-64 build without -march: 4 lanes, multiply then add
  using V = __m128;
  constexpr int kLanes = 4;
  auto fma = [](V a, V b, V c) { return _mm_add_ps(_mm_mul_ps(a, b), c); };
  auto splat = [](float x) { return _mm_set1_ps(x); };
#else
  using V = float;
  constexpr int kLanes = 1;
  auto fma = [](V a, V b, V c) { return a * b + c; };
  auto splat = [](float x) { return x; };
#endif
  auto sum = [](V v) {  // the lanes of v, added in double
    float f[kLanes];
    std::memcpy(f, &v, sizeof f);
    double s = 0.0;
    for (float x : f) s += x;
    return s;
  };
  constexpr int kChains = 12;
  auto run = [&](int64_t iters) {  // seconds for iters x kChains FMAs per thread
    double sink = 0.0;
    const double t0 = now_ms();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
      V acc[kChains];
      for (int k = 0; k < kChains; ++k) acc[k] = splat(1e-3f * float(k + 1 + omp_get_thread_num()));
      const V mul = splat(0.999999f), add = splat(1e-7f);
      for (int64_t i = 0; i < iters; ++i)
        for (int k = 0; k < kChains; ++k) acc[k] = fma(acc[k], mul, add);
      for (int k = 0; k < kChains; ++k) sink += sum(acc[k]);
    }
    const double dt = (now_ms() - t0) * 1e-3;
    if (sink == 12345.0) std::fputs("", stderr);  // keeps the loop alive
    return dt;
  };
  // A fixed amount of work per round (about `seconds` at 12 cycles per iteration and
  // 3 GHz; less on a CPU with two FMA ports) rather than a calibration, which a busy
  // machine would fool into tiny rounds dominated by thread wake-up.
  const int64_t iters = std::max<int64_t>(100000, int64_t(seconds * 2.5e8));
  double best = 0.0;
  for (int r = 0; r < 5; ++r) {
    const double dt = run(iters);
    const double flops = double(threads) * double(iters) * kChains * kLanes * 2.0;
    best = std::max(best, flops / dt * 1e-9);
  }
  return best;
}

/// Dense (no sparsity) peak TFLOP/s of a GPU in one precision, from vendor data sheets.
struct GpuPeak {
  const char* key;  ///< matched as a whole word in the device name ("A10" does not match "A100")
  double fp32, tf32, bf16;  ///< TFLOP/s; NaN where the GPU has no such mode
};

/// The peak table, most specific keys first (shown by `kiln bench --help`).
inline const std::vector<GpuPeak>& gpu_peak_table() {
  static const std::vector<GpuPeak> t = {
      {"H200 NVL", 60.0, 417.5, 835.5},  {"H200", 67.0, 494.7, 989.4},
      {"H100 PCIe", 51.2, 378.0, 756.0}, {"H100 NVL", 60.0, 417.5, 835.5},
      {"H100", 67.0, 494.7, 989.4},      {"A100", 19.5, 156.0, 312.0},
      {"A10", 31.2, 62.5, 125.0},        {"L40S", 91.6, 183.0, 362.1},
      {"L4", 30.3, 60.0, 121.0},         {"RTX 4090", 82.6, 82.6, 165.2},
      {"RTX 3090", 35.6, 35.6, 71.0},    {"V100", 15.7, NAN, NAN},
      {"T4", 8.1, NAN, NAN},
  };
  return t;
}

/// Peak GFLOP/s of the named GPU for "fp32" | "tf32" | "bf16"; NaN when the GPU is not in
/// the table or has no such mode ("peak unknown" is printed, never a guessed percentage).
inline double gpu_peak_gflops(const std::string& device_name, const std::string& precision) {
  auto word_at = [&](size_t pos, size_t len) {
    auto boundary = [&](size_t i) { return !std::isalnum(static_cast<unsigned char>(device_name[i])); };
    return (pos == 0 || boundary(pos - 1)) && (pos + len == device_name.size() || boundary(pos + len));
  };
  for (const auto& e : gpu_peak_table()) {
    const std::string key = e.key;
    for (size_t p = device_name.find(key); p != std::string::npos; p = device_name.find(key, p + 1)) {
      if (!word_at(p, key.size())) continue;
      const double tf = precision == "fp32" ? e.fp32 : precision == "tf32" ? e.tf32 : precision == "bf16" ? e.bf16 : NAN;
      return tf * 1e3;
    }
  }
  return NAN;
}

/// The first NVIDIA GPU's model name from the driver's /proc files ("" when none): read
/// without the CUDA runtime, so both benches (and a build without CUDA) name the same GPU.
inline std::string nvidia_gpu_name() {
  std::FILE* p = popen("cat /proc/driver/nvidia/gpus/*/information 2>/dev/null", "r");
  if (!p) return "";
  char line[512];
  std::string name;
  while (std::fgets(line, sizeof line, p))
    if (name.empty() && std::string(line).rfind("Model:", 0) == 0) {
      name = line + 6;
      name.erase(0, name.find_first_not_of(" \t"));
      while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    }
  pclose(p);
  return name;
}

// ---------------------------------------------------------------------------------------
// Output

inline std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}
inline std::string mib(int64_t bytes) { return bytes < 0 ? "-" : fmt("%.1f", double(bytes) / 1048576.0); }

/// Human-readable rate: 37536 -> "37.5k".
inline std::string si(double v) {
  if (!std::isfinite(v)) return "-";
  if (v >= 1e9) return fmt("%.2fG", v / 1e9);
  if (v >= 1e6) return fmt("%.2fM", v / 1e6);
  if (v >= 1e3) return fmt("%.1fk", v / 1e3);
  return fmt("%.1f", v);
}

/// Pads / right-aligns the columns of a table (first row = header) for the terminal.
inline std::string format_columns(const std::vector<std::vector<std::string>>& rows, size_t left_cols) {
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

/// The GPU speedup table: every cuda result with a cpu result of the same framework,
/// workload, shapes, batch and precision; "" when there is none.
inline std::string format_speedup(const std::vector<Result>& results) {
  std::vector<std::vector<std::string>> sp = {
      {"framework", "workload", "prec", "batch", "cpu ms", "cuda ms", "GPU speedup"}};
  for (const auto& g : results) {
    if (g.device != "cuda" || !g.ok()) continue;
    for (const auto& c : results)
      if (c.device == "cpu" && c.ok() && c.framework == g.framework && c.config.same_shape(g.config))
        sp.push_back({g.framework, g.config.name, g.config.precision, g.config.batch_label(), fmt("%.2f", c.median_ms),
                      fmt("%.2f", g.median_ms), fmt("%.1fx", c.median_ms / g.median_ms)});
  }
  return sp.size() > 1 ? "\n" + format_columns(sp, 4) : "";
}

/// The terminal table of a report: one row per result, then the notes on the columns.
inline std::string format_table(const Report& rep) {
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
    rows.push_back({r.framework, c.name, r.device, c.precision, c.batch_label(), fmt("%.2f", r.median_ms),
                    fmt("%.2f", r.min_ms) + "-" + fmt("%.2f", r.max_ms),
                    std::isfinite(ips) ? si(ips) + " " + c.item_unit() : "-", fmt("%.1f", r.gflops()),
                    std::isfinite(mfu) ? fmt("%.1f%%", 100.0 * mfu) : "peak unknown", mib(r.alloc_peak_bytes),
                    mib(r.rss_peak_bytes)});
  }
  std::string out = rep.framework + " " + rep.version + " (" + rep.backend + "), " + std::to_string(rep.threads) +
                    " CPU threads, " + rep.cpu_model + "\n";
  for (const auto& d : rep.devices)
    if (!d.available) out += d.name + ": not available (" + d.description + ")\n";
  out += format_columns(rows, 5);
  out += format_speedup(rep.results);
  for (const auto& n : notes) out += "note: " + n + "\n";
  out += "items/s from the median step; GFLOP/s = analytic GEMM/conv FLOPs per step / median; MFU = GFLOP/s / "
         "device peak (cpu: " + rep.cpu_peak_method + " = " + fmt("%.1f", rep.cpu_peak_gflops) +
         " GFLOP/s); alloc = allocator high-water mark over the timed steps; RSS = " + rep.rss_scope + "\n";
  return out;
}

/// A JSON string literal.
inline std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      o += '\\';
      o += char(ch);
    } else if (ch < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", unsigned(ch));
      o += b;
    } else {
      o += char(ch);
    }
  }
  return o + "\"";
}
/// A JSON number (null for NaN / inf).
inline std::string json_num(double v) { return std::isfinite(v) ? fmt("%.9g", v) : "null"; }

/// The report as JSON (schema "kiln-bench/1": meta fields, devices[], results[]).
inline std::string to_json(const Report& rep) {
  std::ostringstream o;
  o << "{\n  \"schema\": \"kiln-bench/1\",\n  \"framework\": " << json_str(rep.framework)
    << ",\n  \"version\": " << json_str(rep.version) << ",\n  \"backend\": " << json_str(rep.backend)
    << ",\n  \"date\": " << json_str(rep.date) << ",\n  \"cpu\": " << json_str(rep.cpu_model)
    << ",\n  \"threads\": " << rep.threads << ",\n  \"cpu_peak_gflops\": " << json_num(rep.cpu_peak_gflops)
    << ",\n  \"cpu_peak_method\": " << json_str(rep.cpu_peak_method) << ",\n  \"rss_scope\": " << json_str(rep.rss_scope)
    << ",\n  \"devices\": [";
  for (size_t i = 0; i < rep.devices.size(); ++i) {
    const auto& d = rep.devices[i];
    o << (i ? ",\n" : "\n") << "    {\"name\": " << json_str(d.name) << ", \"available\": " << (d.available ? "true" : "false")
      << ", \"description\": " << json_str(d.description) << "}";
  }
  o << "\n  ],\n  \"results\": [";
  for (size_t i = 0; i < rep.results.size(); ++i) {
    const auto& r = rep.results[i];
    const auto& c = r.config;
    o << (i ? ",\n" : "\n") << "    {\"framework\": " << json_str(r.framework) << ", \"workload\": " << json_str(c.name)
      << ", \"device\": " << json_str(r.device) << ", \"precision\": " << json_str(c.precision)
      << ", \"shapes\": " << json_str(c.shape_set) << ", \"batch\": " << c.batch
      << ", \"items_per_step\": " << c.items_per_step() << ", \"warmup\": " << c.warmup << ", \"timed\": " << c.timed
      << ", \"threads\": " << r.threads << ", \"status\": " << json_str(r.status)
      << ", \"median_ms\": " << json_num(r.median_ms) << ", \"min_ms\": " << json_num(r.min_ms)
      << ", \"max_ms\": " << json_num(r.max_ms) << ", \"items_per_s\": " << json_num(r.items_per_s())
      << ", \"flops_per_step\": " << json_num(r.flops_per_step) << ", \"gflops\": " << json_num(r.ok() ? r.gflops() : NAN)
      << ", \"peak_gflops\": " << json_num(r.peak_gflops) << ", \"mfu\": " << json_num(r.ok() ? r.mfu() : NAN)
      << ", \"alloc_peak_bytes\": " << r.alloc_peak_bytes << ", \"rss_peak_bytes\": " << r.rss_peak_bytes
      << ", \"step_ms\": [";
    for (size_t k = 0; k < r.step_ms.size(); ++k) o << (k ? ", " : "") << json_num(r.step_ms[k]);
    o << "]}";
  }
  o << "\n  ]\n}\n";
  return o.str();
}

/// CSV columns, one row per result (no field contains a comma: statuses are sanitised).
inline const char* csv_header() {
  return "framework,workload,device,precision,shapes,batch,items_per_step,warmup,timed,threads,status,median_ms,"
         "min_ms,max_ms,items_per_s,flops_per_step,gflops,peak_gflops,mfu,alloc_peak_bytes,rss_peak_bytes";
}

inline std::string to_csv(const Report& rep) {
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

/// Writes text to path atomically (temp file in the same folder, then rename); throws
/// std::runtime_error naming the path on failure.
inline void write_text_atomic(const std::string& path, const std::string& text) {
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

/// Splits "a,b,c" at commas, dropping empty items.
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, ','))
    if (!cur.empty()) out.push_back(cur);
  return out;
}

/// Parses a batch list like "16,32,...,1024" (the "..." continues the ratio of the two
/// numbers before it up to the number after it). Throws std::invalid_argument.
inline std::vector<int64_t> parse_batch_list(const std::string& s) {
  const auto items = split_list(s);
  std::vector<int64_t> out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i] == "...") {
      if (out.size() < 2 || i + 1 >= items.size())
        throw std::invalid_argument("batch list '" + s + "': '...' needs two numbers before it and one after");
      const int64_t a = out[out.size() - 2], b = out.back();
      if (b <= a) throw std::invalid_argument("batch list '" + s + "': '...' needs an increasing run before it");
      const int64_t end = std::atoll(items[i + 1].c_str());
      const double ratio = double(b) / double(a);
      for (double x = double(b) * ratio; x < double(end) - 0.5; x *= ratio) out.push_back(int64_t(std::llround(x)));
      continue;
    }
    char* e = nullptr;
    const long long v = std::strtoll(items[i].c_str(), &e, 10);
    if (items[i].empty() || *e != '\0' || v < 1)
      throw std::invalid_argument("batch list '" + s + "': '" + items[i] + "' is not a positive integer");
    out.push_back(v);
  }
  if (out.empty()) throw std::invalid_argument("batch list '" + s + "' is empty");
  return out;
}

/// The configs one bench invocation runs for `names` (in order) with the given options:
/// sgemm expands to its sizes; batches (when non-empty) replace the default batch of the
/// model workloads; smoke shrinks to one warm-up + one timed step at a small batch;
/// warmup/timed >= 0 override the counts.
inline std::vector<WorkloadConfig> expand_configs(const std::vector<std::string>& names, bool gpu_shapes, bool smoke,
                                                  const std::vector<int64_t>& batches, int warmup, int timed,
                                                  const std::vector<std::string>& precisions) {
  std::vector<WorkloadConfig> out;
  for (const auto& n : names) {
    WorkloadConfig base = default_config(n, gpu_shapes);
    if (smoke) make_smoke(base);
    std::vector<int64_t> bs = base.is_sgemm() ? sgemm_sizes(gpu_shapes, smoke)
                                              : (batches.empty() ? std::vector<int64_t>{base.batch} : batches);
    for (const auto& p : precisions)
      for (int64_t b : bs) {
        WorkloadConfig c = base;
        c.batch = b;
        c.precision = p;
        if (warmup >= 0) c.warmup = warmup;
        if (timed >= 0) c.timed = timed;
        out.push_back(c);
      }
  }
  return out;
}

}  // namespace kiln::bench
