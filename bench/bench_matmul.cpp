// bench_matmul: times kiln::matmul against Eigen's own sgemm (an Eigen matrix product)
// side by side, interleaved A B A B, on square float32 matrices and on the GEMM shapes of
// the workloads' training steps (transposed operands as views, as the backward passes
// them); prints median ms, GFLOP/s and the kiln/Eigen throughput ratio.
// With a second argument bf16 or fp16 it times kiln's 16-bit matmul (16-bit operands and
// result, float32 accumulation) against kiln's float32 one on the same shapes instead:
// the cost of the conversions, which issue 18 wants at or below nothing.
// Usage: bench_matmul [threads] [bf16|fp16]
// GCC 12 reports false -Wmaybe-uninitialized inside Eigen's AVX-512 paths (-march=native).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"  // same Eigen AVX-512 code at -O1
#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
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
      std::fprintf(stderr, "usage: %s [threads >= 1] [bf16|fp16]\n", argv[0]);
      return 2;
    }
    kiln::set_num_threads(t);
  }
  // 16-bit mode: kiln's bf16/fp16 product against kiln's float32 one (not Eigen)
  const std::string half = argc > 2 ? argv[2] : "";
  if (!half.empty() && half != "bf16" && half != "fp16") {
    std::fprintf(stderr, "usage: %s [threads >= 1] [bf16|fp16] (got '%s')\n", argv[0], half.c_str());
    return 2;
  }
  const kiln::DType hdt = half == "fp16" ? kiln::DType::float16 : kiln::DType::bfloat16;
  const int threads = kiln::get_num_threads();
  Eigen::setNbThreads(threads);
  const int warmup = 2;
  std::printf("bench_matmul: %s, %d threads, %d warm-up + 10-100 timed runs each (more for small products), "
              "interleaved, medians\n", half.empty() ? "float32 against Eigen" : (half + " against kiln float32").c_str(),
              threads, warmup);
  const std::string kname = half.empty() ? "kiln" : "kiln " + half, oname = half.empty() ? "eigen" : "kiln fp32";
  std::printf("%-22s %12s %12s  %12s %12s  %11s\n", "C = op(A) op(B)", (kname + " ms").c_str(),
              (kname + " GF/s").c_str(), (oname + " ms").c_str(), (oname + " GF/s").c_str(),
              half.empty() ? "kiln/eigen" : "16/32 bit");
  kiln::manual_seed(0);
  using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  struct Shape {
    const char* name;
    int64_t M, N, K;
    bool ta, tb;  // A stored (K, M) / B stored (N, K), passed transposed
  };
  const Shape shapes[] = {
      {"square 256", 256, 256, 256, false, false},
      {"square 1024", 1024, 1024, 1024, false, false},
      {"square 2048", 2048, 2048, 2048, false, false},
      {"gpt qkv x W^T", 2048, 384, 128, false, true},     // linear forward
      {"gpt qkv dY W", 2048, 128, 384, false, false},     // input gradient
      {"gpt qkv dY^T x", 384, 128, 2048, true, false},    // weight gradient
      {"gpt fc x W^T", 2048, 512, 128, false, true},
      {"gpt fc2 x W^T", 2048, 128, 512, false, true},
      {"gpt fc2 dY^T x", 128, 512, 2048, true, false},
      {"convnet W cols", 64, 1568, 576, false, false},    // 32 -> 64 channels at 14x14
      {"convnet dY cols^T", 64, 576, 1568, false, true},  // its weight gradient
      {"convnet W^T dY", 576, 1568, 64, true, false},     // its input gradient (columns)
      {"lenet W cols", 16, 1600, 150, false, false},      // 6 -> 16 channels, 5x5
  };
  for (const Shape& sh : shapes) {
    const int64_t M = sh.M, N = sh.N, K = sh.K;
    kiln::Tensor a = sh.ta ? kiln::randn({K, M}) : kiln::randn({M, K});
    kiln::Tensor b = sh.tb ? kiln::randn({N, K}) : kiln::randn({K, N});
    // The same values in Eigen matrices, multiplied with the same transposes.
    RowMat ea = Eigen::Map<const RowMat>(a.data<float>(), a.size(0), a.size(1));
    RowMat eb = Eigen::Map<const RowMat>(b.data<float>(), b.size(0), b.size(1));
    RowMat ec(M, N);
    auto eigen_product = [&] {
      if (sh.ta && sh.tb) ec.noalias() = ea.transpose() * eb.transpose();
      else if (sh.ta) ec.noalias() = ea.transpose() * eb;
      else if (sh.tb) ec.noalias() = ea * eb.transpose();
      else ec.noalias() = ea * eb;
    };
    const double flop = 2.0 * double(M) * double(N) * double(K);
    const int reps = std::clamp(int(4e9 / flop), 10, 100);
    kiln::Tensor ah, bh, c32;  // the 16-bit mode's operands and its float32 result
    if (!half.empty()) ah = a.to(hdt), bh = b.to(hdt);
    kiln::Tensor c;
    std::vector<double> tk, te;
    for (int i = 0; i < warmup + reps; ++i) {
      // Drop the previous result outside the timed region: the timed call then allocates
      // its output as a steady-state training loop does (the freed block is reused), not
      // while the last result is still alive.
      c = kiln::Tensor();
      c32 = kiln::Tensor();
      double t0 = now_ms();
      double t1, t2;
      if (half.empty()) {
        c = kiln::matmul(sh.ta ? a.t() : a, sh.tb ? b.t() : b);
        t1 = now_ms();
        eigen_product();
        t2 = now_ms();
      } else {
        c = kiln::matmul(sh.ta ? ah.t() : ah, sh.tb ? bh.t() : bh);
        t1 = now_ms();
        c32 = kiln::matmul(sh.ta ? a.t() : a, sh.tb ? b.t() : b);
        t2 = now_ms();
      }
      if (i >= warmup) {
        tk.push_back(t1 - t0);
        te.push_back(t2 - t1);
      }
    }
    // sanity: both products agree (the 16-bit one to its rounding)
    if (!half.empty()) c = c.to(kiln::DType::float32);
    const float* cp = c.data<float>();
    const float* rp = half.empty() ? nullptr : c32.data<float>();
    double maxdiff = 0;
    for (int64_t i = 0; i < M; i += std::max<int64_t>(1, M / 64))
      for (int64_t j = 0; j < N; ++j)
        maxdiff = std::max(maxdiff, double(std::fabs(cp[i * N + j] - (rp ? rp[i * N + j] : ec(i, j)))));
    const double mk = median(tk), me = median(te);
    const double gk = flop / (mk * 1e6), ge = flop / (me * 1e6);
    std::printf("%-22s %12.3f %12.1f  %12.3f %12.1f  %10.1f%%%s\n", sh.name, mk, gk, me, ge, 100.0 * gk / ge,
                maxdiff > (half.empty() ? 1e-2 : 0.2) * std::sqrt(double(K)) ? "  (RESULTS DIFFER)" : "");
  }
  return 0;
}
