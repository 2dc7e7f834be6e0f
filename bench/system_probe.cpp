// The host queries of bench/system_probe.h; the peak loop uses the widest vectors this
// build's flags allow (-march=native with KILN_NATIVE), like kiln's own kernels.
#include "bench/system_probe.h"
#include <malloc.h>
#include <omp.h>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#if defined(__AVX512F__) || defined(__AVX__) || defined(__SSE2__)
#include <immintrin.h>
#endif

namespace kiln::bench {

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

double measure_cpu_peak_gflops(int threads, double seconds) {
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
