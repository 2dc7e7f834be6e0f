// The host queries of bench/system_probe.h; the peak loop uses the widest vectors this
// build's flags allow (-march=native with KILN_NATIVE), like kiln's own kernels.
#include "bench/system_probe.h"
#include <malloc.h>
#include <omp.h>
#include <algorithm>
#include <cctype>
#include <cstdarg>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <regex>
#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__AVX512F__) || defined(__AVX__) || defined(__SSE2__)
#include <immintrin.h>
#endif

namespace kiln::bench {

namespace {
std::string format(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}
}  // namespace

std::string iso_date_utc() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) return line.substr(line.find_first_not_of(" \t", p + 1));
    }
  return "unknown CPU";
}

int64_t process_peak_rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return int64_t(std::atoll(line.c_str() + 6)) * 1024;
  return -1;
}

bool reset_peak_rss() {
  malloc_trim(0);
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

double measure_cpu_peak_gflops(int threads, double seconds, int rounds) {
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
  for (int r = 0; r < rounds; ++r) {
    const double dt = run(iters);
    const double flops = double(threads) * double(iters) * kChains * kLanes * 2.0;
    best = std::max(best, flops / dt * 1e-9);
  }
  return best;
}

#if defined(__x86_64__) && defined(__AVX512F__)
__attribute__((target("avx512f,avx512bf16"))) static double bf16_chains(int threads, int64_t iters) {
  double sink = 0.0;
  const double t0 = now_ms();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
  {
    __m512 acc[24];
    for (int k = 0; k < 24; ++k) acc[k] = _mm512_set1_ps(1e-3f * float(k + 1));
    __m512bh a = (__m512bh)_mm512_set1_epi32(0x3F803F80), b = (__m512bh)_mm512_set1_epi32(0x33803380);  // 1, 6e-8
    for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 24
      for (int k = 0; k < 24; ++k) acc[k] = _mm512_dpbf16_ps(acc[k], a, b);
      __asm__ volatile("" : "+v"(a));  // keeps the loop from being folded
    }
    float f[16];
    for (int k = 0; k < 24; ++k) {
      _mm512_storeu_ps(f, acc[k]);
      sink += f[0];
    }
  }
  const double dt = (now_ms() - t0) * 1e-3;
  if (sink == 12345.0) std::fputs("", stderr);
  return double(threads) * double(iters) * 24 * 64 / dt * 1e-9;
}
#endif

double measure_cpu_bf16_gflops(int threads, double seconds, int rounds) {
#if defined(__x86_64__) && defined(__AVX512F__)
  if (!cpu_features().avx512_bf16) return NAN;
  const int64_t iters = std::max<int64_t>(10000, int64_t(seconds * 1.2e8));  // ~24 cycles an iteration
  double best = 0.0;
  for (int r = 0; r < rounds; ++r) best = std::max(best, bf16_chains(threads, iters));
  return best;
#else
  (void)threads, (void)seconds, (void)rounds;
  return NAN;
#endif
}

double measure_cpu_clock_ghz(int threads, int rounds) {
#if defined(__x86_64__)
  // A chain of dependent 64-bit multiplies: 3 cycles each on every x86-64 core since
  // Nehalem and Zen. (Not adds of an immediate: Golden Cove and later fold those at
  // register renaming, several per cycle.)
  // Short rounds (0.3 ms): on a machine shared with other processes, some rounds run
  // without losing the core, and the best round is one of them.
  constexpr int64_t kIters = 36000;  // 8 multiplies each: 864,000 cycles
  double best = 0.0;
  for (int r = 0; r < rounds; ++r) {
    double slowest = INFINITY;  // the round's rate is its slowest thread's
#pragma omp parallel num_threads(threads) reduction(min : slowest)
    {
      uint64_t x = 1;
      const double t0 = now_ms();
      for (int64_t i = 0; i < kIters; ++i)
        asm volatile(
            "imul %0, %0\n\timul %0, %0\n\timul %0, %0\n\timul %0, %0\n\t"
            "imul %0, %0\n\timul %0, %0\n\timul %0, %0\n\timul %0, %0"
            : "+r"(x));
      const double dt_s = (now_ms() - t0) * 1e-3;
      slowest = std::min(slowest, double(kIters) * 8.0 * 3.0 / dt_s * 1e-9 + 0.0 * double(x));
    }
    best = std::max(best, slowest);
  }
  return best > 0.0 ? best : NAN;
#else
  (void)threads, (void)rounds;
  return NAN;
#endif
}

CpuFeatures cpu_features() {
  CpuFeatures f;
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!__get_cpuid_count(1, 0, &a, &b, &c, &d)) return f;
  const bool fma = c & (1u << 12), osxsave = c & (1u << 27);
  const int base_family = int((a >> 8) & 0xF);
  f.family = base_family == 0xF ? base_family + int((a >> 20) & 0xFF) : base_family;
  f.model = int((a >> 4) & 0xF) | (base_family == 0x6 || base_family == 0xF ? int((a >> 16) & 0xF) << 4 : 0);
  if (!osxsave) return f;
  unsigned xlo, xhi;
  asm volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
  const bool os_avx = (xlo & 0x6) == 0x6, os_avx512 = (xlo & 0xE6) == 0xE6;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2_fma = os_avx && fma && (b & (1u << 5));
  f.avx512f = os_avx512 && (b & (1u << 16));
  f.avx512_fp16 = f.avx512f && (d & (1u << 23));
  const bool amx = (d & (1u << 22)) && (d & (1u << 24));  // AMX-BF16 and AMX-TILE
  unsigned a1, b1, c1, d1;
  if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) f.avx512_bf16 = f.avx512f && (a1 & (1u << 5));
  // Linux hands out the AMX tile state only on request (ARCH_REQ_XCOMP_PERM, XTILEDATA)
  if (amx) f.amx_bf16 = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#endif
  return f;
}

CpuCoreRates cpu_core_rates(const std::string& m, const CpuFeatures& f) {
  CpuCoreRates r;
  auto has = [&](const char* s) { return m.find(s) != std::string::npos; };
  std::string units;
  if (f.avx512f) {
    r.fp32 = 64;  // two 512-bit FMA units
    units = "2 FMA units";
    if (has("AMD")) {
      // Zen 4 (EPYC 9xx4/8xx4/4xx4, Ryzen 7000/8000) splits 512-bit ops over 256-bit units;
      // Zen 5 (EPYC 9xx5, Ryzen 9000) has full-width units
      if (f.family < 0x1A && !std::regex_search(m, std::regex("EPYC 9[0-9][0-9]5|Ryzen.* 9[0-9][0-9][0-9]"))) {
        r.fp32 = 32;
        units = "256-bit units (Zen 4)";
      }
    } else if (!f.avx512_fp16 && (has("Bronze") || has("Silver") ||
                                  (std::regex_search(m, std::regex("Gold 5[0-9][0-9][0-9]")) && !has("Gold 5122") &&
                                   !has("Gold 5222")))) {
      r.fp32 = 32;  // Skylake / Cascade Lake parts with one 512-bit FMA unit
      units = "1 FMA unit";
    }
    r.isa = "AVX-512, " + units;
  } else if (f.avx2_fma && has("AMD") && f.family == 0x17 && f.model < 0x30) {
    r.fp32 = 16;  // Zen 1 / Zen+ (EPYC 7xx1, Ryzen 1000/2000): a 256-bit op is two 128-bit halves
    r.isa = "AVX2+FMA, 128-bit units (Zen 1)";
  } else if (f.avx2_fma) {
    r.fp32 = 32;
    r.isa = "AVX2+FMA, 2 FMA units";
  } else {
    r.fp32 = 8;
    r.isa = "SSE2";
  }
  // bf16: AMX tiles (1024 FLOP per cycle); else the faster of the fp32 units (bf16 can always
  // be computed in fp32) and VDPBF16PS (64 FLOP an instruction): one per cycle on AMD Zen 4
  // (twice its FMA rate), about one per two cycles measured on this project's Intel machine
  // (an AVX512_FP16 Xeon: 24 independent chains reach 80 GFLOP/s a core against 170 for
  // FMAs; `kiln bench` prints both loops), so 32 there, and the FMAs win. fp16: twice the
  // fp32 rate with AVX512_FP16.
  const double dot = f.avx512_bf16 ? (has("AMD") ? 2 * r.fp32 : 32.0) : 0.0;
  r.bf16 = f.amx_bf16 ? 1024.0 : std::max(r.fp32, dot);
  r.fp16 = f.avx512_fp16 ? 2 * r.fp32 : r.fp32;
  if (f.avx512_bf16) r.isa += ", AVX512_BF16";
  if (f.avx512_fp16) r.isa += ", AVX512_FP16";
  if (f.amx_bf16) r.isa += ", AMX-BF16";
  return r;
}

CpuPeak combine_cpu_peak(const CpuCoreRates& rates, int threads, double clock_ghz, double loop_gflops) {
  CpuPeak p;
  p.rates = rates, p.threads = threads, p.clock_ghz = clock_ghz, p.loop_gflops = loop_gflops;
  const double table = rates.fp32 * threads * clock_ghz;
  if (!std::isfinite(table)) {
    p.fp32_gflops = loop_gflops;
    p.method = "fma-loop (clock not measurable here)";
  } else if (std::isfinite(loop_gflops) && loop_gflops > 1.1 * table) {
    p.fp32_gflops = loop_gflops;
    p.method = "fma-loop";
    p.note = format("the FMA loop (%.1f GFLOP/s) beat the table's %.0f FLOP/cycle x %d threads x %.2f GHz = %.1f: the "
                 "table does not know this CPU (%s), so the loop is the peak",
                 loop_gflops, rates.fp32, threads, clock_ghz, table, rates.isa.c_str());
  } else {
    p.fp32_gflops = table;
    p.method = format("%.0f FLOP/cycle (%s) x %d threads x %.2f GHz measured", rates.fp32, rates.isa.c_str(), threads,
                   clock_ghz);
    if (std::isfinite(loop_gflops) && loop_gflops < 0.75 * table)
      p.note = format("the FMA loop reached only %.0f%% of this peak (%.1f GFLOP/s): the machine was busy or throttled "
                   "while measuring, so timings of this run may be slow too",
                   100.0 * loop_gflops / table, loop_gflops);
  }
  p.bf16_gflops = p.fp32_gflops * rates.bf16 / rates.fp32;
  p.fp16_gflops = p.fp32_gflops * rates.fp16 / rates.fp32;
  return p;
}

double CpuPeak::gflops(const std::string& precision) const {
  return precision == "fp32" ? fp32_gflops : precision == "bf16" ? bf16_gflops : precision == "fp16" ? fp16_gflops
                                                                                                      : NAN;
}

CpuPeak probe_cpu_peak(int threads, double seconds) {
  const double clock = measure_cpu_clock_ghz(threads);
  // more, shorter rounds than a single long one: the best round is the one no other
  // process interrupted
  const double loop = measure_cpu_peak_gflops(threads, seconds / 2, 10);
  CpuPeak p = combine_cpu_peak(cpu_core_rates(cpu_model_name(), cpu_features()), threads, clock, loop);
  p.bf16_loop_gflops = measure_cpu_bf16_gflops(threads, seconds / 2, 10);
  return p;
}

const std::vector<GpuPeak>& gpu_peak_table() {
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

double gpu_peak_gflops(const std::string& device_name, const std::string& precision) {
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

std::string nvidia_gpu_name() {
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

}  // namespace kiln::bench
