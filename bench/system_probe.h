// What `kiln bench` and bench_libtorch learn about the machine they run on: the date, the
// CPU model and its measured FMA ceiling, a GPU's name and data-sheet peak, and the
// process's peak resident memory. Bodies in bench/system_probe.cpp (library kiln_bench_spec).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::bench {

/// Milliseconds on a steady clock (for timing steps).
inline double now_ms() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double, std::milli>(clock::now().time_since_epoch()).count();
}

/// The current date and time in UTC, ISO 8601 ("2024-05-01T12:00:00Z").
std::string iso_date_utc();
/// The "model name" line of /proc/cpuinfo ("unknown CPU" when absent).
std::string cpu_model_name();
/// The process's peak resident set (VmHWM of /proc/self/status) in bytes; -1 if unreadable.
int64_t process_peak_rss_bytes();
/// Returns freed heap to the OS and resets VmHWM to the current RSS (Linux >= 4.0:
/// "5" > /proc/self/clear_refs), so the next VmHWM read covers what ran since. Returns
/// false where the kernel refuses: VmHWM then stays the high-water mark since start.
bool reset_peak_rss();
/// The CPU's measured FLOP ceiling: `threads` OpenMP threads each run 12 independent
/// chains of vector FMAs (AVX-512, else AVX2+FMA, else SSE2 multiply-adds, else scalar:
/// the widest vectors this build's own kernels can use) from registers for about
/// `seconds`; the best of 5 rounds. This is the hardware's reachable fp32 peak at the
/// current clocks, independent of any GEMM library, so kiln and libtorch share it.
double measure_cpu_peak_gflops(int threads, double seconds = 0.05);

/// Dense (no sparsity) peak TFLOP/s of a GPU in one precision, from vendor data sheets.
struct GpuPeak {
  const char* key;  ///< matched as a whole word in the device name ("A10" does not match "A100")
  double fp32, tf32, bf16;  ///< TFLOP/s; NaN where the GPU has no such mode
};

/// The peak table, most specific keys first (shown by `kiln bench --help`).
const std::vector<GpuPeak>& gpu_peak_table();
/// Peak GFLOP/s of the named GPU for "fp32" | "tf32" | "bf16"; NaN when the GPU is not in
/// the table or has no such mode ("peak unknown" is printed, never a guessed percentage).
double gpu_peak_gflops(const std::string& device_name, const std::string& precision);
/// The first NVIDIA GPU's model name from the driver's /proc files ("" when none): read
/// without the CUDA runtime, so both benches (and a build without CUDA) name the same GPU.
std::string nvidia_gpu_name();

}  // namespace kiln::bench
