// Course chapter 10 (docs/course/10-autotuning-tf32.md): two switches that change how fast
// float32 work runs on a GPU, and how to measure what they change.
//   TF32: Tensor Cores multiply float32 inputs rounded to 10 bits of mantissa (TF32),
//         accumulating in float32. What that does to a product's accuracy is measured here
//         by rounding the inputs the same way; its speed needs a GPU (part 3).
//   Autotuning: one convolution has several algorithms and the fastest depends on the
//         shape; cuDNN's benchmark mode times them and keeps the winner per shape. kiln's
//         CPU convolutions are the same story, measured here: three algorithms, three
//         shapes, the fastest against kiln's rule.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>
#include <kiln/kiln.h>
#include "kiln/ops/cpu/conv_algos.h"  // the CPU convolution algorithms (internal, as bench --ladder uses them)

using kiln::Tensor;

namespace {

// float32 -> the nearest TF32 value (1 sign, 8 exponent, 10 mantissa bits), as a float.
float round_to_tf32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x00000fffu + ((u >> 13) & 1u)) & 0xffffe000u;  // RNE, 13 bits
  std::memcpy(&f, &u, 4);
  return f;
}

Tensor map(const Tensor& t, float (*f)(float)) {
  std::vector<float> v = t.contiguous().to_vector<float>();
  for (float& x : v) x = f(x);
  return kiln::from_vector(v, t.shape());
}
float to_bf16(float f) { return kiln::round_to_bf16(f); }

// Largest |c - ref| over the largest |ref|.
double rel_error(const Tensor& c, const Tensor& ref) {
  const std::vector<double> a = c.to(kiln::DType::float64).contiguous().to_vector<double>();
  const std::vector<double> b = ref.contiguous().to_vector<double>();
  double err = 0, top = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::fabs(a[i] - b[i]));
    top = std::max(top, std::fabs(b[i]));
  }
  return err / top;
}

std::string cell(double ms) {
  if (!std::isfinite(ms)) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", ms);
  return b;
}

double median_ms(int reps, const std::function<void()>& f) {
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";  // CTest: smaller shapes
  kiln::set_num_threads(2);
  kiln::manual_seed(0);

  // ---- 1. what TF32 does to a product: C = A B (64 x K times K x 64) against float64
  std::printf("1. C = A B (64 x K by K x 64, normal entries): largest error / largest |C|, float64 reference\n");
  std::printf("   %6s %14s %22s %22s\n", "K", "float32", "TF32 inputs (emulated)", "bf16 inputs");
  for (int64_t K : {int64_t(64), int64_t(512), int64_t(4096)}) {
    const Tensor A = kiln::randn({64, K}), B = kiln::randn({K, 64});
    const Tensor ref = kiln::matmul(A.to(kiln::DType::float64), B.to(kiln::DType::float64));
    // the Tensor Core product of rounded inputs: products exact, sums in float32
    const Tensor c32 = kiln::matmul(A, B), ctf = kiln::matmul(map(A, round_to_tf32), map(B, round_to_tf32)),
                 cbf = kiln::matmul(map(A, to_bf16), map(B, to_bf16));
    std::printf("   %6lld %14.1e %22.1e %22.1e\n", (long long)K, rel_error(c32, ref), rel_error(ctf, ref),
                rel_error(cbf, ref));
  }
  std::printf("   (units of rounding: float32 2^-24 = 6.0e-08, TF32 2^-11 = 4.9e-04, bf16 2^-8 = 3.9e-03)\n\n");

  // ---- 2. autotuning: time every algorithm for each shape, keep the fastest
  struct Shape {
    const char* name;
    int64_t N, C, H, O, k, stride;
  };
  const int64_t n = quick ? 2 : 64;
  const Shape shapes[] = {{"ConvNet conv2: 32->64 3x3, 28x28", n, 32, 28, 64, 3, 1},
                          {"ConvNet conv1: 1->32 3x3, 28x28", n, 1, 28, 32, 3, 1},
                          {"a 3-channel stem: 3->16 3x3, 32x32", n, 3, 32, 16, 3, 1},
                          {"downsampling: 64->64 3x3 stride 2, 28x28", n, 64, 28, 64, 3, 2}};
  std::printf("2. conv2d forward on the CPU (batch %lld, 2 threads): each algorithm that applies, median ms\n",
              (long long)n);
  std::printf("   %-42s %9s %9s %9s   %-8s %s\n", "shape", "im2col", "wide", "direct", "fastest", "kiln's rule");
  for (const Shape& s : shapes) {
    kiln::Conv2dGeom g{s.N, s.C, s.H, s.H, s.O, s.k, s.k, s.stride, s.stride, 1, 1, 1, 1, 1, 0, 0};
    g.OH = (s.H + 2 - s.k) / s.stride + 1, g.OW = g.OH;
    const Tensor x = kiln::randn({s.N, s.C, s.H, s.H}), w = kiln::randn({s.O, s.C, s.k, s.k});
    Tensor y = kiln::zeros({s.N, s.O, g.OH, g.OW});
    const float *xp = x.data<float>(), *wp = w.data<float>();
    float* yp = y.data<float>();
    auto over_samples = [&](const std::function<void(int64_t, int64_t)>& f) {
      kiln::parallel_for(0, s.N, 1, [&](int64_t lo, int64_t hi) { f(lo, hi); });
    };
    const int reps = quick ? 3 : 15;
    // every algorithm must give the same output before its time counts
    std::vector<float> want;
    auto agrees = [&](const char* name) {
      const std::vector<float> got = y.to_vector<float>();
      if (want.empty()) want = got;
      double worst = 0;
      for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, double(std::fabs(got[i] - want[i])));
      if (worst > 1e-3) std::printf("   %s disagrees with im2col by %.2e on %s\n", name, worst, s.name);
      return worst <= 1e-3;
    };
    const double im2col = median_ms(reps, [&] {
      over_samples([&](int64_t lo, int64_t hi) {
        kiln::conv_cpu::conv2d_forward_im2col<float>(1, g, xp, wp, nullptr, yp, lo, hi);
      });
    });
    bool ok = agrees("im2col");
    const bool wide_ok = s.stride == 1, direct_ok = s.stride == 1 && s.C <= 4;  // what each algorithm handles
    const double wide = !wide_ok ? NAN : median_ms(reps, [&] {
      over_samples([&](int64_t lo, int64_t hi) {
        kiln::conv_cpu::conv2d_forward_wide<float>(1, g, xp, wp, nullptr, yp, lo, hi);
      });
    });
    if (wide_ok) ok = agrees("wide") && ok;
    const double direct = !direct_ok ? NAN : median_ms(reps, [&] {
      over_samples([&](int64_t lo, int64_t hi) {
        kiln::conv_cpu::conv2d_forward_direct<float>(g, xp, wp, nullptr, yp, lo, hi);
      });
    });
    if (direct_ok) ok = agrees("direct") && ok;
    if (!ok) return 1;
    const char* names[] = {"im2col", "wide", "direct"};
    const double t[] = {im2col, wide, direct};
    int best = 0;
    for (int i = 1; i < 3; ++i)
      if (std::isfinite(t[i]) && t[i] < t[best]) best = i;
    const char* rule = kiln::conv_cpu::use_direct(g) ? "direct" : kiln::conv_cpu::use_wide(g) ? "wide" : "im2col";
    std::printf("   %-42s %9s %9s %9s   %-8s %s\n", s.name, cell(im2col).c_str(), cell(wide).c_str(),
                cell(direct).c_str(), names[best], rule);
  }
  std::printf("\n");

  // ---- 3. on a GPU: the same two switches, timed
  if (!kiln::cuda::is_available()) {
    std::printf("3. no GPU here: float32 against TF32 matmul and conv2d, and cuDNN's heuristic against its\n"
                "   benchmark mode, run where kiln is built with CUDA and a GPU is visible\n");
    return 0;
  }
  const kiln::Device gpu = kiln::Device::cuda(0);
  auto gpu_ms = [&](const std::function<void()>& f) {
    f();  // warm-up (and, in benchmark mode, the algorithm search)
    kiln::cuda::synchronize();
    kiln::cuda::Event start, end;
    start.record();
    for (int i = 0; i < 20; ++i) f();
    end.record();
    return double(start.elapsed_ms(end)) / 20;
  };
  const Tensor A = kiln::randn({4096, 4096}, {.device = gpu}), B = kiln::randn({4096, 4096}, {.device = gpu});
  const Tensor xc = kiln::randn({128, 64, 56, 56}, {.device = gpu}), wc = kiln::randn({64, 64, 3, 3}, {.device = gpu});
  std::printf("3. on %s, median of 20 (CUDA events):\n", kiln::cuda::device_name().c_str());
  for (const char* precision : {"highest", "high"}) {
    kiln::set_float32_matmul_precision(precision);
    const double mm = gpu_ms([&] { (void)kiln::matmul(A, B); });
    for (bool bench : {false, true}) {
      kiln::cudnn_benchmark(bench);
      const double cv = gpu_ms([&] { (void)kiln::conv2d(xc, wc, Tensor(), {.padding = {1, 1}}); });
      std::printf("   precision %-8s matmul 4096^3 %7.3f ms (%6.1f TFLOP/s)   conv 64->64 3x3 at 128x56x56, "
                  "%s: %.3f ms\n",
                  precision, mm, 2.0 * 4096.0 * 4096.0 * 4096.0 / (mm * 1e9), bench ? "benchmark mode" : "heuristic",
                  cv);
    }
  }
  kiln::set_float32_matmul_precision("highest");
  kiln::cudnn_benchmark(false);
  return 0;
}
