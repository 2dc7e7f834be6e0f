// What `kiln bench` and bench_libtorch learn about the machine they run on: the date, the
// CPU model and its measured FMA ceiling, a GPU's name and data-sheet peak, and the
// process's peak resident memory. Bodies in bench/system_probe.cpp (library kiln_bench_spec).
#pragma once
#include <chrono>
#include <cmath>
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
/// the widest vectors this build's own kernels can use) from registers, in `rounds` short
/// rounds of about `seconds` each; the best round. The hardware's reachable fp32 rate at
/// the current clocks, independent of any GEMM library, so kiln and libtorch share it; on
/// a busy machine it comes out low (which is why it only cross-checks the peak below).
double measure_cpu_peak_gflops(int threads, double seconds = 0.05, int rounds = 5);

/// The bf16 counterpart of the FMA loop: 24 independent chains of VDPBF16PS per thread
/// (64 FLOP each; 24, because its latency is long), best of `rounds`. NaN where the CPU or
/// the build has no AVX512_BF16. A measurement of the per-cycle bf16 rate the table
/// assumes (cpu_core_rates), reported beside it.
double measure_cpu_bf16_gflops(int threads, double seconds = 0.05, int rounds = 5);

/// The clock the cores run at now, in GHz: each of `threads` threads runs a chain of
/// dependent integer multiplies (3 cycles each on every x86-64 core), best of `rounds` short
/// rounds (a round that lost its core to another process is slower and not the best).
/// NaN where not measurable (not x86-64).
double measure_cpu_clock_ghz(int threads, int rounds = 50);

/// What a CPU core can do per cycle, by instruction set: the basis of the CPU peak.
struct CpuCoreRates {
  std::string isa;          ///< "AVX-512, 2 FMA units, AVX512_BF16", ...
  double fp32 = NAN;        ///< FLOP per cycle per core, fp32 FMA
  double bf16 = NAN;        ///< bf16 dot products (VDPBF16PS; AMX TDPBF16PS where the OS allows it)
  double fp16 = NAN;        ///< fp16 FMA (AVX512_FP16; else fp32's: kiln computes fp16 in fp32)
};
/// The instruction-set features that decide the rates (from CPUID, or given in tests).
struct CpuFeatures {
  bool avx2_fma = false, avx512f = false, avx512_bf16 = false, avx512_fp16 = false, amx_bf16 = false;
  int family = 0;  ///< CPUID family (base + extended): on AMD 0x17 Zen 1/2, 0x19 Zen 3/4, 0x1A Zen 5
  int model = 0;   ///< CPUID model (base + extended << 4 for families 6 and 0xF): AMD 0x17 below 0x30 is Zen 1
};
/// This CPU's features (CPUID; AMX only when Linux grants the process its tile state).
CpuFeatures cpu_features();
/// The per-core rates of a CPU from its model name and features: a table of known
/// microarchitectures (AMD Zen 4 runs AVX-512 on 256-bit units: half of Intel's rate per
/// cycle; Zen 5, known by its name or, in a VM that hides it, by CPUID family 0x1A, does
/// not; Intel Xeon Bronze/Silver and Gold 5xxx of Skylake/Cascade Lake have one 512-bit
/// FMA unit; AVX512_FP16 marks Sapphire Rapids or later, two units; AMD Zen 1, family 0x17
/// below model 0x30, runs AVX2 on two 128-bit units), then the instruction set alone
/// (AVX-512: two FMA units, AVX2+FMA: two 256-bit units, else SSE: 8).
CpuCoreRates cpu_core_rates(const std::string& model_name, const CpuFeatures& f);

/// The CPU peak the MFU column divides by, for each precision: per-core rate (the table)
/// x threads x measured clock, cross-checked by the FMA loop. If the loop beats the table
/// by more than 10%, the table is wrong for this CPU and the loop is used; if it reaches
/// less than 75% of it, the machine was busy or throttled while measuring, which `note`
/// says (the table peak stands: a busy machine must not lower the peak and raise MFU).
struct CpuPeak {
  CpuCoreRates rates;
  int threads = 0;
  double clock_ghz = NAN;
  double loop_gflops = NAN;   ///< the FMA loop, best round
  double bf16_loop_gflops = NAN;  ///< the VDPBF16PS loop, best round (NaN without AVX512_BF16)
  double fp32_gflops = NAN, bf16_gflops = NAN, fp16_gflops = NAN;
  std::string method;         ///< how fp32_gflops was obtained, for the report
  std::string note;           ///< a disturbance seen while measuring ("" when none)
  /// The peak for a precision: "fp32", "bf16", "fp16" (NaN for others).
  double gflops(const std::string& precision) const;
};
/// Measures clock and loop and combines them with the table (`seconds`: per loop round).
CpuPeak probe_cpu_peak(int threads, double seconds = 0.05);
/// The combination itself (no measurement): used by probe_cpu_peak and the tests.
CpuPeak combine_cpu_peak(const CpuCoreRates& rates, int threads, double clock_ghz, double loop_gflops);

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
