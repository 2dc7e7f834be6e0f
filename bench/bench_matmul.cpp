// bench_matmul: times kiln::matmul against Eigen's own sgemm (MatrixXf product) side by
// side, interleaved A B A B, on square float32 matrices; prints median ms, GFLOP/s and
// the kiln/Eigen throughput ratio.   Usage: bench_matmul [threads]
// GCC 12 reports false -Wmaybe-uninitialized inside Eigen's AVX-512 paths (-march=native).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"  // same Eigen AVX-512 code at -O1
#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "kiln/kiln.h"

namespace {

double now_ms() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double, std::milli>(clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) {
    int t = std::atoi(argv[1]);
    if (t < 1) {
      std::fprintf(stderr, "usage: %s [threads >= 1]\n", argv[0]);
      return 2;
    }
    kiln::set_num_threads(t);
  }
  const int threads = kiln::get_num_threads();
  Eigen::setNbThreads(threads);
  const int warmup = 2, reps = 10;
  std::printf("bench_matmul: float32 C = A @ B, %d threads, %d warm-up + %d timed runs each, interleaved\n",
              threads, warmup, reps);
  std::printf("%6s  %12s %12s  %12s %12s  %12s\n", "n", "kiln ms", "kiln GF/s", "eigen ms", "eigen GF/s",
              "kiln/eigen");
  kiln::manual_seed(0);
  for (int64_t n : {256, 1024, 2048}) {
    kiln::Tensor a = kiln::randn({n, n}), b = kiln::randn({n, n});
    // The same values in Eigen's own (column-major) matrices.
    Eigen::MatrixXf ea = Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
        a.data<float>(), n, n);
    Eigen::MatrixXf eb = Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
        b.data<float>(), n, n);
    Eigen::MatrixXf ec(n, n);
    kiln::Tensor c;
    std::vector<double> tk, te;
    for (int i = 0; i < warmup + reps; ++i) {
      // Drop the previous result outside the timed region: the timed call then allocates
      // its output as a steady-state training loop does (the freed block is reused), not
      // while the last result is still alive.
      c = kiln::Tensor();
      double t0 = now_ms();
      c = kiln::matmul(a, b);
      double t1 = now_ms();
      ec.noalias() = ea * eb;
      double t2 = now_ms();
      if (i >= warmup) {
        tk.push_back(t1 - t0);
        te.push_back(t2 - t1);
      }
    }
    // sanity: both products agree
    const float* cp = c.data<float>();
    double maxdiff = 0;
    for (int64_t i = 0; i < n; i += std::max<int64_t>(1, n / 64))
      for (int64_t j = 0; j < n; ++j) maxdiff = std::max(maxdiff, double(std::fabs(cp[i * n + j] - ec(i, j))));
    const double mk = median(tk), me = median(te);
    const double flop = 2.0 * double(n) * double(n) * double(n);
    const double gk = flop / (mk * 1e6), ge = flop / (me * 1e6);
    std::printf("%6lld  %12.3f %12.1f  %12.3f %12.1f  %11.1f%%%s\n", static_cast<long long>(n), mk, gk, me, ge,
                100.0 * gk / ge, maxdiff > 1e-2 * std::sqrt(double(n)) ? "  (RESULTS DIFFER)" : "");
  }
  return 0;
}
