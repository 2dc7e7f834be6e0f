// Course chapter 5 (docs/course/05-why-gpus-are-fast.md): the roofline. A kernel's speed is
// capped by the processor's arithmetic peak or by how fast memory feeds it, whichever its
// arithmetic intensity (FLOPs per byte moved) hits first. Measured here on the CPU: memory
// bandwidth from a large copy, GEMM and elementwise rates at several sizes; then the same
// reasoning with an H200's vendor figures.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>
#include <vector>
#include <kiln/kiln.h>

using kiln::Tensor;

template <class F>
static double best_seconds(int reps, const F& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  const int threads = 2;
  kiln::set_num_threads(threads);
  kiln::manual_seed(0);
  kiln::NoGradGuard ng;

  // Memory bandwidth: copy 64 MiB (read 64, write 64).
  const int64_t n = quick ? (int64_t(1) << 20) : (int64_t(1) << 24);
  const Tensor src = kiln::randn({n});
  Tensor dst = kiln::empty({n});
  const double copy_s = best_seconds(5, [&] { dst.copy_(src); });
  const double bw = 2.0 * 4.0 * double(n) / copy_s / 1e9;  // GB/s
  // Elementwise add: 1 FLOP per 12 bytes (two reads, one write of float32).
  const Tensor other = kiln::randn({n});
  const double add_s = best_seconds(5, [&] { dst = kiln::add(src, other); });
  std::printf("CPU, %d threads: memory bandwidth (a %lld MiB copy) %.1f GB/s\n\n", threads,
              (long long)(4 * n >> 20), bw);

  // GEMM n x n x n: 2 n^3 FLOPs over 3 n^2 floats, intensity n / 6 FLOP per byte. The
  // peak is the best rate measured; the roof at an intensity is min(peak, intensity x BW).
  std::vector<std::pair<int64_t, double>> gemm;
  for (int64_t m : {8, 32, 128, 512, quick ? 512 : 1024}) {
    const Tensor a = kiln::randn({m, m}), b = kiln::randn({m, m});
    const double s = best_seconds(m <= 128 ? 50 : 5, [&] { kiln::matmul(a, b); });
    gemm.emplace_back(m, 2.0 * double(m) * double(m) * double(m) / s / 1e9);
  }
  double peak = 0;
  for (const auto& g : gemm) peak = std::max(peak, g.second);
  std::printf("%6s %14s %12s %12s %12s\n", "GEMM n", "FLOP per byte", "GFLOP/s", "roof", "of roof");
  for (const auto& [m, rate] : gemm) {
    const double ai = double(m) / 6.0, roof = std::min(peak, ai * bw);
    std::printf("%6lld %14.1f %12.1f %12.1f %11.0f%%\n", (long long)m, ai, rate, roof, 100 * rate / roof);
  }
  const double add_roof = bw / 12.0;
  std::printf("%6s %14.3f %12.2f %12.2f %11.0f%%\n", "add", 1.0 / 12, double(n) / add_s / 1e9, add_roof,
              100 * double(n) / add_s / 1e9 / add_roof);
  std::printf("\nridge point of this CPU: %.0f GFLOP/s / %.1f GB/s = %.1f FLOP per byte\n", peak, bw, peak / bw);

  // The same arithmetic with an H200's vendor figures (not measured here).
  const double h_bw = 4800, h_fp32 = 67e3, h_bf16 = 989e3;  // GB/s, GFLOP/s (dense)
  std::printf("H200 (vendor peaks): HBM3e %.1f TB/s; fp32 %.0f TFLOP/s, bf16 Tensor Cores %.0f TFLOP/s\n",
              h_bw / 1e3, h_fp32 / 1e3, h_bf16 / 1e3);
  std::printf("  ridge points: fp32 %.0f, bf16 %.0f FLOP per byte; an elementwise add runs at most %.0f GFLOP/s\n",
              h_fp32 / h_bw, h_bf16 / h_bw, h_bw / 12.0);
  return bw > 0 && peak > 0 ? 0 : 1;  // times are printed, never asserted
}
