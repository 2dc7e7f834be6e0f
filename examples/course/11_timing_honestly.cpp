// Course chapter 11 (docs/course/11-timing-honestly.md): how to time a training step, and
// a CPU against a GPU, without fooling yourself: warm-up, the spread of repeated runs and
// why the median, the fixed cost of every op (launch overhead), GFLOP/s, and on a GPU the
// asynchrony that makes an unsynchronised clock measure nothing.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>
#include <kiln/kiln.h>

using kiln::Tensor;

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Milliseconds of each of n calls of f.
std::vector<double> time_each(int n, const std::function<void()>& f) {
  std::vector<double> ms;
  for (int i = 0; i < n; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(ms_since(t0));
  }
  return ms;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";  // CTest: fewer repetitions
  kiln::set_num_threads(2);
  kiln::manual_seed(0);

  // ---- 1. warm-up: the first steps pay for things the later ones reuse
  kiln::models::ConvNet model;
  kiln::optim::SGD opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});
  const Tensor x = kiln::randn({64, 1, 28, 28}), y = kiln::randint(0, 10, {64});
  auto step = [&] {
    opt.zero_grad();
    kiln::cross_entropy(model(x), y).backward();
    opt.step();
  };
  const std::vector<double> first = time_each(6, step);
  std::printf("1. ConvNet training steps (batch 64, CPU, 2 threads), each timed on its own:\n  ");
  for (size_t i = 0; i < first.size(); ++i) std::printf(" step %zu %.1f ms ", i + 1, first[i]);
  std::printf("\n   the first step took %.1fx the median of the next five\n\n",
              first[0] / median(std::vector<double>(first.begin() + 1, first.end())));

  // ---- 2. the spread of one step timed many times
  const int reps = quick ? 10 : 40;
  std::vector<double> ms = time_each(reps, step);
  const double mean = std::accumulate(ms.begin(), ms.end(), 0.0) / double(ms.size());
  const auto [lo, hi] = std::minmax_element(ms.begin(), ms.end());
  std::printf("2. the same step %d more times: min %.1f  median %.1f  mean %.1f  max %.1f ms (max/min %.2f)\n",
              reps, *lo, median(ms), mean, *hi, *hi / *lo);
  // the run a background job disturbs: every fourth step shares the cores with a busy thread
  std::vector<double> busy;
  for (int i = 0; i < reps; ++i) {
    const bool disturb = i % 4 == 0;
    std::atomic<bool> stop{false};
    std::thread noise;
    if (disturb)
      noise = std::thread([&] {
        volatile double s = 0;
        while (!stop) s = s + 1.0;
      });
    const auto t0 = std::chrono::steady_clock::now();
    step();
    busy.push_back(ms_since(t0));
    stop = true;
    if (noise.joinable()) noise.join();
  }
  const double bmean = std::accumulate(busy.begin(), busy.end(), 0.0) / double(busy.size());
  std::printf("   with a busy thread on every 4th step: median %.1f (%+.0f%%)  mean %.1f (%+.0f%%) ms\n\n",
              median(busy), 100.0 * (median(busy) / median(ms) - 1), bmean, 100.0 * (bmean / mean - 1));

  // ---- 3. every op has a fixed cost: small ops measure it, not the arithmetic
  std::printf("3. c = a + b on n floats (CPU): time per call and per element\n");
  std::printf("   %10s %14s %14s\n", "n", "per call", "per element");
  for (int64_t n : {int64_t(1), int64_t(100), int64_t(10000), int64_t(1000000)}) {
    const Tensor a = kiln::randn({n}), b = kiln::randn({n});
    const int calls = int(std::max<int64_t>(20, (quick ? 2000000 : 20000000) / (n + 1000)));
    std::vector<double> t = time_each(5, [&] {
      for (int i = 0; i < calls; ++i) (void)(a + b);
    });
    const double per_call_us = 1000.0 * median(t) / calls;
    std::printf("   %10lld %11.2f us %11.3f ns\n", (long long)n, per_call_us, 1000.0 * per_call_us / double(n));
  }
  std::printf("\n");

  // ---- 4. GFLOP/s of a matrix product: work done per second, the basis of MFU
  const int64_t n = quick ? 256 : 1024;
  const Tensor A = kiln::randn({n, n}), B = kiln::randn({n, n});
  (void)kiln::matmul(A, B);  // warm-up
  const double mm = median(time_each(quick ? 3 : 7, [&] { (void)kiln::matmul(A, B); }));
  const double gflops = 2.0 * double(n) * double(n) * double(n) / (mm * 1e6);
  std::printf("4. matmul %lld x %lld x %lld (CPU, float32): median %.2f ms = %.1f GFLOP/s (2 n^3 / time)\n\n",
              (long long)n, (long long)n, (long long)n, mm, gflops);

  // ---- 5. on a GPU: kernels are queued, the clock must wait for them
  if (!kiln::cuda::is_available()) {
    std::printf("5. no GPU here: the GPU timings (unsynchronised clock, CUDA events, CPU/GPU ratios)\n"
                "   run where kiln is built with CUDA and a GPU is visible\n");
    return 0;
  }
  const kiln::Device gpu = kiln::Device::cuda(0);
  const Tensor Ag = A.to(gpu), Bg = B.to(gpu);
  (void)kiln::matmul(Ag, Bg);
  kiln::cuda::synchronize();
  std::printf("5. the same matmul on %s:\n", kiln::cuda::device_name().c_str());
  for (int64_t size : {int64_t(64), int64_t(256), n}) {
    const Tensor a = Ag.narrow(0, 0, size).narrow(1, 0, size).contiguous(),
                 b = Bg.narrow(0, 0, size).narrow(1, 0, size).contiguous();
    const Tensor ac = a.to(kiln::Device::cpu()), bc = b.to(kiln::Device::cpu());
    const int calls = 20;
    kiln::cuda::synchronize();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) (void)kiln::matmul(a, b);
    const double queued = ms_since(t0) / calls;  // wrong: the kernels may not have run yet
    kiln::cuda::synchronize();
    kiln::cuda::Event start, end;
    start.record();
    for (int i = 0; i < calls; ++i) (void)kiln::matmul(a, b);
    end.record();
    const double gpu_ms = double(start.elapsed_ms(end)) / calls;  // right: events around the work
    const double cpu_ms = median(time_each(3, [&] { (void)kiln::matmul(ac, bc); }));
    std::printf("   n %5lld: clock without sync %.3f ms, CUDA events %.3f ms, CPU %.3f ms: GPU %.1fx faster\n",
                (long long)size, queued, gpu_ms, cpu_ms, cpu_ms / gpu_ms);
  }
  return 0;
}
