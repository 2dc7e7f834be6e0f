// The reference workloads of shared/WORKLOADS.md as plain data (shapes, batch, warm-up /
// timed counts, analytic FLOP counts), the result record and the report of one run, and
// the parsing of workload / batch lists. Shared by `kiln bench` (bench/workloads.cpp) and
// bench/libtorch/bench_libtorch.cpp, so both run the same configs; the functions are in
// bench/workload_spec.cpp (library kiln_bench_spec). Depends on neither kiln nor torch.
// Its companions: bench/system_probe.h (CPU model, peak FLOP loop, GPU peaks, RSS) and
// bench/report.h (the table, JSON and CSV writers).
#pragma once
#include "bench/system_probe.h"
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

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
WorkloadConfig default_config(const std::string& name, bool gpu_shapes);
/// Matrix sizes the sgemm workload runs (WORKLOADS.md: 256, 1024, 2048 on the CPU).
std::vector<int64_t> sgemm_sizes(bool gpu_shapes, bool smoke);
/// Smoke settings (CI): one warm-up, one timed step, a small batch.
void make_smoke(WorkloadConfig& c);
/// Analytic floating-point operations of one training step (one product for sgemm).
/// Counts the multiply-adds of GEMMs and convolutions only (2 FLOPs each): the forward
/// product, the weight-gradient product, and the input-gradient product except for the
/// first layer (its input needs no gradient). Attention counts the full T x T score and
/// value products (causal masking not discounted, as PaLM's MFU does). Elementwise ops,
/// norms, softmax, losses and the optimizer update are not counted.
double train_flops(const WorkloadConfig& c);

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
  /// GFLOP/s over the peak; NaN when the peak is unknown or the rate is above it (a
  /// disturbed timing or an underestimated peak, which the report names: never > 100%).
  double mfu() const {
    const double m = std::isfinite(peak_gflops) && peak_gflops > 0 ? gflops() / peak_gflops : NAN;
    return m <= 1.0 ? m : NAN;
  }
  /// True when the measured rate is above the peak (see mfu()).
  bool above_peak() const { return std::isfinite(peak_gflops) && peak_gflops > 0 && gflops() > peak_gflops; }
};

/// Median (mean of the middle two for an even count), min and max of the timed steps.
void summarize(Result& r);

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
  CpuPeak cpu_peak;  ///< the CPU's peak per precision (bench/system_probe.h); empty without the cpu device
  std::string rss_scope;  ///< what the RSS peak covers
  std::vector<DeviceInfo> devices;
  std::vector<Result> results;
};

// ---------------------------------------------------------------------------------------
// Lists

/// Splits "a,b,c" at commas, dropping empty items.
std::vector<std::string> split_list(const std::string& s);
/// Parses a batch list like "16,32,...,1024" (the "..." continues the ratio of the two
/// numbers before it up to the number after it). Throws std::invalid_argument.
std::vector<int64_t> parse_batch_list(const std::string& s);
/// The configs one bench invocation runs for `names` (in order) with the given options:
/// sgemm expands to its sizes; batches (when non-empty) replace the default batch of the
/// model workloads; smoke shrinks to one warm-up + one timed step at a small batch;
/// warmup/timed >= 0 override the counts.
std::vector<WorkloadConfig> expand_configs(const std::vector<std::string>& names, bool gpu_shapes, bool smoke,
                                           const std::vector<int64_t>& batches, int warmup, int timed,
                                           const std::vector<std::string>& precisions);

}  // namespace kiln::bench
